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

use std::fmt;
use std::time::Duration;

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

mod check;

pub use check::check;

#[cfg(test)]
#[path = "history_tests.rs"]
mod tests;
