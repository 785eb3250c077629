//! The checker: from a run's [`History`] and the mode's [`Rules`] to the
//! list of broken promises, one function a rule.

use std::collections::HashMap;

use super::*;
use crate::chaos::busy::latest_end;

/// Checks `history` against every rule; an empty list means it kept every
/// promise.
pub fn check(history: &History, rules: &Rules) -> Vec<Violation> {
    let mut found = Vec::new();
    let grants: Vec<&Attempt> = history
        .attempts
        .iter()
        .filter(|a| a.granted().is_some())
        .collect();
    if grants.is_empty() {
        found.push(Violation::NoGrant);
    }
    unique_tokens(&grants, &mut found);
    rising_tokens(&grants, &mut found);
    answer_time(history, rules, &mut found);
    releases_applied(history, rules, &mut found);
    if rules.holds {
        holds(history, rules, &grants, &mut found);
    }
    found
}

fn unique_tokens(grants: &[&Attempt], found: &mut Vec<Violation>) {
    let mut first: HashMap<u64, &Attempt> = HashMap::new();
    for grant in grants {
        let Some((_, token)) = grant.granted() else {
            continue;
        };
        match first.get(&token) {
            Some(earlier) => found.push(Violation::DuplicateToken {
                token,
                first: (*earlier).clone(),
                again: (*grant).clone(),
            }),
            None => {
                first.insert(token, grant);
            }
        }
    }
}

/// A grant asked for after another grant's answer arrived carries a
/// greater token: sweep the grants by sending time, keeping the highest
/// token among those answered before.
fn rising_tokens(grants: &[&Attempt], found: &mut Vec<Violation>) {
    let mut by_answer: Vec<(Duration, u64, &Attempt)> = grants
        .iter()
        .filter_map(|g| g.granted().map(|(at, token)| (at, token, *g)))
        .collect();
    by_answer.sort_by_key(|(at, _, _)| *at);
    let mut by_sent: Vec<&Attempt> = grants.to_vec();
    by_sent.sort_by_key(|g| g.sent);
    let mut highest: Option<(u64, &Attempt)> = None;
    let mut next = 0;
    for later in by_sent {
        while next < by_answer.len() && by_answer[next].0 < later.sent {
            let (_, token, grant) = by_answer[next];
            if highest.is_none_or(|(top, _)| token > top) {
                highest = Some((token, grant));
            }
            next += 1;
        }
        let Some((_, token)) = later.granted() else {
            continue;
        };
        if let Some((top, earlier)) = highest {
            if token <= top {
                found.push(Violation::TokenNotRising {
                    earlier: earlier.clone(),
                    later: later.clone(),
                });
            }
        }
    }
}

fn answer_time(history: &History, rules: &Rules, found: &mut Vec<Violation>) {
    for attempt in &history.attempts {
        if let Some((_, Answer::Other(_))) = attempt.answer() {
            found.push(Violation::UnexpectedAnswer {
                attempt: attempt.clone(),
            });
        }
        let deadline = attempt.answer_deadline() + rules.answer_slack;
        let late = match &attempt.outcome {
            Outcome::Answered { at, .. } => *at > deadline,
            // A connection that closes is no answer either.
            Outcome::Lost { .. } | Outcome::Unanswered { .. } => true,
        };
        // Excused: the node was down, or went down since the connection
        // was opened (a restarted node's old connections are dead).
        let excused = history
            .outages
            .iter()
            .any(|o| o.node == attempt.node && o.overlaps(attempt.connected, deadline));
        if late && !excused {
            found.push(Violation::LateAnswer {
                attempt: attempt.clone(),
            });
        }
    }
}

/// Whether `node`'s answer at `at` may be undone by a fault (see [`Unsaved`]).
fn unsaved(history: &History, rules: &Rules, node: usize, at: Duration) -> bool {
    let Some(unsaved) = &rules.unsaved else {
        return false;
    };
    history.outages.iter().any(|o| {
        o.node == node
            && unsaved.kinds.contains(&o.kind)
            && o.from + unsaved.window >= at
            && o.from <= at + unsaved.window
    })
}

/// After `R key` answered, the grant is gone: no later `Q` shows it holding
/// the key, and a later acquire of the key is not answered `T` when nobody
/// else, seen or unseen, can have held the key during its wait.
fn releases_applied(history: &History, rules: &Rules, found: &mut Vec<Violation>) {
    for release in &history.attempts {
        let (Request::Release { token }, Some((at, Answer::Released))) =
            (&release.request, release.answer())
        else {
            continue;
        };
        if unsaved(history, rules, release.node, at) {
            continue;
        }
        let after = || {
            history
                .attempts
                .iter()
                .filter(|a| a.key == release.key && a.sent > at)
        };
        let shown =
            after().find(|q| matches!(q.answer(), Some((_, Answer::Held(Some(t)))) if t == token));
        let refused = || {
            after().find(|a| {
                matches!(a.answer(), Some((_, Answer::TimedOut)))
                    && !someone_else_may_hold(history, rules, a, *token)
            })
        };
        if let Some(seen) = shown.or_else(refused) {
            found.push(Violation::ReleaseNotApplied {
                release: release.clone(),
                seen: seen.clone(),
            });
        }
    }
}

/// Whether a grant other than `released` may have held the key of the
/// acquire `refused` at some moment between its sending and its answer.
fn someone_else_may_hold(
    history: &History,
    rules: &Rules,
    refused: &Attempt,
    released: u64,
) -> bool {
    let Some((answered, _)) = refused.answer() else {
        return true;
    };
    history.attempts.iter().any(|other| {
        if other.key != refused.key || std::ptr::eq(other, refused) {
            return false;
        }
        if matches!(other.answer(), Some((_, Answer::Granted(t))) if *t == released) {
            return false;
        }
        let undone = |node, at| unsaved(history, rules, node, at);
        match latest_end(history, other, &undone, rules.moved_may_apply) {
            Some(end) => other.sent < answered && end > refused.sent,
            None => false,
        }
    })
}

/// The grant of `key` with `token`: the earliest moment it can end without
/// a release (its lease from the acquire's sending, or from a renewal
/// acknowledged and safe), and when its first release was sent.
fn bounds(
    history: &History,
    rules: &Rules,
    grant: &Attempt,
    token: u64,
) -> (Duration, Option<Duration>) {
    let Request::Acquire { lease, .. } = grant.request else {
        return (grant.sent, None);
    };
    let mut lease_end = grant.sent + lease;
    let mut first_release: Option<Duration> = None;
    for other in &history.attempts {
        if other.key != grant.key || other.token() != Some(token) {
            continue;
        }
        match (&other.request, other.answer()) {
            (Request::Release { .. }, _) => {
                first_release = Some(first_release.map_or(other.sent, |r| r.min(other.sent)));
            }
            (Request::Renew { lease, .. }, Some((at, Answer::Renewed)))
                if !unsaved(history, rules, other.node, at) =>
            {
                lease_end = lease_end.max(other.sent + *lease);
            }
            _ => {}
        }
    }
    (
        lease_end.saturating_sub(rules.clock_tolerance),
        first_release,
    )
}

fn holds(history: &History, rules: &Rules, grants: &[&Attempt], found: &mut Vec<Violation>) {
    let mut by_key: HashMap<&str, Vec<(u64, &Attempt)>> = HashMap::new();
    for grant in grants {
        if let Some((at, token)) = grant.granted() {
            if !unsaved(history, rules, grant.node, at) {
                by_key.entry(&grant.key).or_default().push((token, grant));
            }
        }
    }
    // A later grant a kill may have undone is no evidence either: when it
    // is lost, the table it was granted from comes back, with the earlier
    // holder in it (the documented window of an unsaved change).
    let all: Vec<(u64, &Attempt)> = grants
        .iter()
        .filter_map(|g| g.granted().map(|(at, t)| (at, t, *g)))
        .filter(|(at, _, g)| !unsaved(history, rules, g.node, *at))
        .map(|(_, t, g)| (t, g))
        .collect();
    for (key, mut mine) in by_key {
        mine.sort_by_key(|(token, _)| *token);
        for (token, grant) in &mine {
            let (lease_end, first_release) = bounds(history, rules, grant, *token);
            overlaps(history, rules, key, *token, grant, &all, found);
            // `N R` / `N K` before the lease could end and before any
            // release was sent.
            for verdict in &history.attempts {
                if verdict.key != key || verdict.token() != Some(*token) {
                    continue;
                }
                let Some((at, Answer::NotHeld)) = verdict.answer() else {
                    continue;
                };
                let released_before = first_release.is_some_and(|r| r < verdict.sent);
                if at < lease_end && !released_before {
                    found.push(Violation::GrantLostEarly {
                        grant: (*grant).clone(),
                        verdict: verdict.clone(),
                        lease_ends_no_sooner_than: lease_end,
                    });
                }
            }
        }
    }
}

/// A grant's kind.
fn kind(grant: &Attempt) -> Kind {
    match grant.request {
        Request::Acquire { kind, .. } => kind,
        _ => Kind::Plain,
    }
}

/// The grant `second` of `key` (token `token`) against the earlier grants
/// of the key that certainly still held it when it was answered: no more
/// of them than its kind admits (docs/protocol.md: never more holders than
/// permits, no exclusive grant beside any other).
fn overlaps(
    history: &History,
    rules: &Rules,
    key: &str,
    token: u64,
    second: &Attempt,
    all: &[(u64, &Attempt)],
    found: &mut Vec<Violation>,
) {
    let Some((at, _)) = second.granted() else {
        return;
    };
    let mut live: Vec<(Duration, &Attempt)> = Vec::new();
    for (earlier_token, earlier) in all {
        if earlier.key != key || *earlier_token >= token {
            continue;
        }
        let (lease_end, first_release) = bounds(history, rules, earlier, *earlier_token);
        let ends = first_release.map_or(lease_end, |r| r.min(lease_end));
        if at < ends {
            live.push((ends, earlier));
        }
    }
    let kinds: Vec<Kind> = live.iter().map(|(_, g)| kind(g)).collect();
    if kind(second).admits(&kinds) {
        return;
    }
    if let Some((ends, first)) = live.iter().min_by_key(|(_, g)| g.sent) {
        found.push(Violation::Overlap {
            first: (*first).clone(),
            second: second.clone(),
            first_ends_no_sooner_than: *ends,
        });
    }
}
