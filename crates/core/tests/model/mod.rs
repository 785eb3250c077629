//! A naive reference model of `LockService`: plain vectors scanned on every
//! operation, written straight from the rules so the real, indexed
//! implementation can be checked against it.

/// A key of the model: one of a few small numbers.
pub type K = u8;

/// An event the model expects: (waiter id, key, Some(token) if granted,
/// None if timed out).
pub type MEvent = (u64, K, Option<u64>);

#[derive(Clone, Debug)]
pub struct MLock {
    pub key: K,
    pub token: u64,
    pub lease: u64,
    pub expires_at: u64,
}

#[derive(Clone, Debug)]
pub struct MWaiter {
    pub id: u64,
    pub key: K,
    pub lease: u64,
    pub deadline: Option<u64>,
}

#[derive(Clone, Debug)]
pub struct Model {
    pub last_token: u64,
    pub locks: Vec<MLock>,
    /// In arrival order.
    pub waiters: Vec<MWaiter>,
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
    /// Past the quota: the key was free but the grants are at their cap.
    TooManyLocks,
    /// Past the quota: the acquire would wait but the queue is full.
    TooManyWaiters,
}

impl Model {
    pub fn holder(&self, key: K) -> Option<&MLock> {
        self.locks.iter().find(|l| l.key == key)
    }

    fn grant(&mut self, key: K, lease: u64, now: u64) -> u64 {
        self.last_token += 1;
        self.locks.push(MLock {
            key,
            token: self.last_token,
            lease,
            expires_at: now + lease,
        });
        self.last_token
    }

    pub fn acquire(&mut self, key: K, lease: u64, now: u64) -> MAcquire {
        let has_waiters = self.waiters.iter().any(|w| w.key == key);
        if self.holder(key).is_none() && !has_waiters {
            if self.locks.len() >= self.max_locks {
                return MAcquire::TooManyLocks;
            }
            MAcquire::Granted(self.grant(key, lease, now))
        } else if self.waiters.len() >= self.max_waiters {
            MAcquire::TooManyWaiters
        } else {
            MAcquire::Queued
        }
    }

    /// Records the waiter the service queued, under the id it chose.
    pub fn queue(&mut self, id: u64, key: K, wait: u64, lease: u64, now: u64) {
        self.waiters.push(MWaiter {
            id,
            key,
            lease,
            deadline: (wait > 0).then_some(now + wait),
        });
    }

    /// Whether the release or renewal names the live grant.
    pub fn release(&mut self, key: K, token: u64, now: u64, events: &mut Vec<MEvent>) -> bool {
        let Some(i) = self
            .locks
            .iter()
            .position(|l| l.key == key && l.token == token)
        else {
            return false;
        };
        self.locks.remove(i);
        self.hand_on(key, now, events);
        true
    }

    pub fn renew(&mut self, key: K, token: u64, lease: u64, now: u64) -> bool {
        match self
            .locks
            .iter_mut()
            .find(|l| l.key == key && l.token == token)
        {
            Some(l) => {
                l.lease = lease;
                l.expires_at = now + lease;
                true
            }
            None => false,
        }
    }

    pub fn cancel(&mut self, id: u64) -> bool {
        let before = self.waiters.len();
        self.waiters.retain(|w| w.id != id);
        self.waiters.len() != before
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

    fn hand_on(&mut self, key: K, now: u64, events: &mut Vec<MEvent>) {
        while let Some(i) = self.waiters.iter().position(|w| w.key == key) {
            let w = self.waiters.remove(i);
            if w.deadline.is_some_and(|d| d <= now) {
                events.push((w.id, key, None));
            } else {
                let token = self.grant(key, w.lease, now);
                events.push((w.id, key, Some(token)));
                return;
            }
        }
    }

    pub fn raise_token_floor(&mut self, floor: u64) {
        self.last_token = self.last_token.max(floor);
    }

    pub fn next_deadline(&self) -> Option<u64> {
        let leases = self.locks.iter().map(|l| l.expires_at);
        let waits = self.waiters.iter().filter_map(|w| w.deadline);
        leases.chain(waits).min()
    }
}
