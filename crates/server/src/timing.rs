//! The outcome counts and the times behind the latency histograms of
//! [`Metrics`], kept next to the node under its mutex (so no lock of their
//! own): when each queued acquire arrived, when each key was granted, when
//! a release of each key arrived. Each map holds at most one entry per
//! waiter or held key; past [`MAX_TRACKED`] entries a map is emptied (its
//! next observations are lost, nothing else), so an entry whose end the
//! node never reports cannot pile up, and the metrics cost a node with a
//! million held locks a few megabytes, not a hundred bytes a lock.

use baton_core::{AcquireOutcome, FastMap, Key, Millis, Outcome, Refusal, WaiterId};
use baton_proto::{Op, Response};

use crate::lease_ends::LeaseEnds;
use crate::metrics::{Count, ErrorReason, Metrics};
use crate::node::{NodeEvent, Served};
use crate::request::{AcquireRef, Answer, LockRequest};

/// Entries one map may hold before it is emptied: past this many held
/// keys the hold-time histogram samples the grants instead of timing
/// each (at 2^16 entries the maps take about 10 MB at most).
pub const MAX_TRACKED: usize = 1 << 16;

/// See the module doc.
#[derive(Debug, Default)]
pub(crate) struct Timing {
    /// When each queued acquire arrived, and the lease it asked for.
    queued_at: FastMap<WaiterId, (Millis, Millis)>,
    held_since: FastMap<Key, Millis>,
    released_at: FastMap<Key, Millis>,
    /// The lease a Raft leader's acquire or renewal of a key asked for,
    /// until its late answer comes.
    pending_lease: FastMap<Key, Millis>,
    pending_renewal: FastMap<Key, Millis>,
    /// So that a grant ended by its lease counts in the hold time too.
    leases: LeaseEnds,
    /// The time the node gave the call whose events are counted next: a
    /// grant's lease runs from it, as in the node (the events are counted
    /// a little later).
    node_now: Millis,
}

fn insert<K: std::hash::Hash + Eq, V>(map: &mut FastMap<K, V>, key: K, value: V) {
    if map.len() >= MAX_TRACKED {
        map.clear();
    }
    map.insert(key, value);
}

impl Timing {
    /// A request received at `received_at` was answered `served` (an
    /// acquire at `answered_at`).
    pub(crate) fn answered(
        &mut self,
        m: &Metrics,
        request: LockRequest<'_>,
        served: &Served<Answer>,
        received_at: Millis,
        answered_at: Millis,
    ) {
        match request {
            LockRequest::Acquire(AcquireRef { key, lease_ms, .. }) => {
                self.acquired(m, key, lease_ms, served, received_at, answered_at)
            }
            LockRequest::Release { key, .. } => self.released(m, key, served, received_at),
            LockRequest::Renew { key, lease_ms, .. } => {
                self.renewed(m, key, lease_ms, served, received_at)
            }
            LockRequest::Query { .. } | LockRequest::Watch { .. } => match served {
                Served::Redirect(_) => m.error(ErrorReason::Redirected),
                Served::Done(Answer::Watched(_)) => m.add(Count::WatchesAnswered, 1),
                Served::Done(Answer::Refused(_)) => m.error(ErrorReason::TooManyWatches),
                _ => {}
            },
            LockRequest::SetValue { .. } => match served {
                Served::Redirect(_) => m.error(ErrorReason::Redirected),
                Served::Done(Answer::Changed(Outcome::ValueSet)) => m.add(Count::ValuesSet, 1),
                Served::Done(Answer::Changed(_)) => m.error(ErrorReason::NotHeld),
                _ => {}
            },
        }
    }

    /// An acquire received at `received_at` asking for `lease_ms` was
    /// answered at `now`.
    fn acquired(
        &mut self,
        m: &Metrics,
        key: &Key,
        lease_ms: Millis,
        outcome: &Served<Answer>,
        received_at: Millis,
        now: Millis,
    ) {
        match outcome {
            Served::Done(Answer::Acquired(AcquireOutcome::Granted { .. })) => {
                m.add(Count::Grants, 1);
                m.acquire_wait.observe(now.saturating_sub(received_at));
                // The node's lease runs from the request's arrival.
                self.hold_begins(m, key, now, received_at, Some(lease_ms));
            }
            Served::Done(Answer::Acquired(AcquireOutcome::Queued { id })) => {
                insert(&mut self.queued_at, *id, (received_at, lease_ms))
            }
            Served::Done(Answer::Acquired(AcquireOutcome::Refused(Refusal::TooManyLocks))) => {
                m.error(ErrorReason::TooManyLocks)
            }
            Served::Done(Answer::Acquired(AcquireOutcome::Refused(Refusal::TooManyWaiters))) => {
                m.error(ErrorReason::TooManyWaiters)
            }
            // An answer of another kind: nothing to time.
            Served::Done(_) => {}
            Served::Redirect(_) => m.error(ErrorReason::Redirected),
            Served::Later => insert(&mut self.pending_lease, key.clone(), lease_ms),
        }
    }

    /// The node's time for the events counted next (see `node_now`).
    pub(crate) fn granted_at(&mut self, node_now: Millis) {
        self.node_now = node_now;
    }

    /// `key` is granted at `now` for `lease_ms` (if known), its lease
    /// running from `lease_from`. A previous
    /// grant of it whose lease has ended (the key handed on at expiry, or
    /// taken again before the timer ran) ends at its lease's end.
    fn hold_begins(
        &mut self,
        m: &Metrics,
        key: &Key,
        now: Millis,
        lease_from: Millis,
        lease_ms: Option<Millis>,
    ) {
        if let Some(end) = self.leases.take_if_ended(key, now) {
            if let Some(since) = self.held_since.get(key) {
                m.hold.observe(end.saturating_sub(*since));
            }
        }
        insert(&mut self.held_since, key.clone(), now);
        match lease_ms {
            Some(lease) => self.leases.set(key, lease_from.saturating_add(lease)),
            None => self.leases.forget(key),
        }
    }

    /// Grants whose lease ended by `now` (the timer's tick) end then:
    /// their hold time is counted up to the lease's end.
    pub(crate) fn expire(&mut self, m: &Metrics, now: Millis) {
        for (key, end) in self.leases.take_ended(now) {
            if let Some(since) = self.held_since.remove(&key) {
                m.hold.observe(end.saturating_sub(since));
            }
        }
    }

    /// A release of `key` arrives at `now` (before the node sees it, so
    /// that a hand-over in the same call finds it).
    pub(crate) fn releasing(&mut self, key: &Key, now: Millis) {
        insert(&mut self.released_at, key.clone(), now);
    }

    /// The release's answer, after its events were counted.
    fn released(&mut self, m: &Metrics, key: &Key, outcome: &Served<Answer>, now: Millis) {
        match outcome {
            Served::Done(Answer::Changed(Outcome::Released)) => self.release_done(m, key, now),
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
        self.leases.forget(key);
        if let Some(since) = self.held_since.remove(key) {
            m.hold.observe(now.saturating_sub(since));
        }
    }

    fn renewed(
        &mut self,
        m: &Metrics,
        key: &Key,
        lease_ms: Millis,
        outcome: &Served<Answer>,
        now: Millis,
    ) {
        match outcome {
            Served::Done(Answer::Changed(Outcome::Renewed)) => {
                m.add(Count::Renewals, 1);
                self.leases.renew(key, now.saturating_add(lease_ms));
            }
            Served::Done(_) => m.error(ErrorReason::NotHeld),
            Served::Redirect(_) => m.error(ErrorReason::Redirected),
            Served::Later => insert(&mut self.pending_renewal, key.clone(), lease_ms),
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
                NodeEvent::WatchAnswered {
                    response: Response::Watched { .. },
                    ..
                } => m.add(Count::WatchesAnswered, 1),
                NodeEvent::WatchAnswered { .. } => m.error(ErrorReason::Redirected),
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
        let mut lease = None;
        if let Some((asked, lease_ms)) = id.and_then(|id| self.queued_at.remove(&id)) {
            m.acquire_wait.observe(now.saturating_sub(asked));
            lease = Some(lease_ms);
        }
        if id.is_none() {
            lease = self.pending_lease.remove(key);
        }
        if let Some(released) = self.released_at.remove(key) {
            m.handover.observe(now.saturating_sub(released));
        }
        let lease_from = self.node_now.min(now);
        self.hold_begins(m, key, now, lease_from, lease);
    }

    /// The late answer of a release or renewal (a Raft leader's).
    fn late_answer(&mut self, m: &Metrics, response: &Response, now: Millis) {
        match response {
            Response::Released { key } => {
                self.release_done(m, key, now);
                self.released_at.remove(key);
            }
            Response::Renewed { key, .. } => {
                m.add(Count::Renewals, 1);
                if let Some(lease) = self.pending_renewal.remove(key) {
                    self.leases
                        .renew(key, self.node_now.min(now).saturating_add(lease));
                }
            }
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
    use crate::metrics::{Count, ErrorReason};
    use crate::test_support::{key, mailbox};
    use crate::{Clock, SharedLocks, SingleNode};
    use baton_core::AcquireOutcome;
    use baton_proto::Op;

    use super::{Answer, Served};

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
        assert_eq!(m.requests(Op::Acquire), 2);
        assert_eq!(m.requests(Op::Release), 2);
        assert_eq!(m.errors(ErrorReason::NotHeld), 1);
        assert_eq!(m.count(Count::Grants), 2, "at once, then handed over");
        assert_eq!(m.count(Count::Releases), 1);
        assert_eq!(m.acquire_wait.snapshot().count, 2);
        assert_eq!(m.hold.snapshot().count, 1);
        assert_eq!(m.handover.snapshot().count, 1);
    }

    #[test]
    fn a_grant_ended_by_its_lease_counts_in_the_hold_time_at_the_lease_end() {
        use baton_core::Outcome;
        let m = crate::metrics::Metrics::default();
        let mut timing = super::Timing::default();
        let granted = Served::Done(Answer::Acquired(AcquireOutcome::Granted { token: 1 }));
        timing.acquired(&m, &key("a"), 100, &granted, 0, 0);
        timing.acquired(&m, &key("b"), 100, &granted, 0, 0);
        // b renewed at 80 for 100 more: it ends at 180.
        let renewed = Served::Done(Answer::Changed(Outcome::Renewed));
        timing.renewed(&m, &key("b"), 100, &renewed, 80);
        timing.expire(&m, 99);
        assert_eq!(m.hold.snapshot().count, 0, "no lease has ended yet");
        timing.expire(&m, 150);
        let hold = m.hold.snapshot();
        assert_eq!(hold.count, 1, "a ended at 100");
        assert!((hold.sum_seconds - 0.1).abs() < 1e-9, "{hold:?}");
        // Taken again before the timer ran: b's grant ended at 180.
        timing.acquired(&m, &key("b"), 100, &granted, 190, 190);
        let hold = m.hold.snapshot();
        assert_eq!(hold.count, 2);
        assert!((hold.sum_seconds - 0.28).abs() < 1e-9, "{hold:?}");
        // Released: counted once, not again at its lease's end.
        timing.releasing(&key("b"), 200);
        let released = Served::Done(Answer::Changed(Outcome::Released));
        timing.released(&m, &key("b"), &released, 200);
        timing.expire(&m, 10_000);
        assert_eq!(m.hold.snapshot().count, 3);
    }
}
