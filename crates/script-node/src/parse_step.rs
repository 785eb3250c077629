//! Reading one step line of a scenario (see tests/client-behaviour/README.md):
//! its verb, its `name=value` options, then its words.

use crate::script::{Rule, Step, Timing, Where, DEFAULT_WITHIN_MS};

/// `name=value` options at the head of `rest`, and the words after them.
fn options(rest: &str) -> (Vec<(&str, &str)>, &str) {
    let mut opts = Vec::new();
    let mut tail = rest;
    while let Some((word, after)) = split_word(tail) {
        let Some((name, value)) = word.split_once('=') else {
            break;
        };
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_lowercase() || b == b'-') {
            break;
        }
        opts.push((name, value));
        tail = after;
    }
    (opts, tail)
}

pub(crate) fn split_word(text: &str) -> Option<(&str, &str)> {
    if text.is_empty() {
        return None;
    }
    Some(text.split_once(' ').unwrap_or((text, "")))
}

pub(crate) fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(format!("bad name {name:?}: letters, digits, - and _"))
    }
}

pub(crate) fn number(text: &str) -> Result<u64, String> {
    text.parse().map_err(|_| format!("not a number: {text}"))
}

fn timing(opts: &[(&str, &str)]) -> Result<Timing, String> {
    let mut timing = Timing {
        within_ms: DEFAULT_WITHIN_MS,
        after_ms: None,
        since: None,
    };
    for (name, value) in opts {
        match *name {
            "within" => timing.within_ms = number(value)?,
            "after" => timing.after_ms = Some(number(value)?),
            "since" => timing.since = Some((*value).to_owned()),
            _ => {}
        }
    }
    if timing
        .after_ms
        .is_some_and(|after| after > timing.within_ms)
    {
        return Err("after= is later than within=".into());
    }
    Ok(timing)
}

fn place(opts: &[(&str, &str)]) -> Where {
    let get = |want: &str| {
        opts.iter()
            .find(|(name, _)| *name == want)
            .map(|(_, v)| (*v).to_owned())
    };
    Where {
        at: get("at"),
        on: get("on"),
        not_on: get("not-on")
            .map(|list| list.split(',').map(str::to_owned).collect())
            .unwrap_or_default(),
    }
}

fn only_options(opts: &[(&str, &str)], allowed: &[&str]) -> Result<(), String> {
    match opts.iter().find(|(name, _)| !allowed.contains(name)) {
        Some((name, _)) => Err(format!("unknown option {name}=")),
        None => Ok(()),
    }
}

fn bind(opts: &[(&str, &str)]) -> Result<Option<String>, String> {
    match opts.iter().find(|(name, _)| *name == "as") {
        Some((_, value)) => check_name(value).map(|()| Some((*value).to_owned())),
        None => Ok(None),
    }
}

fn one_word(verb: &str, rest: &str) -> Result<String, String> {
    match rest.split(' ').collect::<Vec<_>>().as_slice() {
        [word] if !word.is_empty() => Ok((*word).to_owned()),
        _ => Err(format!("{verb} takes one word")),
    }
}

fn non_empty(verb: &str, rest: &str) -> Result<String, String> {
    if rest.is_empty() {
        Err(format!("{verb} needs a line"))
    } else {
        Ok(rest.to_owned())
    }
}

/// The options of a timed step.
const TIMING: [&str; 3] = ["within", "after", "since"];
/// The options that limit where a line may come from.
const FROM: [&str; 3] = ["at", "on", "not-on"];

/// One step line, its verb split off.
pub(crate) fn step(verb: &str, rest: &str) -> Result<Step, String> {
    if let Some(step) = control_step(verb, rest)? {
        return Ok(step);
    }
    let (opts, words) = options(rest);
    match verb {
        "do" => {
            only_options(&opts, &[])?;
            let (id, action) = split_word(words).ok_or("do <id> <action> ...")?;
            check_name(id)?;
            Ok(Step::Do {
                id: id.to_owned(),
                action: non_empty(verb, action)?,
            })
        }
        "cancel" => Ok(Step::Cancel {
            id: one_word(verb, words)?,
        }),
        "always" => {
            only_options(&opts, &FROM)?;
            let (pattern, reply) = words
                .split_once(" => ")
                .ok_or("always <pattern> => <line>|close")?;
            Ok(Step::Always {
                rule: Rule {
                    from: place(&opts),
                    pattern: non_empty(verb, pattern)?,
                    reply: (reply != "close").then(|| reply.to_owned()),
                },
            })
        }
        _ => awaited_step(verb, &opts, words),
    }
}

/// The steps that wait for something the client does.
fn awaited_step(verb: &str, opts: &[(&str, &str)], words: &str) -> Result<Step, String> {
    Ok(match verb {
        "outcome" => {
            only_options(opts, &TIMING)?;
            let (id, expected) = split_word(words).ok_or("outcome <id> <outcome>")?;
            Step::Outcome {
                timing: timing(opts)?,
                id: id.to_owned(),
                expected: non_empty(verb, expected)?,
            }
        }
        "expect" => {
            only_options(opts, &[&TIMING[..], &FROM[..], &["as"]].concat())?;
            Step::Expect {
                timing: timing(opts)?,
                from: place(opts),
                bind: bind(opts)?,
                pattern: non_empty(verb, words)?,
            }
        }
        "expect-connect" => {
            only_options(opts, &[&TIMING[..], &["at", "as"]].concat())?;
            if !words.is_empty() {
                return Err("expect-connect takes options only".into());
            }
            Step::ExpectConnect {
                timing: timing(opts)?,
                at: place(opts).at,
                bind: bind(opts)?,
            }
        }
        "expect-close" => {
            only_options(opts, &TIMING)?;
            Step::ExpectClose {
                timing: timing(opts)?,
                conn: one_word(verb, words)?,
            }
        }
        "absent" => {
            only_options(opts, &[&["within"][..], &FROM[..]].concat())?;
            Step::Absent {
                within_ms: timing(opts)?.within_ms,
                from: place(opts),
                pattern: non_empty(verb, words)?,
            }
        }
        other => return Err(format!("unknown step {other}")),
    })
}

/// The steps that act on the nodes (no options); `None` for other verbs.
fn control_step(verb: &str, rest: &str) -> Result<Option<Step>, String> {
    let word = || one_word(verb, rest);
    Ok(Some(match verb {
        "reply" => Step::Reply {
            line: non_empty(verb, rest)?,
        },
        "send" => {
            let (conn, line) = split_word(rest).ok_or("send <conn> <line>")?;
            Step::Send {
                conn: conn.to_owned(),
                line: non_empty(verb, line)?,
            }
        }
        "close" => Step::Close { target: word()? },
        "stall" => Step::Stall { target: word()? },
        "resume" => Step::Resume { target: word()? },
        "refuse" => Step::Refuse { node: word()? },
        "accept" => Step::Accept { node: word()? },
        "down" => Step::Down { node: word()? },
        "up" => Step::Up { node: word()? },
        "sleep" => Step::Sleep {
            ms: number(&word()?)?,
        },
        "mark" => {
            let name = word()?;
            check_name(&name)?;
            Step::Mark { name }
        }
        "check" => check_step(rest)?,
        _ => return Ok(None),
    }))
}

fn check_step(rest: &str) -> Result<Step, String> {
    match rest.split(' ').collect::<Vec<_>>().as_slice() {
        [node, counter, n] => {
            if !COUNTERS.contains(counter) {
                return Err(format!("unknown counter {counter}: {COUNTERS:?}"));
            }
            let (lo, hi) = match n.split_once("..") {
                Some((lo, hi)) => (number(lo)?, number(hi)?),
                None => (number(n)?, number(n)?),
            };
            Ok(Step::Check {
                node: (*node).to_owned(),
                counter: (*counter).to_owned(),
                lo: lo as usize,
                hi: hi as usize,
            })
        }
        _ => Err("check <node> <counter> <n>|<lo>..<hi>".into()),
    }
}

/// What `check` can count at a node.
pub const COUNTERS: [&str; 6] = [
    "accepted",
    "requests",
    "refused",
    "open",
    "authenticated",
    "unauthenticated",
];
