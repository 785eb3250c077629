//! The node's lock state, shared by every connection task and the timer.
//!
//! One `std::sync::Mutex` guards the `LockService`; it is held only for the
//! state change itself, never across an `.await`, and every answer that
//! belongs to another connection is sent after it is released.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use baton_core::{AcquireOutcome, Key, Millis, Outcome, Token, WaiterId};
use tokio::sync::Notify;

use crate::clock::Clock;
use crate::delivery::{Delivery, Mailbox};
use crate::node::{LockNode, NodeEvent, NodeStatus, Served};

/// Events produced under the lock, delivered after it is dropped.
pub type Events = Vec<NodeEvent>;

/// A node's lock logic behind its mutex, with the timer's wake-up.
#[derive(Debug)]
pub struct SharedLocks<N> {
    node: Mutex<N>,
    clock: Clock,
    /// The deadline the timer task sleeps until (`u64::MAX`: none). Written
    /// under the service lock, so a request that makes an earlier deadline
    /// always sees whether the timer must be woken.
    armed: AtomicU64,
    wake_timer: Notify,
    output_ready: Notify,
}

impl<N: LockNode> SharedLocks<N> {
    pub fn new(node: N, clock: Clock) -> SharedLocks<N> {
        SharedLocks {
            node: Mutex::new(node),
            clock,
            armed: AtomicU64::new(u64::MAX),
            wake_timer: Notify::new(),
            output_ready: Notify::new(),
        }
    }

    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    fn lock(&self) -> MutexGuard<'_, N> {
        // Each method leaves the node consistent before it can panic, and a
        // node that keeps serving beats one that dies with its locks.
        self.node.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `f` on the node under the lock (the cluster shells feed peer
    /// messages this way), then delivers the events it produced.
    pub fn with<R>(&self, f: impl FnOnce(&mut N, Millis, &mut Events) -> R) -> R {
        let mut events = Vec::new();
        self.run(&mut events, self.clock.now(), f)
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
        let result = {
            let mut node = self.lock();
            let result = f(&mut node, now, events);
            self.after_change(&node);
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

    pub(crate) fn acquire(
        &self,
        key: Key,
        wait_ms: u64,
        lease_ms: u64,
        received_at: Millis,
        mailbox: &Mailbox,
        events: &mut Events,
    ) -> Served<AcquireOutcome> {
        self.run(events, received_at, |node, _, events| {
            node.acquire(key, wait_ms, lease_ms, received_at, mailbox, events)
        })
    }

    pub(crate) fn release(
        &self,
        key: &Key,
        token: Token,
        now: Millis,
        mailbox: &Mailbox,
        events: &mut Events,
    ) -> Served<Outcome> {
        self.run(events, now, |node, now, events| {
            node.release(key, token, now, Some(mailbox), events)
        })
    }

    pub(crate) fn renew(
        &self,
        key: &Key,
        token: Token,
        lease_ms: u64,
        now: Millis,
        mailbox: &Mailbox,
        events: &mut Events,
    ) -> Served<Outcome> {
        self.run(events, now, |node, now, events| {
            node.renew(key, token, lease_ms, now, mailbox, events)
        })
    }

    /// Takes a closed connection's queued acquires out of their queues.
    pub(crate) fn cancel_all(&self, ids: impl IntoIterator<Item = WaiterId>) {
        let mut service = self.lock();
        for id in ids {
            service.cancel(id);
        }
    }

    pub(crate) fn status(&self) -> NodeStatus {
        self.lock().status()
    }

    /// Runs everything due now; returns the next deadline to sleep until.
    pub(crate) fn tick(&self, events: &mut Events) -> Option<Millis> {
        self.run(events, self.clock.now(), |node, now, events| {
            node.tick(now, events);
            let next = node.next_deadline();
            self.armed
                .store(next.unwrap_or(u64::MAX), Ordering::Release);
            next
        })
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
                }
            }
            if ghosts.is_empty() {
                return;
            }
            let mut node = self.lock();
            let now = self.clock.now();
            for (key, token) in ghosts {
                tracing::debug!(%key, token, "releasing a grant nobody could receive");
                // A node that no longer serves has nothing to release.
                let _ = node.release(&key, token, now, None, events);
            }
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
                let _ = service.release(&key, token, now, None, &mut events);
            }
            self.after_change(&service);
        }
        self.deliver(&mut events);
    }
}
