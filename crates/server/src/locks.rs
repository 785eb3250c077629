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
}

impl<N: LockNode> SharedLocks<N> {
    pub fn new(node: N, clock: Clock) -> SharedLocks<N> {
        SharedLocks {
            node: Mutex::new(node),
            clock,
            armed: AtomicU64::new(u64::MAX),
            wake_timer: Notify::new(),
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
        let result = {
            let mut node = self.lock();
            let result = f(&mut node, self.clock.now(), &mut events);
            self.rearm_if_earlier(&node);
            result
        };
        self.deliver(&mut events);
        result
    }

    /// Wakes the timer if the node now has a deadline earlier than the
    /// one the timer sleeps until. Called with the lock held.
    fn rearm_if_earlier(&self, service: &N) {
        if let Some(next) = service.next_deadline() {
            if next < self.armed.load(Ordering::Acquire) {
                self.armed.store(next, Ordering::Release);
                self.wake_timer.notify_one();
            }
        }
    }

    pub(crate) fn acquire(
        &self,
        key: Key,
        wait_ms: u64,
        lease_ms: u64,
        received_at: Millis,
        mailbox: &Mailbox,
    ) -> Served<AcquireOutcome> {
        let mut service = self.lock();
        let outcome = service.acquire(key, wait_ms, lease_ms, received_at, mailbox);
        self.rearm_if_earlier(&service);
        outcome
    }

    pub(crate) fn release(&self, key: &Key, token: Token, events: &mut Events) -> Served<Outcome> {
        let outcome = {
            let mut service = self.lock();
            let outcome = service.release(key, token, self.clock.now(), events);
            self.rearm_if_earlier(&service);
            outcome
        };
        self.deliver(events);
        outcome
    }

    pub(crate) fn renew(&self, key: &Key, token: Token, lease_ms: u64) -> Served<Outcome> {
        let mut service = self.lock();
        let outcome = service.renew(key, token, lease_ms, self.clock.now());
        self.rearm_if_earlier(&service);
        outcome
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
        let next = {
            let mut service = self.lock();
            service.tick(self.clock.now(), events);
            let next = service.next_deadline();
            self.armed
                .store(next.unwrap_or(u64::MAX), Ordering::Release);
            next
        };
        self.deliver(events);
        next
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
                let _ = node.release(&key, token, now, events);
            }
            self.rearm_if_earlier(&node);
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
                let _ = service.release(&key, token, now, &mut events);
            }
            self.rearm_if_earlier(&service);
        }
        self.deliver(&mut events);
    }
}
