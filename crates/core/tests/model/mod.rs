//! A naive reference model of `LockService`: plain vectors scanned on every
//! operation, written straight from the rules so the real, indexed
//! implementation can be checked against it. Keys may be semaphores (up to
//! their permits of grants) and readers-writer locks (shared grants
//! together, an exclusive one alone); grants may carry a value.

use baton_core::{AcquireOptions, HolderValue, LockMode};
use proptest::prelude::*;

/// A key of the model: one of a few small numbers.
pub type K = u8;

/// An event the model expects: (waiter id, key, Some(token) if granted,
/// None if timed out).
pub type MEvent = (u64, K, Option<u64>);

/// What an acquire asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ask {
    pub permits: u32,
    pub shared: bool,
    /// A value (the model only tells values apart by a number).
    pub value: Option<u8>,
}

impl Ask {
    pub const PLAIN: Ask = Ask {
        permits: 1,
        shared: false,
        value: None,
    };
}

#[derive(Clone, Debug)]
pub struct MLock {
    pub key: K,
    pub token: u64,
    pub lease: u64,
    pub expires_at: u64,
    pub ask: Ask,
}

#[derive(Clone, Debug)]
pub struct MWaiter {
    pub id: u64,
    pub key: K,
    pub lease: u64,
    pub deadline: Option<u64>,
    pub ask: Ask,
}

#[derive(Clone, Debug)]
pub struct Model {
    pub last_token: u64,
    pub locks: Vec<MLock>,
    /// In arrival order.
    pub waiters: Vec<MWaiter>,
    /// Keys a cancel let the head of in: handed on at the next tick.
    pub stalled: Vec<K>,
    /// The quota: grants held and waiters queued at most.
    pub max_locks: usize,
    pub max_waiters: usize,
}

impl Default for Model {
    fn default() -> Self {
        Model {
            last_token: 0,
            locks: Vec::new(),
            waiters: Vec::new(),
            stalled: Vec::new(),
            max_locks: usize::MAX,
            max_waiters: usize::MAX,
        }
    }
}

/// What the model says an acquire does.
#[derive(Debug, PartialEq, Eq)]
pub enum MAcquire {
    Granted(u64),
    Queued,
    /// Past the quota: the key had room but the grants are at their cap.
    TooManyLocks,
    /// Past the quota: the acquire would wait but the queue is full.
    TooManyWaiters,
    /// The key has holders or waiters of these other permits.
    Permits(u32),
}

impl Model {
    /// The key's grants, oldest first.
    pub fn holders(&self, key: K) -> Vec<&MLock> {
        let mut held: Vec<&MLock> = self.locks.iter().filter(|l| l.key == key).collect();
        held.sort_by_key(|l| l.token);
        held
    }

    /// The oldest grant of the key.
    pub fn holder(&self, key: K) -> Option<&MLock> {
        self.holders(key).first().copied()
    }

    /// Whether the key has room for a grant as `ask` asks.
    fn room(&self, key: K, ask: Ask) -> bool {
        let held = self.holders(key);
        match held.first() {
            None => true,
            Some(first) if first.ask.permits != ask.permits => false,
            Some(_) if ask.shared => held.iter().all(|l| l.ask.shared),
            Some(_) => held.iter().all(|l| !l.ask.shared) && held.len() < ask.permits as usize,
        }
    }

    fn grant(&mut self, key: K, lease: u64, ask: Ask, now: u64) -> u64 {
        self.last_token += 1;
        self.locks.push(MLock {
            key,
            token: self.last_token,
            lease,
            expires_at: now + lease,
            ask,
        });
        self.last_token
    }

    pub fn acquire(&mut self, key: K, lease: u64, ask: Ask, now: u64) -> MAcquire {
        let first_waiter = self.waiters.iter().find(|w| w.key == key);
        let permits = self
            .holder(key)
            .map(|l| l.ask.permits)
            .or(first_waiter.map(|w| w.ask.permits));
        if let Some(n) = permits.filter(|&n| n != ask.permits) {
            return MAcquire::Permits(n);
        }
        if first_waiter.is_none() && self.room(key, ask) {
            if self.locks.len() >= self.max_locks {
                return MAcquire::TooManyLocks;
            }
            MAcquire::Granted(self.grant(key, lease, ask, now))
        } else if self.waiters.len() >= self.max_waiters {
            MAcquire::TooManyWaiters
        } else {
            MAcquire::Queued
        }
    }

    /// Records the waiter the service queued, under the id it chose.
    pub fn queue(&mut self, id: u64, key: K, wait: u64, lease: u64, ask: Ask, now: u64) {
        self.waiters.push(MWaiter {
            id,
            key,
            lease,
            deadline: (wait > 0).then_some(now + wait),
            ask,
        });
    }

    /// The index of the key's grant with `token` if it is live at `now`.
    /// A grant whose lease ended by then is no longer held, whether a tick
    /// came or not: it expires here, and the key is handed on.
    fn live(&mut self, key: K, token: u64, now: u64, events: &mut Vec<MEvent>) -> Option<usize> {
        let i = self
            .locks
            .iter()
            .position(|l| l.key == key && l.token == token)?;
        if self.locks[i].expires_at > now {
            return Some(i);
        }
        self.locks.remove(i);
        self.hand_on(key, now, events);
        None
    }

    /// Whether the key's grant with `token` is held, its lease ended by
    /// `now` (what [`Model::live`] expires).
    pub fn lapsed(&self, key: K, token: u64, now: u64) -> bool {
        self.locks
            .iter()
            .any(|l| l.key == key && l.token == token && l.expires_at <= now)
    }

    /// Whether the release names a live grant.
    pub fn release(&mut self, key: K, token: u64, now: u64, events: &mut Vec<MEvent>) -> bool {
        let Some(i) = self.live(key, token, now, events) else {
            return false;
        };
        self.locks.remove(i);
        self.hand_on(key, now, events);
        true
    }

    /// Whether the renewal names a live grant.
    pub fn renew(
        &mut self,
        key: K,
        token: u64,
        lease: u64,
        now: u64,
        events: &mut Vec<MEvent>,
    ) -> bool {
        let Some(i) = self.live(key, token, now, events) else {
            return false;
        };
        let lock = &mut self.locks[i];
        lock.lease = lease;
        lock.expires_at = now + lease;
        true
    }

    /// Whether the value set names a live grant.
    pub fn set_value(
        &mut self,
        key: K,
        token: u64,
        value: Option<u8>,
        now: u64,
        events: &mut Vec<MEvent>,
    ) -> bool {
        let Some(i) = self.live(key, token, now, events) else {
            return false;
        };
        self.locks[i].ask.value = value;
        true
    }

    pub fn cancel(&mut self, id: u64) -> bool {
        let Some(i) = self.waiters.iter().position(|w| w.id == id) else {
            return false;
        };
        let key = self.waiters.remove(i).key;
        let head = self.waiters.iter().find(|w| w.key == key).map(|w| w.ask);
        if head.is_some_and(|ask| self.room(key, ask)) {
            self.stalled.push(key);
        }
        true
    }

    pub fn tick(&mut self, now: u64, events: &mut Vec<MEvent>) {
        let mut out: Vec<MWaiter> = self
            .waiters
            .iter()
            .filter(|w| w.deadline.is_some_and(|d| d <= now))
            .cloned()
            .collect();
        out.sort_by_key(|w| (w.deadline, w.id));
        self.waiters.retain(|w| w.deadline.is_none_or(|d| d > now));
        events.extend(out.iter().map(|w| (w.id, w.key, None)));
        let mut freed = std::mem::take(&mut self.stalled);
        freed.extend(out.iter().map(|w| w.key));
        for key in freed {
            self.hand_on(key, now, events);
        }
        loop {
            let due = self
                .locks
                .iter()
                .enumerate()
                .filter(|(_, l)| l.expires_at <= now)
                .min_by_key(|(_, l)| (l.expires_at, l.token))
                .map(|(i, _)| i);
            let Some(i) = due else {
                break;
            };
            let lock = self.locks.remove(i);
            self.hand_on(lock.key, now, events);
        }
    }

    /// Grants the key to its waiters in time, oldest first, while the
    /// oldest has room; those out of time at the head leave first.
    fn hand_on(&mut self, key: K, now: u64, events: &mut Vec<MEvent>) {
        while let Some(i) = self.waiters.iter().position(|w| w.key == key) {
            let head = self.waiters[i].clone();
            if head.deadline.is_some_and(|d| d <= now) {
                self.waiters.remove(i);
                events.push((head.id, key, None));
                continue;
            }
            if !self.room(key, head.ask) {
                return;
            }
            self.waiters.remove(i);
            let token = self.grant(key, head.lease, head.ask, now);
            events.push((head.id, key, Some(token)));
        }
    }

    pub fn raise_token_floor(&mut self, floor: u64) {
        self.last_token = self.last_token.max(floor);
    }

    pub fn next_deadline(&self) -> Option<u64> {
        if !self.stalled.is_empty() {
            return Some(0);
        }
        let leases = self.locks.iter().map(|l| l.expires_at);
        let waits = self.waiters.iter().filter_map(|w| w.deadline);
        leases.chain(waits).min()
    }
}

/// What an acquire asks for on each key: key 0 is plain, key 1 a
/// semaphore (acquires name 2 or 3 permits), key 2 a readers-writer lock.
pub fn ask(key: K, more: bool, shared: bool, value: Option<u8>) -> Ask {
    match key {
        0 => Ask {
            value,
            ..Ask::PLAIN
        },
        1 => Ask {
            permits: 2 + u32::from(more),
            shared: false,
            value,
        },
        _ => Ask {
            permits: 1,
            shared,
            value,
        },
    }
}

/// The value the model's number `n` stands for.
pub fn holder_value(n: u8) -> HolderValue {
    HolderValue::new(format!("v{n}").as_bytes()).unwrap()
}

/// The options the service is given for a model's ask.
pub fn options(ask: Ask) -> AcquireOptions {
    AcquireOptions {
        permits: ask.permits,
        mode: if ask.shared {
            LockMode::Shared
        } else {
            LockMode::Exclusive
        },
        value: ask.value.map(holder_value),
    }
}

/// A random acquire of both property runs: its key, wait, lease and what
/// it asks for (see [`ask`]).
#[derive(Clone, Copy, Debug)]
pub struct AcquireOp {
    pub key: K,
    pub wait: u64,
    pub lease: u64,
    pub more: bool,
    pub shared: bool,
    pub value: Option<u8>,
}

impl AcquireOp {
    pub fn ask(&self) -> Ask {
        ask(self.key, self.more, self.shared, self.value)
    }
}

/// Acquires of keys `0..keys`, waits of 0 (no limit) or a few ms.
pub fn acquire_op(keys: K) -> impl Strategy<Value = AcquireOp> {
    (
        0..keys,
        prop_oneof![Just(0u64), 1..25u64],
        1..40u64,
        (any::<bool>(), any::<bool>(), proptest::option::of(0..3u8)),
    )
        .prop_map(|(key, wait, lease, (more, shared, value))| AcquireOp {
            key,
            wait,
            lease,
            more,
            shared,
            value,
        })
}
