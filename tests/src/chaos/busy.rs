//! When a key may be busy: the latest moment a grant, seen or unseen, can
//! still hold its key. The release check needs it to tell "the key stayed
//! busy because the released grant is still there" from "someone else may
//! have held it".
//!
//! Every bound errs long: a lease counts from the latest moment the grant
//! or a renewal can have been made, and every outage that starts while the
//! grant may live can restart its lease timing at the recovery (a restarted
//! Raft or priority node times leases again from then).

use std::time::Duration;

use crate::chaos::history::{Answer, Attempt, History, Outcome, Request};

/// Added to every bound: the time a leader needs to commit an expiry, and
/// scheduling on a loaded machine.
pub const EXPIRY_MARGIN: Duration = Duration::from_secs(1);

/// When `attempt` ended, whatever its outcome.
fn ended(attempt: &Attempt) -> Duration {
    match attempt.outcome {
        Outcome::Answered { at, .. } | Outcome::Lost { at } | Outcome::Unanswered { at } => at,
    }
}

/// The latest moment the acquire `grant` can still hold its key: a grant we
/// saw (answered `A key token`), or one we may not have seen (an attempt
/// whose answer never came). `None` for an acquire that surely holds
/// nothing (answered `T`, `M`, or anything else).
/// `undone(node, at)` says whether an answer `node` gave at `at` may be
/// undone by a fault (a release acknowledged just before a kill, on a node
/// that saves its table a few times a second): such a release does not end
/// the grant. With `moved_may_apply`, an acquire answered `M` that long or
/// more after it was sent counts as a grant nobody saw (see
/// [`Rules::moved_may_apply`](crate::chaos::history::Rules)).
pub fn latest_end(
    history: &History,
    grant: &Attempt,
    undone: &dyn Fn(usize, Duration) -> bool,
    moved_may_apply: Option<Duration>,
) -> Option<Duration> {
    let Request::Acquire { wait, lease, .. } = grant.request else {
        return None;
    };
    let (mut end, token, unseen_wait) = match &grant.outcome {
        Outcome::Answered {
            at,
            answer: Answer::Granted(token),
        } => (at.saturating_add(lease), Some(*token), Duration::ZERO),
        // Sent away after a while: it may have been in a leader's log,
        // which a later leader can commit, its grant unseen.
        Outcome::Answered {
            at,
            answer: Answer::Moved(_),
        } if moved_may_apply.is_some_and(|after| at.saturating_sub(grant.sent) >= after) => {
            (at.saturating_add(wait).saturating_add(lease), None, wait)
        }
        Outcome::Answered { .. } => return None,
        // Granted, if at all, by the end of its wait; a node that was
        // paused may take it up only at its resume (covered below).
        Outcome::Lost { .. } | Outcome::Unanswered { .. } => (
            ended(grant).saturating_add(wait).saturating_add(lease),
            None,
            wait,
        ),
    };
    let mut longest = lease;
    let mut ended_by: Option<Duration> = None;
    if let Some(token) = token {
        for other in &history.attempts {
            if other.key != grant.key {
                continue;
            }
            match (&other.request, &other.outcome) {
                (Request::Release { token: t }, Outcome::Answered { at, answer })
                | (Request::Renew { token: t, .. }, Outcome::Answered { at, answer })
                    if *t == token
                        && (matches!(answer, Answer::NotHeld)
                            || matches!(answer, Answer::Released) && !undone(other.node, *at)) =>
                {
                    ended_by = Some(ended_by.map_or(*at, |e| e.min(*at)));
                }
                // A renewal answered `M` was not applied; any other may have
                // been, answered or not, by the time it ended.
                (
                    Request::Renew { token: t, .. },
                    Outcome::Answered {
                        answer: Answer::Moved(_),
                        ..
                    },
                ) if *t == token => {}
                (Request::Renew { token: t, lease: l }, _) if *t == token => {
                    end = end.max(ended(other).saturating_add(*l));
                    longest = longest.max(*l);
                }
                _ => {}
            }
        }
    }
    let mut outages: Vec<_> = history.outages.iter().collect();
    outages.sort_by_key(|o| o.from);
    for outage in outages {
        if outage.from < end {
            let back = outage.until.unwrap_or(Duration::MAX);
            end = end.max(back.saturating_add(unseen_wait).saturating_add(longest));
        }
    }
    let end = end.saturating_add(EXPIRY_MARGIN);
    Some(ended_by.map_or(end, |by| by.min(end)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chaos::history::{FaultKind, Outage};

    fn t(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    /// No answer is undone.
    fn never(_: usize, _: Duration) -> bool {
        false
    }

    fn acquire(sent: u64, outcome: Outcome) -> Attempt {
        Attempt {
            worker: 0,
            node: 0,
            key: "k".to_owned(),
            request: Request::Acquire {
                wait: t(500),
                lease: t(1000),
                kind: crate::chaos::history::Kind::Plain,
            },
            connected: t(sent),
            sent: t(sent),
            outcome,
        }
    }

    fn answered(sent: u64, at: u64, request: Request, answer: Answer) -> Attempt {
        Attempt {
            request,
            outcome: Outcome::Answered { at: t(at), answer },
            ..acquire(sent, Outcome::Lost { at: t(0) })
        }
    }

    #[test]
    fn a_seen_grant_lasts_its_lease_after_the_answer_or_until_its_release() {
        let grant = answered(
            0,
            100,
            acquire(0, Outcome::Lost { at: t(0) }).request,
            Answer::Granted(5),
        );
        let mut h = History {
            attempts: vec![grant.clone()],
            outages: Vec::new(),
        };
        assert_eq!(
            latest_end(&h, &grant, &never, None),
            Some(t(1100) + EXPIRY_MARGIN)
        );
        h.attempts.push(answered(
            200,
            210,
            Request::Renew {
                token: 5,
                lease: t(3000),
            },
            Answer::Renewed,
        ));
        assert_eq!(
            latest_end(&h, &grant, &never, None),
            Some(t(3210) + EXPIRY_MARGIN)
        );
        h.attempts.push(answered(
            400,
            420,
            Request::Release { token: 5 },
            Answer::Released,
        ));
        assert_eq!(latest_end(&h, &grant, &never, None), Some(t(420)));
    }

    #[test]
    fn an_unseen_grant_lasts_its_wait_and_lease_and_outages_stretch_both() {
        let lost = acquire(0, Outcome::Lost { at: t(50) });
        let mut h = History {
            attempts: vec![lost.clone()],
            outages: Vec::new(),
        };
        assert_eq!(
            latest_end(&h, &lost, &never, None),
            Some(t(1550) + EXPIRY_MARGIN)
        );
        h.outages.push(Outage {
            node: 1,
            kind: FaultKind::Pause,
            from: t(1000),
            until: Some(t(3000)),
        });
        assert_eq!(
            latest_end(&h, &lost, &never, None),
            Some(t(4500) + EXPIRY_MARGIN)
        );
        h.outages[0].until = None;
        assert_eq!(latest_end(&h, &lost, &never, None), Some(Duration::MAX));
    }

    #[test]
    fn an_acquire_answered_without_a_grant_holds_nothing() {
        let request = acquire(0, Outcome::Lost { at: t(0) }).request;
        let timed_out = answered(0, 500, request, Answer::TimedOut);
        let h = History {
            attempts: vec![timed_out.clone()],
            outages: Vec::new(),
        };
        assert_eq!(latest_end(&h, &timed_out, &never, None), None);
    }
}
