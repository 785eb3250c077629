//! The node's lock state, shared by every connection task and the timer.
//!
//! One `std::sync::Mutex` guards the `LockService`; it is held only for the
//! state change itself, never across an `.await`, and every answer that
//! belongs to another connection is sent after it is released.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use baton_core::{Key, Millis, Token, WaiterId, WatchId};
use baton_proto::Op;
use tokio::sync::Notify;

use crate::clock::Clock;
use crate::delivery::{Delivery, Mailbox};
use crate::inspect::{LockPage, LockQuery};
use crate::metrics::Metrics;
use crate::node::{Events, LockNode, NodeEvent, NodeStatus, Observed, Served};
use crate::request::{Answer, Incoming, LockRequest};
use crate::timing::Timing;

/// A node's lock logic behind its mutex, with the timer's wake-up.
#[derive(Debug)]
pub struct SharedLocks<N> {
    node: Mutex<Guarded<N>>,
    /// The node's counts (`/metrics`): relaxed atomics, read without the lock.
    metrics: Metrics,
    clock: Clock,
    /// The deadline the timer task sleeps until (`u64::MAX`: none). Written
    /// under the service lock, so a request that makes an earlier deadline
    /// always sees whether the timer must be woken.
    armed: AtomicU64,
    wake_timer: Notify,
    output_ready: Notify,
}

/// The node and the times behind its metrics, under one mutex (derefs
/// to the node).
#[derive(Debug)]
struct Guarded<N> {
    node: N,
    timing: Timing,
}

impl<N> std::ops::Deref for Guarded<N> {
    type Target = N;
    fn deref(&self) -> &N {
        &self.node
    }
}

impl<N> std::ops::DerefMut for Guarded<N> {
    fn deref_mut(&mut self) -> &mut N {
        &mut self.node
    }
}

impl<N: LockNode> SharedLocks<N> {
    pub fn new(node: N, clock: Clock) -> SharedLocks<N> {
        SharedLocks {
            node: Mutex::new(Guarded {
                node,
                timing: Timing::default(),
            }),
            metrics: Metrics::default(),
            clock,
            armed: AtomicU64::new(u64::MAX),
            wake_timer: Notify::new(),
            output_ready: Notify::new(),
        }
    }

    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// The node's counts.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    fn lock(&self) -> MutexGuard<'_, Guarded<N>> {
        // Each method leaves the node consistent before it can panic, and a
        // node that keeps serving beats one that dies with its locks.
        self.node.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `f` on the node under the lock, then delivers the events it
    /// produced. The cluster shells feed the node this way: `f` calls one
    /// named input of the node (see the call protocol in `node.rs`).
    pub fn with<R>(&self, f: impl FnOnce(&mut N, Millis, &mut Events) -> R) -> R {
        let mut events = Vec::new();
        self.run(&mut events, self.clock.now(), f)
    }

    /// Reads the node under the lock, changing nothing (a simulation's
    /// checks, a test's).
    pub fn inspect<R>(&self, f: impl FnOnce(&N) -> R) -> R {
        f(&self.lock())
    }

    /// The one way into the node: `f` runs under the lock; then the timer
    /// and the peer shell are woken if they must be, and the events go to
    /// their connections once the lock is released.
    fn run<R>(
        &self,
        events: &mut Events,
        now: Millis,
        f: impl FnOnce(&mut N, Millis, &mut Events) -> R,
    ) -> R {
        self.run_counted(
            events,
            now,
            |g, now, ev| f(&mut g.node, now, ev),
            |_, _, _| {},
        )
    }

    /// [`Self::run`], then, still under the lock, the events and the
    /// result are counted in the metrics (`count` gets the result).
    fn run_counted<R>(
        &self,
        events: &mut Events,
        now: Millis,
        f: impl FnOnce(&mut Guarded<N>, Millis, &mut Events) -> R,
        count: impl FnOnce(&mut Timing, &Metrics, &R),
    ) -> R {
        let result = {
            let mut guarded = self.lock();
            let result = f(&mut guarded, now, events);
            if !events.is_empty() {
                // The events are delivered after the lock; counted now,
                // at the time they happened.
                let at = self.clock.now().max(now);
                guarded.timing.granted_at(now);
                guarded.timing.events(&self.metrics, events, at);
            }
            count(&mut guarded.timing, &self.metrics, &result);
            self.after_change(&guarded.node);
            result
        };
        if !events.is_empty() {
            self.deliver(events);
        }
        result
    }

    /// Wakes the timer if the node now has a deadline earlier than the
    /// one the timer sleeps until, and the peer shell if the node has
    /// something for its peers. Called with the lock held.
    fn after_change(&self, node: &N) {
        if let Some(next) = node.next_deadline() {
            if next < self.armed.load(Ordering::Acquire) {
                self.armed.store(next, Ordering::Release);
                self.wake_timer.notify_one();
            }
        }
        if node.has_output() {
            self.output_ready.notify_one();
        }
    }

    /// Resolves when the node may have something for its peers.
    pub async fn output_ready(&self) {
        self.output_ready.notified().await;
    }

    /// A client's request: counted by its op, handled by the node under
    /// the lock, its outcome counted in the metrics.
    pub(crate) fn handle(
        &self,
        request: LockRequest<'_>,
        received_at: Millis,
        mailbox: &Mailbox,
        events: &mut Events,
    ) -> Served<Answer> {
        self.metrics.request(request.op());
        // An acquire's wait is measured to its answer, read before the lock.
        let answered_at = match request {
            LockRequest::Acquire(_) => self.clock.now().max(received_at),
            _ => received_at,
        };
        self.run_counted(
            events,
            received_at,
            |g, now, events| {
                if let LockRequest::Release { key, .. } = request {
                    // Before the node hands the key on, in this call or later.
                    g.timing.releasing(key, now);
                }
                let reply_to = mailbox;
                g.node.handle(
                    Incoming {
                        request,
                        now,
                        reply_to,
                    },
                    events,
                )
            },
            |timing, metrics, served| {
                timing.answered(metrics, request, served, received_at, answered_at)
            },
        )
    }

    /// Takes a closed connection's queued acquires out of their queues,
    /// and its pending watches out of the node's. A waiter that leaves
    /// the head of a line may let the next in: the timer is woken if the
    /// node says so.
    pub(crate) fn cancel_all(
        &self,
        ids: impl IntoIterator<Item = WaiterId>,
        watches: impl IntoIterator<Item = WatchId>,
    ) {
        let mut service = self.lock();
        for id in ids {
            service.cancel(id);
            service.timing.cancelled(id);
        }
        for id in watches {
            service.node.cancel_watch(id);
        }
        self.after_change(&service.node);
    }

    pub(crate) fn status(&self) -> NodeStatus {
        self.metrics.request(Op::Status);
        self.lock().status()
    }

    /// The node's status, its engine's counters, its members and any
    /// health issue, read at once under the lock for the HTTP endpoint
    /// (not counted as an `S`).
    pub fn observe(&self) -> Observed {
        let now = self.clock.now();
        let node = self.lock();
        Observed {
            status: node.status(),
            counters: node.counters(),
            members: node.members(now),
            health_issue: node.health_issue(now),
            expiry_overdue_ms: node.served_table().ok().map(|table| {
                let first_end = table.next_expiry().map_or(now, |(end, _, _)| end);
                now.saturating_sub(first_end)
            }),
        }
    }

    /// A page of the held locks (see [`crate::inspect`]); the lock is held
    /// for that one page.
    pub fn list_locks(&self, query: &LockQuery) -> Served<LockPage> {
        let now = self.clock.now();
        self.lock().list_locks(query, now)
    }

    /// Runs everything due now; returns the next deadline to sleep until.
    pub(crate) fn tick(&self, events: &mut Events) -> Option<Millis> {
        let now = self.clock.now();
        self.run_counted(
            events,
            now,
            |g, now, events| {
                g.node.tick(now, events);
                let next = g.node.next_deadline();
                self.armed
                    .store(next.unwrap_or(u64::MAX), Ordering::Release);
                next
            },
            // Grants whose lease ran out end now, for the hold time.
            |timing, metrics, _| timing.expire(metrics, now),
        )
    }

    pub(crate) async fn timer_woken(&self) {
        self.wake_timer.notified().await;
    }

    /// Sends each event to its waiter's connection. A grant whose
    /// connection is gone is released at once, which may hand the key to
    /// the next waiter in turn.
    pub fn deliver(&self, events: &mut Events) {
        while !events.is_empty() {
            let mut ghosts: Vec<(Key, Token)> = Vec::new();
            for event in events.drain(..) {
                match event {
                    NodeEvent::Granted {
                        id,
                        mailbox,
                        key,
                        token,
                    } => {
                        if let Err(Delivery::Granted { key, token, .. }) =
                            mailbox.send(Delivery::Granted { id, key, token })
                        {
                            ghosts.push((key, token));
                        }
                    }
                    // A closed connection no longer cares about these.
                    NodeEvent::TimedOut { id, mailbox, key } => {
                        let _ = mailbox.send(Delivery::TimedOut { id, key });
                    }
                    NodeEvent::Moved {
                        id,
                        mailbox,
                        key,
                        to,
                    } => {
                        let _ = mailbox.send(Delivery::Moved { id, key, to });
                    }
                    NodeEvent::Reply { mailbox, response } => {
                        if let Err(Delivery::Reply(baton_proto::Response::Granted { key, token })) =
                            mailbox.send(Delivery::Reply(response))
                        {
                            ghosts.push((key, token));
                        }
                    }
                    NodeEvent::WatchAnswered {
                        id,
                        mailbox,
                        response,
                    } => {
                        let _ = mailbox.send(Delivery::Watched { id, response });
                    }
                }
            }
            if ghosts.is_empty() {
                return;
            }
            let mut node = self.lock();
            let now = self.clock.now();
            for (key, token) in ghosts {
                tracing::debug!(%key, token, "releasing a grant nobody could receive");
                node.release_unreceived(&key, token, now, events);
            }
            node.timing.granted_at(now);
            node.timing.events(&self.metrics, events, now);
            self.after_change(&node);
        }
    }

    /// Releases grants that were made but never reached their client.
    pub(crate) fn release_ghosts(&self, ghosts: impl IntoIterator<Item = (Key, Token)>) {
        let mut events = Vec::new();
        {
            let mut service = self.lock();
            let now = self.clock.now();
            for (key, token) in ghosts {
                tracing::debug!(%key, token, "releasing a grant its connection never took");
                service.release_unreceived(&key, token, now, &mut events);
            }
            service.timing.granted_at(now);
            service.timing.events(&self.metrics, &events, now);
            self.after_change(&service);
        }
        self.deliver(&mut events);
    }
}

/// The requests the tests make, in the shape of their answers.
#[cfg(test)]
impl<N: LockNode> SharedLocks<N> {
    pub(crate) fn acquire(
        &self,
        key: Key,
        wait_ms: u64,
        lease_ms: u64,
        received_at: Millis,
        mailbox: &Mailbox,
        events: &mut Events,
    ) -> Served<baton_core::AcquireOutcome> {
        let request = LockRequest::Acquire(crate::AcquireRef {
            key: &key,
            wait_ms,
            lease_ms,
            options: &baton_core::AcquireOptions::default(),
        });
        match self.handle(request, received_at, mailbox, events) {
            Served::Done(Answer::Acquired(outcome)) => Served::Done(outcome),
            Served::Done(other) => panic!("an acquire answered {other:?}"),
            Served::Redirect(to) => Served::Redirect(to),
            Served::Later => Served::Later,
        }
    }

    pub(crate) fn release(
        &self,
        key: &Key,
        token: Token,
        now: Millis,
        mailbox: &Mailbox,
        events: &mut Events,
    ) -> Served<baton_core::Outcome> {
        match self.handle(LockRequest::Release { key, token }, now, mailbox, events) {
            Served::Done(Answer::Changed(outcome)) => Served::Done(outcome),
            Served::Done(other) => panic!("a release answered {other:?}"),
            Served::Redirect(to) => Served::Redirect(to),
            Served::Later => Served::Later,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delivery::Delivery;
    use crate::single::SingleNode;
    use crate::test_support::{key, mailbox};
    use baton_core::{AcquireOutcome, Outcome};

    fn granted(outcome: Served<AcquireOutcome>) -> Token {
        match outcome {
            Served::Done(AcquireOutcome::Granted { token }) => token,
            other => panic!("expected a grant, got {other:?}"),
        }
    }

    #[test]
    fn a_release_hands_the_key_to_the_waiters_mailbox() {
        let locks = SharedLocks::new(SingleNode::new(), Clock::new());
        let (a, _a_rx) = mailbox();
        let (b, mut b_rx) = mailbox();
        let mut events = Vec::new();
        let t1 = granted(locks.acquire(key("k"), 0, 10_000, 0, &a, &mut events));
        let queued = locks.acquire(key("k"), 0, 10_000, 0, &b, &mut events);
        assert!(matches!(
            queued,
            Served::Done(AcquireOutcome::Queued { .. })
        ));
        let released = locks.release(&key("k"), t1, 1, &a, &mut events);
        assert_eq!(released, Served::Done(Outcome::Released));
        match b_rx.try_recv() {
            Ok(Delivery::Granted { token, .. }) => assert!(token > t1),
            other => panic!("expected the grant in b's mailbox, got {other:?}"),
        }
        assert_eq!(locks.status().locks, 1);
    }

    #[test]
    fn a_grant_whose_connection_is_gone_is_released_and_passed_on() {
        let locks = SharedLocks::new(SingleNode::new(), Clock::new());
        let (a, _a_rx) = mailbox();
        let (b, b_rx) = mailbox();
        let (c, mut c_rx) = mailbox();
        let mut events = Vec::new();
        let t1 = granted(locks.acquire(key("k"), 0, 10_000, 0, &a, &mut events));
        let _ = locks.acquire(key("k"), 0, 10_000, 0, &b, &mut events);
        let _ = locks.acquire(key("k"), 0, 10_000, 0, &c, &mut events);
        // b's connection went away without cancelling its wait.
        drop(b_rx);
        let _ = locks.release(&key("k"), t1, 1, &a, &mut events);
        match c_rx.try_recv() {
            Ok(Delivery::Granted { token, .. }) => assert!(token > t1 + 1, "b's token {token}"),
            other => panic!("expected the grant to pass to c, got {other:?}"),
        }
        let status = locks.status();
        assert_eq!((status.locks, status.waiters), (1, 0));
    }

    #[test]
    fn grants_a_connection_never_wrote_are_released() {
        let locks = SharedLocks::new(SingleNode::new(), Clock::new());
        let (a, _a_rx) = mailbox();
        let mut events = Vec::new();
        let t1 = granted(locks.acquire(key("k"), 0, 10_000, 0, &a, &mut events));
        locks.release_ghosts([(key("k"), t1)]);
        assert_eq!(locks.status().locks, 0);
        // A stale ghost (already released) changes nothing.
        let t2 = granted(locks.acquire(key("k"), 0, 10_000, 0, &a, &mut events));
        locks.release_ghosts([(key("k"), t1)]);
        assert_eq!(locks.status().locks, 1);
        assert!(t2 > t1);
    }

    #[test]
    fn a_lease_that_runs_out_ends_the_hold_at_the_tick() {
        let locks = SharedLocks::new(SingleNode::new(), Clock::new());
        let (a, _a_rx) = mailbox();
        let (b, _b_rx) = mailbox();
        let mut events = Vec::new();
        granted(locks.acquire(key("alone"), 0, 20, 0, &a, &mut events));
        granted(locks.acquire(key("passed"), 0, 20, 0, &a, &mut events));
        let queued = locks.acquire(key("passed"), 10_000, 10_000, 0, &b, &mut events);
        assert!(matches!(
            queued,
            Served::Done(AcquireOutcome::Queued { .. })
        ));
        std::thread::sleep(std::time::Duration::from_millis(40));
        locks.tick(&mut events);
        let hold = locks.metrics().hold.snapshot();
        assert_eq!(hold.count, 2, "both grants ended by their lease: {hold:?}");
        assert!((hold.sum_seconds - 0.04).abs() < 1e-9, "{hold:?}");
    }

    #[test]
    fn a_lease_not_yet_expired_past_its_end_is_overdue_until_the_tick() {
        let locks = SharedLocks::new(SingleNode::new(), Clock::new());
        let (a, _a_rx) = mailbox();
        let mut events = Vec::new();
        assert_eq!(locks.observe().expiry_overdue_ms, Some(0));
        granted(locks.acquire(key("k"), 0, 10, 0, &a, &mut events));
        assert_eq!(locks.observe().expiry_overdue_ms, Some(0));
        std::thread::sleep(std::time::Duration::from_millis(40));
        let overdue = locks.observe().expiry_overdue_ms;
        assert!(overdue.is_some_and(|ms| ms >= 30), "{overdue:?}");
        locks.tick(&mut events);
        assert_eq!(locks.observe().expiry_overdue_ms, Some(0));
    }
}
