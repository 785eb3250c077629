//! The FIFO wait queues of the node that serves clients: acquires waiting
//! for a held key, in arrival order, each with an optional deadline.
//!
//! These are not replicated: a waiter is a live connection on one node, and
//! a node that stops serving answers its waiters instead of handing them on.

use std::collections::{BTreeSet, VecDeque};

use crate::invariant::{debug_check, ensure, Broken, FULL_CHECK_UP_TO};
use crate::FastMap;

use crate::lock_mode::AcquireOptions;
use crate::{Key, Millis};

/// Names a queued acquire; unique and increasing for one [`WaitQueues`].
pub type WaiterId = u64;

/// A queued acquire. `handle` is whatever the caller needs to answer it.
#[derive(Debug)]
pub struct Waiter<H> {
    pub id: WaiterId,
    pub key: Key,
    pub lease_ms: u64,
    /// `None` waits without limit.
    pub deadline: Option<Millis>,
    /// What it asks for: permits, mode, value.
    pub options: AcquireOptions,
    pub handle: H,
}

/// One key's queue. Cancelled waiters leave their id behind (removing it
/// from the middle would be a scan); such stale ids are skipped when met
/// at the front and swept out when they outnumber the live ones.
#[derive(Debug, Default)]
struct KeyQueue {
    ids: VecDeque<WaiterId>,
    live: usize,
}

/// Below this many stale ids a sweep would cost more than the memory it frees.
const MIN_SWEEP: usize = 32;

/// Every waiter of the node, by key, in arrival order.
#[derive(Debug)]
pub struct WaitQueues<H> {
    waiters: FastMap<WaiterId, Waiter<H>>,
    queues: FastMap<Key, KeyQueue>,
    /// Waiters that have a deadline, soonest first.
    deadlines: BTreeSet<(Millis, WaiterId)>,
    next_id: WaiterId,
}

impl<H> Default for WaitQueues<H> {
    fn default() -> Self {
        Self {
            waiters: FastMap::default(),
            queues: FastMap::default(),
            deadlines: BTreeSet::new(),
            next_id: 1,
        }
    }
}

impl<H> WaitQueues<H> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Queues at the back of `key`'s queue. deadline None = waits without
    /// limit. Ids are unique, increasing.
    pub fn push(
        &mut self,
        key: Key,
        lease_ms: u64,
        deadline: Option<Millis>,
        options: AcquireOptions,
        handle: H,
    ) -> WaiterId {
        let id = self.next_id;
        self.next_id += 1;
        let queue = self.queues.entry(key.clone()).or_default();
        queue.ids.push_back(id);
        queue.live += 1;
        if let Some(at) = deadline {
            self.deadlines.insert((at, id));
        }
        self.waiters.insert(
            id,
            Waiter {
                id,
                key,
                lease_ms,
                deadline,
                options,
                handle,
            },
        );
        self.debug_validate();
        id
    }

    /// Removes a waiter wherever it is (its connection closed). None if
    /// already gone. O(log n) amortized: the id stays in its key's queue
    /// until skipped or swept.
    pub fn cancel(&mut self, id: WaiterId) -> Option<Waiter<H>> {
        let waiter = self.waiters.remove(&id)?;
        if let Some(at) = waiter.deadline {
            self.deadlines.remove(&(at, id));
        }
        self.forget_in_queue(&waiter.key);
        self.debug_validate();
        Some(waiter)
    }

    /// Accounts for one waiter of `key` gone from `waiters` by cancel or
    /// timeout, tidying or dropping the queue.
    fn forget_in_queue(&mut self, key: &Key) {
        let Some(queue) = self.queues.get_mut(key) else {
            return;
        };
        queue.live = queue.live.saturating_sub(1);
        if queue.live == 0 {
            self.queues.remove(key);
            return;
        }
        let waiters = &self.waiters;
        while queue
            .ids
            .front()
            .is_some_and(|id| !waiters.contains_key(id))
        {
            queue.ids.pop_front();
        }
        while queue.ids.back().is_some_and(|id| !waiters.contains_key(id)) {
            queue.ids.pop_back();
        }
        let stale = queue.ids.len().saturating_sub(queue.live);
        if stale >= MIN_SWEEP && stale > queue.live {
            queue.ids.retain(|id| waiters.contains_key(id));
            queue.ids.shrink_to_fit();
        }
    }

    /// The oldest waiter of `key` whose deadline is still in the future
    /// (deadline > now), left in place. Waiters met on the way whose
    /// deadline <= now are removed and appended to `timed_out` (they must
    /// never be granted).
    pub fn front(
        &mut self,
        key: &Key,
        now: Millis,
        timed_out: &mut Vec<Waiter<H>>,
    ) -> Option<&Waiter<H>> {
        let queue = self.queues.get_mut(key)?;
        let mut found = None;
        while let Some(&id) = queue.ids.front() {
            let Some(waiter) = self.waiters.get(&id) else {
                queue.ids.pop_front();
                continue;
            };
            match waiter.deadline {
                Some(at) if at <= now => {
                    queue.ids.pop_front();
                    queue.live = queue.live.saturating_sub(1);
                    self.deadlines.remove(&(at, id));
                    if let Some(waiter) = self.waiters.remove(&id) {
                        timed_out.push(waiter);
                    }
                }
                _ => {
                    found = Some(id);
                    break;
                }
            }
        }
        if queue.live == 0 {
            self.queues.remove(key);
        }
        self.debug_validate();
        self.waiters.get(&found?)
    }

    /// The oldest waiter of `key` whose deadline is still in the future,
    /// looked at without changing anything.
    pub fn first_in_time(&self, key: &Key, now: Millis) -> Option<&Waiter<H>> {
        self.waiters_of(key)
            .find(|w| w.deadline.is_none_or(|at| at > now))
    }

    /// The oldest waiter of `key` still in time, removed (see
    /// [`WaitQueues::front`] for those out of time met on the way).
    pub fn pop_next(
        &mut self,
        key: &Key,
        now: Millis,
        timed_out: &mut Vec<Waiter<H>>,
    ) -> Option<Waiter<H>> {
        let id = self.front(key, now, timed_out)?.id;
        let waiter = self.cancel(id);
        debug_assert!(waiter.is_some(), "the front waiter is gone");
        waiter
    }

    /// The options of `key`'s waiters (they all name the same permits).
    pub fn options_of(&self, key: &Key) -> Option<&AcquireOptions> {
        let queue = self.queues.get(key)?;
        let id = queue.ids.iter().find(|id| self.waiters.contains_key(id))?;
        self.waiters.get(id).map(|w| &w.options)
    }

    /// Every live waiter of `key`, oldest first.
    pub fn waiters_of(&self, key: &Key) -> impl Iterator<Item = &Waiter<H>> + '_ {
        self.queues
            .get(key)
            .into_iter()
            .flat_map(|q| q.ids.iter())
            .filter_map(|id| self.waiters.get(id))
    }

    /// Whether `key` has waiters still queued (live ones only).
    pub fn has_waiters(&self, key: &Key) -> bool {
        self.waiting_on(key) > 0
    }

    /// How many waiters `key` has still queued.
    pub fn waiting_on(&self, key: &Key) -> usize {
        self.queues.get(key).map_or(0, |q| q.live)
    }

    /// Earliest deadline of any live waiter.
    pub fn next_deadline(&self) -> Option<Millis> {
        self.deadlines.first().map(|&(at, _)| at)
    }

    /// Removes every waiter with deadline <= now, appending them to `out` in
    /// deadline order (ties in arrival order).
    pub fn take_timed_out(&mut self, now: Millis, out: &mut Vec<Waiter<H>>) {
        while let Some(&(at, id)) = self.deadlines.first() {
            if at > now {
                break;
            }
            self.deadlines.pop_first();
            if let Some(waiter) = self.waiters.remove(&id) {
                self.forget_in_queue(&waiter.key);
                out.push(waiter);
            }
        }
        self.debug_validate();
    }

    /// Number of live waiters on all keys.
    pub fn len(&self) -> usize {
        self.waiters.len()
    }

    pub fn is_empty(&self) -> bool {
        self.waiters.is_empty()
    }

    /// Removes and returns all waiters, oldest first (e.g. a node that stops
    /// serving answers them all M).
    pub fn drain_all(&mut self) -> Vec<Waiter<H>> {
        self.queues.clear();
        self.deadlines.clear();
        let mut all: Vec<Waiter<H>> = self.waiters.drain().map(|(_, w)| w).collect();
        all.sort_unstable_by_key(|w| w.id);
        all
    }

    /// The keys that have live waiters, in no particular order.
    pub fn keys(&self) -> impl Iterator<Item = &Key> + '_ {
        self.queues.keys()
    }

    /// Checks the queues' invariants: every live waiter is in its key's
    /// queue and in the deadline index if it has a deadline, each queue's
    /// count is its live ids, no queue is empty, and ids are below the next.
    pub fn validate(&self) -> Result<(), Broken> {
        let mut live = 0;
        for (key, queue) in &self.queues {
            let here = queue
                .ids
                .iter()
                .filter(|id| self.waiters.get(id).is_some_and(|w| w.key == *key))
                .count();
            ensure(here == queue.live && here > 0, || {
                format!("{key:?} counts {} waiters, has {here}", queue.live)
            })?;
            live += here;
        }
        ensure(live == self.waiters.len(), || {
            format!("{} waiters, {live} in queues", self.waiters.len())
        })?;
        for (id, w) in &self.waiters {
            ensure(*id == w.id && w.id < self.next_id, || {
                format!("waiter {} under id {id}, next {}", w.id, self.next_id)
            })?;
            if let Some(at) = w.deadline {
                ensure(self.deadlines.contains(&(at, w.id)), || {
                    format!("waiter {id} missing from the deadlines")
                })?;
            }
        }
        let timed = self.waiters.values().filter(|w| w.deadline.is_some());
        ensure(timed.count() == self.deadlines.len(), || {
            format!("{} deadlines indexed", self.deadlines.len())
        })
    }

    /// The debug build's check after a change (see [`FULL_CHECK_UP_TO`]).
    fn debug_validate(&self) {
        debug_check(self.waiters.len() <= FULL_CHECK_UP_TO, || self.validate());
        debug_assert!(self.deadlines.len() <= self.waiters.len());
    }

    /// Ids held in the queue of `key`, stale ones included: lets tests see
    /// that cancelled ids do not pile up.
    #[cfg(test)]
    fn queued_ids(&self, key: &Key) -> usize {
        self.queues.get(key).map_or(0, |q| q.ids.len())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test
mod tests {
    use super::*;

    fn key(s: &str) -> Key {
        Key::try_from(s).unwrap()
    }

    fn ids(ws: &[Waiter<&'static str>]) -> Vec<WaiterId> {
        ws.iter().map(|w| w.id).collect()
    }

    #[test]
    fn pops_in_arrival_order_per_key() {
        let mut q = WaitQueues::new();
        let a1 = q.push(key("a"), 10, None, AcquireOptions::default(), "a1");
        let b1 = q.push(key("b"), 20, Some(100), AcquireOptions::default(), "b1");
        let a2 = q.push(key("a"), 30, Some(100), AcquireOptions::default(), "a2");
        assert!(a1 < b1 && b1 < a2);
        assert_eq!(q.len(), 3);
        assert_eq!(q.waiting_on(&key("a")), 2);
        let mut timed_out = Vec::new();
        let w = q.pop_next(&key("a"), 0, &mut timed_out).unwrap();
        assert_eq!((w.id, w.lease_ms, w.handle), (a1, 10, "a1"));
        let w = q.pop_next(&key("a"), 0, &mut timed_out).unwrap();
        assert_eq!((w.id, w.deadline, w.handle), (a2, Some(100), "a2"));
        assert!(q.pop_next(&key("a"), 0, &mut timed_out).is_none());
        assert!(timed_out.is_empty());
        assert!(!q.has_waiters(&key("a")));
        assert!(q.has_waiters(&key("b")));
        assert_eq!(q.len(), 1);
    }

    #[test]
    fn pop_next_sets_aside_waiters_out_of_time() {
        let mut q = WaitQueues::new();
        let late1 = q.push(key("a"), 1, Some(50), AcquireOptions::default(), "late1");
        let late2 = q.push(key("a"), 1, Some(60), AcquireOptions::default(), "late2");
        let ok = q.push(key("a"), 1, Some(61), AcquireOptions::default(), "ok");
        let mut timed_out = Vec::new();
        let w = q.pop_next(&key("a"), 60, &mut timed_out).unwrap();
        assert_eq!(w.id, ok);
        assert_eq!(ids(&timed_out), vec![late1, late2]);
        assert!(q.is_empty());
        assert_eq!(q.next_deadline(), None);
        // Only timed-out waiters: nothing to grant, the queue is gone.
        q.push(key("b"), 1, Some(5), AcquireOptions::default(), "x");
        timed_out.clear();
        assert!(q.pop_next(&key("b"), 5, &mut timed_out).is_none());
        assert_eq!(timed_out.len(), 1);
        assert_eq!(q.queued_ids(&key("b")), 0);
    }

    #[test]
    fn cancel_removes_a_waiter_from_anywhere() {
        let mut q = WaitQueues::new();
        let w1 = q.push(key("a"), 1, Some(10), AcquireOptions::default(), "w1");
        let w2 = q.push(key("a"), 1, Some(20), AcquireOptions::default(), "w2");
        let w3 = q.push(key("a"), 1, None, AcquireOptions::default(), "w3");
        let gone = q.cancel(w2).unwrap();
        assert_eq!((gone.id, gone.handle), (w2, "w2"));
        assert!(q.cancel(w2).is_none());
        assert_eq!(q.waiting_on(&key("a")), 2);
        assert_eq!(q.next_deadline(), Some(10));
        q.cancel(w1);
        assert_eq!(q.next_deadline(), None);
        let mut timed_out = Vec::new();
        assert_eq!(q.pop_next(&key("a"), 100, &mut timed_out).unwrap().id, w3);
        assert!(timed_out.is_empty());
        assert!(q.cancel(w3).is_none());
        assert!(q.cancel(999).is_none());
    }

    #[test]
    fn cancelling_every_waiter_of_a_key_leaves_nothing_behind() {
        let mut q = WaitQueues::new();
        let n = 10_000;
        let ids: Vec<_> = (0..n)
            .map(|i| q.push(key("hot"), 1, Some(i), AcquireOptions::default(), "w"))
            .collect();
        // Cancel from the middle outwards, the worst order for lazy skipping.
        let (left, right) = ids.split_at(ids.len() / 2);
        for (i, &id) in left.iter().rev().chain(right.iter()).enumerate() {
            assert!(q.cancel(id).is_some());
            let live = q.waiting_on(&key("hot"));
            assert_eq!(live, ids.len() - i - 1);
            // Stale ids never dominate a queue for long.
            assert!(q.queued_ids(&key("hot")) <= 2 * live + MIN_SWEEP + 1);
        }
        assert!(q.is_empty());
        assert_eq!(q.queued_ids(&key("hot")), 0);
        assert!(q.queues.is_empty());
        assert!(q.deadlines.is_empty());
    }

    #[test]
    fn many_keys_leave_no_queues_behind() {
        let mut q = WaitQueues::new();
        let mut timed_out = Vec::new();
        for i in 0..1_000 {
            let k = key(&format!("k{i}"));
            let id = q.push(k.clone(), 1, None, AcquireOptions::default(), "w");
            match i % 3 {
                0 => assert!(q.cancel(id).is_some()),
                1 => assert!(q.pop_next(&k, 0, &mut timed_out).is_some()),
                _ => {
                    q.push(k.clone(), 1, Some(5), AcquireOptions::default(), "t");
                    q.cancel(id);
                    q.take_timed_out(5, &mut timed_out);
                }
            }
        }
        assert!(q.is_empty());
        assert!(q.queues.is_empty());
        assert_eq!(timed_out.len(), 333);
    }

    #[test]
    fn take_timed_out_goes_by_deadline_then_arrival() {
        let mut q = WaitQueues::new();
        let a = q.push(key("a"), 1, Some(30), AcquireOptions::default(), "a");
        let b = q.push(key("b"), 1, Some(10), AcquireOptions::default(), "b");
        let c = q.push(key("a"), 1, Some(30), AcquireOptions::default(), "c");
        let forever = q.push(key("a"), 1, None, AcquireOptions::default(), "forever");
        let later = q.push(key("b"), 1, Some(31), AcquireOptions::default(), "later");
        assert_eq!(q.next_deadline(), Some(10));
        let mut out = Vec::new();
        q.take_timed_out(9, &mut out);
        assert!(out.is_empty());
        q.take_timed_out(30, &mut out);
        assert_eq!(ids(&out), vec![b, a, c]);
        assert_eq!(q.next_deadline(), Some(31));
        assert_eq!(q.len(), 2);
        let mut timed_out = Vec::new();
        assert_eq!(
            q.pop_next(&key("a"), 30, &mut timed_out).map(|w| w.id),
            Some(forever)
        );
        assert!(timed_out.is_empty());
        q.take_timed_out(u64::MAX, &mut out);
        assert_eq!(out.last().map(|w| w.id), Some(later));
        assert!(q.is_empty());
    }

    #[test]
    fn drain_all_empties_everything_oldest_first() {
        let mut q = WaitQueues::new();
        let a = q.push(key("a"), 1, Some(3), AcquireOptions::default(), "a");
        let b = q.push(key("b"), 1, None, AcquireOptions::default(), "b");
        let c = q.push(key("a"), 1, None, AcquireOptions::default(), "c");
        q.cancel(b);
        assert_eq!(ids(&q.drain_all()), vec![a, c]);
        assert!(q.is_empty());
        assert_eq!(q.next_deadline(), None);
        assert!(!q.has_waiters(&key("a")));
        let d = q.push(key("a"), 1, None, AcquireOptions::default(), "d");
        assert!(d > c);
    }

    #[test]
    fn validate_finds_queues_out_of_step() {
        let mut q = WaitQueues::new();
        let a = q.push(key("a"), 1, Some(5), AcquireOptions::default(), "a");
        q.push(key("a"), 1, None, AcquireOptions::default(), "b");
        assert_eq!(q.validate(), Ok(()));
        let mut miscounted = WaitQueues::new();
        miscounted.push(key("a"), 1, None, AcquireOptions::default(), "a");
        if let Some(queue) = miscounted.queues.get_mut(&key("a")) {
            queue.live = 2;
        }
        assert!(miscounted.validate().is_err());
        q.deadlines.remove(&(5, a));
        assert!(q.validate().is_err());
    }
}
