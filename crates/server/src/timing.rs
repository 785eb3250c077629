//! The outcome counts and the times behind the latency histograms of
//! [`Metrics`], kept next to the node under its mutex (so no lock of their
//! own): when each queued acquire arrived, when each key was granted, when
//! a release of each key arrived. Each map holds at most one entry per
//! waiter or held key; past [`MAX_TRACKED`] entries a map is emptied (its
//! next observations are lost, nothing else), so an entry whose end the
//! node never reports (a grant that expired) cannot pile up.

use baton_core::{AcquireOutcome, FastMap, Key, Millis, Outcome, Refusal, WaiterId};
use baton_proto::{Op, Response};

use crate::metrics::{Count, ErrorReason, Metrics};
use crate::node::{NodeEvent, Served};

/// Entries one map may hold before it is emptied.
pub const MAX_TRACKED: usize = 2_000_000;

/// See the module doc.
#[derive(Debug, Default)]
pub(crate) struct Timing {
    queued_at: FastMap<WaiterId, Millis>,
    held_since: FastMap<Key, Millis>,
    released_at: FastMap<Key, Millis>,
}

fn insert<K: std::hash::Hash + Eq>(map: &mut FastMap<K, Millis>, key: K, at: Millis) {
    if map.len() >= MAX_TRACKED {
        map.clear();
    }
    map.insert(key, at);
}

impl Timing {
    /// An acquire received at `received_at` was answered at `now`.
    pub(crate) fn acquired(
        &mut self,
        m: &Metrics,
        key: Key,
        outcome: &Served<AcquireOutcome>,
        received_at: Millis,
        now: Millis,
    ) {
        match outcome {
            Served::Done(AcquireOutcome::Granted { .. }) => {
                m.add(Count::Grants, 1);
                m.acquire_wait.observe(now.saturating_sub(received_at));
                insert(&mut self.held_since, key, now);
            }
            Served::Done(AcquireOutcome::Queued { id }) => {
                insert(&mut self.queued_at, *id, received_at)
            }
            Served::Done(AcquireOutcome::Refused(Refusal::TooManyLocks)) => {
                m.error(ErrorReason::TooManyLocks)
            }
            Served::Done(AcquireOutcome::Refused(Refusal::TooManyWaiters)) => {
                m.error(ErrorReason::TooManyWaiters)
            }
            Served::Redirect(_) => m.error(ErrorReason::Redirected),
            Served::Later => {}
        }
    }

    /// A release of `key` arrives at `now` (before the node sees it, so
    /// that a hand-over in the same call finds it).
    pub(crate) fn releasing(&mut self, key: &Key, now: Millis) {
        insert(&mut self.released_at, key.clone(), now);
    }

    /// The release's answer, after its events were counted.
    pub(crate) fn released(
        &mut self,
        m: &Metrics,
        key: &Key,
        outcome: &Served<Outcome>,
        now: Millis,
    ) {
        match outcome {
            Served::Done(Outcome::Released) => self.release_done(m, key, now),
            Served::Done(_) => m.error(ErrorReason::NotHeld),
            Served::Redirect(_) => m.error(ErrorReason::Redirected),
            // A Raft leader answers once committed: the answer's event
            // ends it, and the next grant of the key is the hand-over.
            Served::Later => return,
        }
        self.released_at.remove(key);
    }

    fn release_done(&mut self, m: &Metrics, key: &Key, now: Millis) {
        m.add(Count::Releases, 1);
        if let Some(since) = self.held_since.remove(key) {
            m.hold.observe(now.saturating_sub(since));
        }
    }

    pub(crate) fn renewed(m: &Metrics, outcome: &Served<Outcome>) {
        match outcome {
            Served::Done(Outcome::Renewed) => m.add(Count::Renewals, 1),
            Served::Done(_) => m.error(ErrorReason::NotHeld),
            Served::Redirect(_) => m.error(ErrorReason::Redirected),
            Served::Later => {}
        }
    }

    pub(crate) fn cancelled(&mut self, id: WaiterId) {
        self.queued_at.remove(&id);
    }

    /// Counts what a call told other connections, at `now`. Grants first:
    /// a Raft release's answer comes before the hand-over it carries.
    pub(crate) fn events(&mut self, m: &Metrics, events: &[NodeEvent], now: Millis) {
        for event in events {
            match event {
                NodeEvent::Granted { id, key, .. } => self.granted(m, Some(*id), key, now),
                NodeEvent::TimedOut { id, .. } => {
                    m.add(Count::WaitTimeouts, 1);
                    self.queued_at.remove(id);
                }
                NodeEvent::Moved { id, .. } => {
                    m.add(Count::WaitersMoved, 1);
                    self.queued_at.remove(id);
                }
                NodeEvent::Reply {
                    response: Response::Granted { key, .. },
                    ..
                } => self.granted(m, None, key, now),
                NodeEvent::Reply { .. } => {}
            }
        }
        for event in events {
            if let NodeEvent::Reply { response, .. } = event {
                self.late_answer(m, response, now);
            }
        }
    }

    fn granted(&mut self, m: &Metrics, id: Option<WaiterId>, key: &Key, now: Millis) {
        m.add(Count::Grants, 1);
        if let Some(asked) = id.and_then(|id| self.queued_at.remove(&id)) {
            m.acquire_wait.observe(now.saturating_sub(asked));
        }
        if let Some(released) = self.released_at.remove(key) {
            m.handover.observe(now.saturating_sub(released));
        }
        insert(&mut self.held_since, key.clone(), now);
    }

    /// The late answer of a release or renewal (a Raft leader's).
    fn late_answer(&mut self, m: &Metrics, response: &Response, now: Millis) {
        match response {
            Response::Released { key } => {
                self.release_done(m, key, now);
                self.released_at.remove(key);
            }
            Response::Renewed { .. } => m.add(Count::Renewals, 1),
            Response::NotHeld { op, key } => {
                m.error(ErrorReason::NotHeld);
                if *op == Op::Release {
                    self.released_at.remove(key);
                }
            }
            Response::Moved { op, key, .. } => {
                m.error(ErrorReason::Redirected);
                if *op == Op::Release {
                    self.released_at.remove(key);
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::delivery::{Delivery, Mailbox};
    use crate::metrics::{Count, ErrorReason, RequestOp};
    use crate::{Clock, SharedLocks, SingleNode};
    use baton_core::{AcquireOutcome, Key};
    use tokio::sync::mpsc;

    use super::Served;

    fn key(s: &str) -> Key {
        Key::new(s.as_bytes()).unwrap_or_else(|e| panic!("{e}"))
    }

    fn mailbox() -> (Mailbox, mpsc::UnboundedReceiver<Delivery>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (Mailbox(tx), rx)
    }

    #[test]
    fn requests_outcomes_and_latencies_are_counted_where_they_pass() {
        let locks = SharedLocks::new(SingleNode::new(), Clock::new());
        let (a, _a_rx) = mailbox();
        let (b, _b_rx) = mailbox();
        let mut events = Vec::new();
        let Served::Done(AcquireOutcome::Granted { token }) =
            locks.acquire(key("k"), 0, 10_000, 0, &a, &mut events)
        else {
            panic!("not granted")
        };
        let queued = locks.acquire(key("k"), 0, 10_000, 0, &b, &mut events);
        assert!(matches!(
            queued,
            Served::Done(AcquireOutcome::Queued { .. })
        ));
        let _ = locks.release(&key("k"), token + 99, 0, &a, &mut events);
        let _ = locks.release(&key("k"), token, 0, &a, &mut events);
        let m = locks.metrics();
        assert_eq!(m.requests(RequestOp::Acquire), 2);
        assert_eq!(m.requests(RequestOp::Release), 2);
        assert_eq!(m.errors(ErrorReason::NotHeld), 1);
        assert_eq!(m.count(Count::Grants), 2, "at once, then handed over");
        assert_eq!(m.count(Count::Releases), 1);
        assert_eq!(m.acquire_wait.snapshot().count, 2);
        assert_eq!(m.hold.snapshot().count, 1);
        assert_eq!(m.handover.snapshot().count, 1);
    }
}
