//! The chaos test's history and its checker: a pure function from what the
//! clients saw (every request attempt, when it was sent, what came back and
//! when) and what the fault schedule did (which node was down when) to the
//! list of broken promises.
//!
//! Every rule only flags what is *certain* from the outside: a request's
//! effect happened somewhere between its sending and its answer, a lease
//! counts from the grant (so from after the acquire was sent), and grants
//! or answers we never saw are not guessed at. Times are offsets from the
//! start of the run, all taken on one host's monotonic clock.

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use crate::chaos::busy::latest_end;

/// docs/protocol.md, "Answer time": an acquire by the end of its wait plus this,
/// anything else within this.
pub const ANSWER_GRACE: Duration = Duration::from_secs(3);

/// What an acquire asks for (docs/protocol.md 1.2): a plain grant, one of
/// a semaphore's permits, or a shared grant of a readers-writer key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Plain,
    Permit(u32),
    Shared,
}

impl Kind {
    /// The acquire's options on the wire, each after a space.
    pub fn options(self) -> String {
        match self {
            Kind::Plain => String::new(),
            Kind::Permit(n) => format!(" permits={n}"),
            Kind::Shared => " mode=shared".to_owned(),
        }
    }

    /// Whether a grant of this kind may hold its key beside the grants of
    /// kinds `live`, which certainly still hold it: a plain (exclusive)
    /// grant alone, a permit beside fewer than its count of permits, a
    /// shared grant beside shared ones only.
    pub fn admits(self, live: &[Kind]) -> bool {
        match self {
            Kind::Plain => live.is_empty(),
            Kind::Permit(n) => live.len() < n as usize && live.iter().all(|k| *k == self),
            Kind::Shared => live.iter().all(|k| *k == Kind::Shared),
        }
    }
}

/// A request as sent.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    Acquire {
        wait: Duration,
        lease: Duration,
        kind: Kind,
    },
    Release {
        token: u64,
    },
    Renew {
        token: u64,
        lease: Duration,
    },
    Query,
}

/// A response line, read.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    Granted(u64),
    TimedOut,
    Released,
    Renewed,
    /// `N R` or `N K`.
    NotHeld,
    /// `M ... <addr>`: an answer for the answer-time rule, not a verdict;
    /// the index of the node it names, `None` for `-`.
    Moved(Option<usize>),
    /// `Q`: the token holding the key, if any.
    Held(Option<u64>),
    /// Anything a correct node does not send to these requests.
    Other(String),
}

/// How one attempt ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Answered {
        at: Duration,
        answer: Answer,
    },
    /// The connection failed or closed before an answer.
    Lost {
        at: Duration,
    },
    /// The client stopped waiting at `at` (the answer-time deadline).
    Unanswered {
        at: Duration,
    },
}

/// One request sent once, to one node.
#[derive(Debug, Clone, PartialEq)]
pub struct Attempt {
    pub worker: usize,
    pub node: usize,
    pub key: String,
    pub request: Request,
    /// When the connection it went out on was opened: a fault of the node
    /// since then may have broken that connection.
    pub connected: Duration,
    pub sent: Duration,
    pub outcome: Outcome,
}

impl Attempt {
    fn answer(&self) -> Option<(Duration, &Answer)> {
        match &self.outcome {
            Outcome::Answered { at, answer } => Some((*at, answer)),
            _ => None,
        }
    }

    fn granted(&self) -> Option<(Duration, u64)> {
        match self.answer() {
            Some((at, Answer::Granted(token))) => Some((at, *token)),
            _ => None,
        }
    }

    /// The latest moment the node may answer, by the protocol.
    pub fn answer_deadline(&self) -> Duration {
        match self.request {
            Request::Acquire { wait, .. } => self.sent + wait + ANSWER_GRACE,
            _ => self.sent + ANSWER_GRACE,
        }
    }

    fn token(&self) -> Option<u64> {
        match self.request {
            Request::Release { token } | Request::Renew { token, .. } => Some(token),
            _ => None,
        }
    }
}

/// What the fault schedule did to a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultKind {
    /// SIGKILL (then a restart).
    Kill,
    /// SIGSTOP (then SIGCONT).
    Pause,
    /// SIGTERM, a graceful stop (then a restart).
    Terminate,
}

/// A node not serving normally from `from` (the signal) until `until` (it
/// listens again or runs again), or to the end when `None`.
#[derive(Debug, Clone, PartialEq)]
pub struct Outage {
    pub node: usize,
    pub kind: FaultKind,
    pub from: Duration,
    pub until: Option<Duration>,
}

impl Outage {
    fn overlaps(&self, from: Duration, to: Duration) -> bool {
        self.from <= to && self.until.is_none_or(|until| until >= from)
    }
}

/// Everything one run produced.
#[derive(Debug, Clone, Default)]
pub struct History {
    pub attempts: Vec<Attempt>,
    pub outages: Vec<Outage>,
}

/// Changes a node acknowledged but may not have made durable or replicated
/// yet when a fault of one of `kinds` hits it within `window` of the answer
/// (docs/cluster.md: priority mode replicates asynchronously; a data
/// directory is written at most every 100 ms).
#[derive(Debug, Clone, PartialEq)]
pub struct Unsaved {
    pub window: Duration,
    pub kinds: Vec<FaultKind>,
}

/// Which promises a mode makes, beyond those every mode makes (unique
/// tokens, rising tokens, answer time, acknowledged releases applied).
#[derive(Debug, Clone, PartialEq)]
pub struct Rules {
    /// Grants are held until released or their lease ends: no two holds of
    /// one key overlap, and no grant vanishes early (Raft mode; a single
    /// node with a data directory).
    pub holds: bool,
    /// Acknowledged changes a fault may still undo (see [`Unsaved`]).
    pub unsaved: Option<Unsaved>,
    /// Added to every answer-time deadline: scheduling on a loaded test
    /// machine, never near the seconds a real miss takes.
    pub answer_slack: Duration,
    /// Taken off the earliest end of every lease: timer granularity and
    /// millisecond rounding, so that only a clear overlap counts.
    pub clock_tolerance: Duration,
    /// Raft: an acquire answered `M` this long or more after it was sent
    /// may have been in the log of a leader that then lost its majority;
    /// a later leader may commit that entry, and its grant holds the key,
    /// seen by nobody, until its lease ends (docs/cluster.md, "One window
    /// remains"). A redirect answered at once never reached a log.
    pub moved_may_apply: Option<Duration>,
}

/// One broken promise, with what shows it.
#[derive(Debug, Clone, PartialEq)]
pub enum Violation {
    NoGrant,
    DuplicateToken {
        token: u64,
        first: Attempt,
        again: Attempt,
    },
    TokenNotRising {
        earlier: Attempt,
        later: Attempt,
    },
    /// `second` was granted while `first` (and maybe more earlier grants
    /// of the key) certainly held it, more than the key's kind allows.
    Overlap {
        first: Attempt,
        second: Attempt,
        first_ends_no_sooner_than: Duration,
    },
    GrantLostEarly {
        grant: Attempt,
        verdict: Attempt,
        lease_ends_no_sooner_than: Duration,
    },
    LateAnswer {
        attempt: Attempt,
    },
    UnexpectedAnswer {
        attempt: Attempt,
    },
    ReleaseNotApplied {
        release: Attempt,
        seen: Attempt,
    },
}

impl Violation {
    /// The name of the rule, for summaries.
    pub fn rule(&self) -> &'static str {
        match self {
            Violation::NoGrant => "progress",
            Violation::DuplicateToken { .. } => "unique tokens",
            Violation::TokenNotRising { .. } => "rising tokens",
            Violation::Overlap { .. } => "no overlapping holds",
            Violation::GrantLostEarly { .. } => "grants held until released or expired",
            Violation::LateAnswer { .. } => "answer time",
            Violation::UnexpectedAnswer { .. } => "protocol answers",
            Violation::ReleaseNotApplied { .. } => "acknowledged releases applied",
        }
    }
}

fn ms(d: Duration) -> String {
    format!("{:.3}s", d.as_secs_f64())
}

impl fmt::Display for Attempt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "worker {} -> node {}: {:?} {} sent {}",
            self.worker,
            self.node,
            self.request,
            self.key,
            ms(self.sent)
        )?;
        match &self.outcome {
            Outcome::Answered { at, answer } => write!(f, ", answered {answer:?} at {}", ms(*at)),
            Outcome::Lost { at } => write!(f, ", connection lost at {}", ms(*at)),
            Outcome::Unanswered { at } => write!(f, ", no answer by {}", ms(*at)),
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}] ", self.rule())?;
        match self {
            Violation::NoGrant => write!(f, "not a single grant in the whole run"),
            Violation::DuplicateToken { token, first, again } => {
                write!(f, "token {token} granted twice: {first} / {again}")
            }
            Violation::TokenNotRising { earlier, later } => write!(
                f,
                "a grant asked after another's answer has a token not above it: {earlier} / then {later}"
            ),
            Violation::Overlap { first, second, first_ends_no_sooner_than } => write!(
                f,
                "{second} was granted while {first} still held the key (held until at least {})",
                ms(*first_ends_no_sooner_than)
            ),
            Violation::GrantLostEarly { grant, verdict, lease_ends_no_sooner_than } => write!(
                f,
                "{grant} vanished before its lease could end ({}): {verdict}",
                ms(*lease_ends_no_sooner_than)
            ),
            Violation::LateAnswer { attempt } => write!(
                f,
                "{attempt}: deadline {} and the node was up throughout",
                ms(attempt.answer_deadline())
            ),
            Violation::UnexpectedAnswer { attempt } => write!(f, "{attempt}"),
            Violation::ReleaseNotApplied { release, seen } => {
                write!(f, "{release}, yet later {seen}")
            }
        }
    }
}

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

#[cfg(test)]
#[path = "history_tests.rs"]
mod tests;
