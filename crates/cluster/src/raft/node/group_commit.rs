//! Group commit: when the leader proposes its next log entry.
//!
//! One entry is in flight at a time (see `RaftLockNode::handle_tick`). Proposed the
//! moment the previous one is done, the next entry carries only the
//! commands that came in meanwhile: the clients the previous entry has
//! just answered send their next requests a round trip later, and miss it.
//! Under load the clients then split into two groups that take turns, each
//! entry carrying half of them, and every commit costs the same fixed work
//! (three fsyncs, the frames, the wake-ups) for half the commands.
//!
//! So the leader holds its next proposal until the clients that the last
//! entry answered have sent a request each (any request: an acquire that
//! only queues counts too), or until a bound passes: half the time an
//! entry takes, at most [`MAX_HOLD`] (docs/benchmarks.md has the
//! measurements behind both). A lone client never waits (its own request
//! is the one expected).
//!
//! [`GroupCommit`] is the rule; [`Returns`] is the book the node keeps
//! (requests in, answers out) and holds its proposal on. Both pure: the
//! node emits [`RaftCommand::HoldProposal`] and the shell times it.
//!
//! [`RaftCommand::HoldProposal`]: super::RaftCommand::HoldProposal

use std::time::Duration;

use openraft::TokioInstant;

use super::observe::SaturatingSince;

/// The longest a proposal is held for clients to come back.
pub const MAX_HOLD: Duration = Duration::from_micros(600);

/// The share of an entry's time a proposal may be held: its divisor.
const HOLD_SHARE: u32 = 2;

/// How long entries take, proposed to done, smoothed: what bounds a hold.
#[derive(Debug, Default, Clone)]
pub struct GroupCommit {
    entry_time: Option<Duration>,
}

/// A hold: wait until `returned` requests in all, or for `at_most`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hold {
    pub returned: u64,
    pub at_most: Duration,
}

impl GroupCommit {
    pub fn new() -> GroupCommit {
        GroupCommit::default()
    }

    /// An entry was done `took` after it was proposed.
    pub fn handle_entry_done(&mut self, took: Duration) {
        // A moving average over about eight entries.
        self.entry_time = Some(match self.entry_time {
            None => took,
            Some(average) => (average * 7 + took) / 8,
        });
    }

    /// The longest hold now.
    pub fn max_hold(&self) -> Duration {
        self.entry_time
            .map_or(Duration::ZERO, |t| (t / HOLD_SHARE).min(MAX_HOLD))
    }

    /// Whether to hold the next proposal, given the last answers: `answered`
    /// requests, `since` ago, and `returned` requests arrived since then.
    pub fn poll_hold(&self, answered: u64, returned: u64, since: Duration) -> Option<Hold> {
        let max = self.max_hold();
        if returned >= answered || since >= max {
            return None;
        }
        Some(Hold {
            returned: answered,
            at_most: max - since,
        })
    }
}

/// The leader's book of requests and answers, which a hold waits on.
#[derive(Debug, Default)]
pub struct Returns {
    /// Requests in since the last answers went out.
    returned: u64,
    /// Requests the last applied entry answered (0: none, or already
    /// proposed behind).
    answered: u64,
    answered_at: Option<TokioInstant>,
    /// The count of `returned` the hold under way waits for.
    target: Option<u64>,
}

impl Returns {
    /// A client's request came in. True if that ends the hold under way.
    pub fn request_in(&mut self) -> bool {
        self.returned = self.returned.saturating_add(1);
        let back = self.target.is_some_and(|t| self.returned >= t);
        if back {
            self.target = None;
        }
        back
    }

    /// An applied entry answered `answered` requests at `at`.
    pub fn answered(&mut self, answered: u64, at: TokioInstant) {
        if answered == 0 {
            return;
        }
        self.returned = 0;
        self.answered = answered;
        self.answered_at = Some(at);
    }

    /// Whether to hold the next proposal at `at`, as `rule` says: the
    /// longest hold, whose clients [`Returns::request_in`] counts. The
    /// answers are then spent: the entry proposed next is theirs.
    pub fn start_hold(&mut self, rule: &GroupCommit, at: TokioInstant) -> Option<Duration> {
        let since = self
            .answered_at
            .map_or(Duration::MAX, |t| at.saturating_duration_since(t));
        let hold = rule.poll_hold(self.answered, self.returned, since);
        self.answered = 0;
        self.target = hold.map(|h| h.returned);
        hold.map(|h| h.at_most)
    }

    /// The hold under way ended at its bound.
    pub fn end_hold(&mut self) {
        self.target = None;
    }

    /// Whether a hold is under way.
    pub fn holding(&self) -> bool {
        self.target.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::Instant as _;

    fn after(took_us: u64) -> GroupCommit {
        let mut rule = GroupCommit::new();
        rule.handle_entry_done(Duration::from_micros(took_us));
        rule
    }

    #[test]
    fn nothing_is_held_before_an_entry_was_timed() {
        assert_eq!(GroupCommit::new().poll_hold(16, 0, Duration::ZERO), None);
    }

    #[test]
    fn a_proposal_waits_for_the_answered_to_come_back() {
        let rule = after(800);
        let hold = rule.poll_hold(16, 3, Duration::from_micros(50));
        assert_eq!(
            hold,
            Some(Hold {
                returned: 16,
                at_most: Duration::from_micros(350),
            })
        );
        // All back, or a lone client's own request: no hold.
        assert_eq!(rule.poll_hold(16, 16, Duration::ZERO), None);
        assert_eq!(rule.poll_hold(1, 1, Duration::ZERO), None);
        // The bound has passed.
        assert_eq!(rule.poll_hold(16, 3, Duration::from_micros(400)), None);
    }

    #[test]
    fn the_hold_is_half_an_entry_and_at_most_the_cap() {
        assert_eq!(after(400).max_hold(), Duration::from_micros(200));
        assert_eq!(after(10_000).max_hold(), MAX_HOLD);
        let mut rule = after(800);
        rule.handle_entry_done(Duration::from_micros(0));
        assert_eq!(rule.max_hold(), Duration::from_micros(350));
    }

    #[test]
    fn a_hold_counts_the_clients_back_and_spends_the_answers() {
        let mut returns = Returns::default();
        let rule = after(4_000);
        let t0 = TokioInstant::now();
        returns.answered(3, t0);
        assert!(!returns.request_in());
        assert_eq!(returns.start_hold(&rule, t0), Some(MAX_HOLD));
        assert!(returns.holding());
        assert!(!returns.request_in());
        assert!(returns.request_in(), "the third request ends the hold");
        assert!(!returns.holding());
        // Spent: the next proposal is not held for the same answers.
        assert_eq!(returns.start_hold(&rule, t0), None);
    }

    #[test]
    fn a_hold_is_bounded_from_the_answers_time() {
        let mut returns = Returns::default();
        let rule = after(400);
        let t0 = TokioInstant::now();
        returns.answered(8, t0);
        let later = t0 + Duration::from_micros(50);
        assert_eq!(
            returns.start_hold(&rule, later),
            Some(Duration::from_micros(150))
        );
        returns.end_hold();
        // Requests after the hold find no target.
        assert!(!returns.request_in());
        assert!(!returns.holding());
    }
}
