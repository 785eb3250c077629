//! The node's lock state, shared by every connection task and the timer.
//!
//! One `std::sync::Mutex` guards the `LockService`; it is held only for the
//! state change itself, never across an `.await`, and every answer that
//! belongs to another connection is sent after it is released.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use baton_core::{AcquireOutcome, Event, Key, LockService, Millis, Outcome, Token, WaiterId};
use tokio::sync::Notify;

use crate::clock::Clock;
use crate::delivery::{Delivery, Mailbox};

/// Counters reported by `S`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Counts {
    pub(crate) token: Token,
    pub(crate) locks: u64,
    pub(crate) waiters: u64,
}

/// Events produced under the lock, delivered after it is dropped.
pub(crate) type Events = Vec<Event<Mailbox>>;

#[derive(Debug)]
pub(crate) struct SharedLocks {
    service: Mutex<LockService<Mailbox>>,
    clock: Clock,
    /// The deadline the timer task sleeps until (`u64::MAX`: none). Written
    /// under the service lock, so a request that makes an earlier deadline
    /// always sees whether the timer must be woken.
    armed: AtomicU64,
    wake_timer: Notify,
}

impl SharedLocks {
    pub(crate) fn new(clock: Clock) -> SharedLocks {
        SharedLocks {
            service: Mutex::new(LockService::new()),
            clock,
            armed: AtomicU64::new(u64::MAX),
            wake_timer: Notify::new(),
        }
    }

    pub(crate) fn clock(&self) -> &Clock {
        &self.clock
    }

    fn lock(&self) -> MutexGuard<'_, LockService<Mailbox>> {
        // A panic while holding the lock cannot leave the service half
        // changed in a way later calls rely on less than on a dead node.
        self.service.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Wakes the timer if the service now has a deadline earlier than the
    /// one the timer sleeps until. Called with the lock held.
    fn rearm_if_earlier(&self, service: &LockService<Mailbox>) {
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
    ) -> AcquireOutcome {
        let mut service = self.lock();
        let outcome = service.acquire(key, wait_ms, lease_ms, received_at, mailbox.clone());
        self.rearm_if_earlier(&service);
        outcome
    }

    pub(crate) fn release(&self, key: &Key, token: Token, events: &mut Events) -> Outcome {
        let outcome = {
            let mut service = self.lock();
            let outcome = service.release(key, token, self.clock.now(), events);
            self.rearm_if_earlier(&service);
            outcome
        };
        self.deliver(events);
        outcome
    }

    pub(crate) fn renew(&self, key: &Key, token: Token, lease_ms: u64) -> Outcome {
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

    pub(crate) fn counts(&self) -> Counts {
        let service = self.lock();
        Counts {
            token: service.table().last_token(),
            locks: service.table().len() as u64,
            waiters: service.waiter_count() as u64,
        }
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
    pub(crate) fn deliver(&self, events: &mut Events) {
        while !events.is_empty() {
            let mut ghosts: Vec<(Key, Token)> = Vec::new();
            for event in events.drain(..) {
                match event {
                    Event::Granted {
                        id,
                        handle,
                        key,
                        token,
                    } => {
                        if let Err(Delivery::Granted { key, token, .. }) =
                            handle.send(Delivery::Granted { id, key, token })
                        {
                            ghosts.push((key, token));
                        }
                    }
                    Event::TimedOut { id, handle, key } => {
                        // A closed connection no longer cares.
                        let _ = handle.send(Delivery::TimedOut { id, key });
                    }
                }
            }
            if ghosts.is_empty() {
                return;
            }
            let mut service = self.lock();
            let now = self.clock.now();
            for (key, token) in ghosts {
                tracing::debug!(%key, token, "releasing a grant nobody could receive");
                service.release(&key, token, now, events);
            }
            self.rearm_if_earlier(&service);
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
                service.release(&key, token, now, &mut events);
            }
            self.rearm_if_earlier(&service);
        }
        self.deliver(&mut events);
    }
}
