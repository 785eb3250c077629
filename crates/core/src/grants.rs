//! The storage of the lock table's grants, compact: a slab of slots (key,
//! holder, place in the lease heap), a hash index of slot numbers by key,
//! and a binary heap of slot numbers by lease end.
//!
//! Why not a map plus an ordered index: a `HashMap<Key, Holder>` and a
//! `BTreeMap<(end, token), Key>` took 181 resident bytes per held lock at
//! a million locks (the map at half load after its last doubling, the
//! B-tree's half-full nodes of appended leases, and a second key handle).
//! Here a lock costs one 40-byte slot, an index bucket or two (8 bytes of
//! entry and a control byte each; at a million locks, 2.1 buckets a lock),
//! 4 bytes of heap, and the key itself (`table_bytes` example: 109 bytes
//! a lock at a million).
//!
//! Every operation is O(1) but for the heap's O(log n); the heap is only
//! ever read in order lazily ([`Grants::by_lease_end`]), or sorted whole
//! for a snapshot.
//!
//! Each index entry carries 32 bits of its key's hash beside the slot
//! number. When the index grows it rehashes every entry at once, and
//! without the stored bits each entry meant reading its slot and its key,
//! two cache misses: the grant that took the table past 917,504 locks took
//! 178 ms (`table_bytes` example), and on a core shared with two standbys
//! doing the same, a priority active stopped for more than its failure
//! timeout and stepped down. With them it takes a few milliseconds; a
//! lookup also compares the stored bits before it reads a key. The cost:
//! 4 bytes more per index bucket.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::hash::BuildHasher;

use hashbrown::HashTable;

use crate::table::Holder;
use crate::{Key, Millis, Token};

/// One held key.
#[derive(Debug, Clone)]
struct Slot {
    key: Key,
    holder: Holder,
    /// Where this slot's number is in `heap`.
    heap_at: u32,
}

impl Slot {
    fn order(&self) -> (Millis, Token) {
        (self.holder.expires_at, self.holder.token)
    }
}

/// An index entry: a slot number and the high half of its key's hash.
#[derive(Debug, Clone, Copy)]
struct Entry {
    slot: u32,
    hash: u32,
}

impl Entry {
    /// The hash the index places this entry by, from the stored half:
    /// a multiply by an odd constant spreads those bits over the whole
    /// word (the index takes its bucket from the low bits and its tag
    /// from the top ones).
    fn placed_by(hash: u32) -> u64 {
        u64::from(hash).wrapping_mul(0x9E37_79B9_7F4A_7C15)
    }
}

/// The grants of a lock table.
#[derive(Debug, Clone, Default)]
pub struct Grants {
    slots: Vec<Option<Slot>>,
    /// Empty slots, reused first.
    free: Vec<u32>,
    /// Slot numbers, found by their key's hash.
    index: HashTable<Entry>,
    /// Slot numbers, a min-heap by (lease end, token).
    heap: Vec<u32>,
    /// Seeded per process: keys come from clients (no hash flooding);
    /// nothing iterates in hash order, so runs stay deterministic.
    hasher: foldhash::fast::RandomState,
}

impl Grants {
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// The stored half of `key`'s hash.
    fn hash(&self, key: &Key) -> u32 {
        (self.hasher.hash_one(key.as_bytes()) >> 32) as u32
    }

    fn slot(&self, n: u32) -> &Slot {
        match self.slots.get(n as usize) {
            Some(Some(slot)) => slot,
            // The index and the heap only name filled slots.
            _ => unreachable!("slot {n} is empty"),
        }
    }

    fn slot_mut(&mut self, n: u32) -> &mut Slot {
        match self.slots.get_mut(n as usize) {
            Some(Some(slot)) => slot,
            _ => unreachable!("slot {n} is empty"),
        }
    }

    fn find(&self, key: &Key) -> Option<u32> {
        let hash = self.hash(key);
        self.index
            .find(Entry::placed_by(hash), |e| {
                e.hash == hash && self.slot(e.slot).key == *key
            })
            .map(|e| e.slot)
    }

    pub fn get(&self, key: &Key) -> Option<&Holder> {
        self.find(key).map(|n| &self.slot(n).holder)
    }

    pub fn contains(&self, key: &Key) -> bool {
        self.find(key).is_some()
    }

    /// Holds `key` (which must not be held) with `holder`.
    pub fn insert(&mut self, key: Key, holder: Holder) {
        debug_assert!(!self.contains(&key));
        let hash = self.hash(&key);
        let heap_at = self.heap.len() as u32;
        let slot = Slot {
            key,
            holder,
            heap_at,
        };
        let n = match self.free.pop() {
            Some(n) => {
                self.slots[n as usize] = Some(slot);
                n
            }
            None => {
                self.slots.push(Some(slot));
                (self.slots.len() - 1) as u32
            }
        };
        let entry = Entry { slot: n, hash };
        self.index
            .insert_unique(Entry::placed_by(hash), entry, |e| Entry::placed_by(e.hash));
        self.heap.push(n);
        self.sift_up(heap_at);
    }

    /// Lets `key` go if `token` holds it (any token when `None`); its
    /// holder, if it was let go. One lookup: releases and expiries are
    /// the hot path.
    pub fn remove_if(&mut self, key: &Key, token: Option<Token>) -> Option<Holder> {
        let hash = self.hash(key);
        let slots = &self.slots;
        let entry = self
            .index
            .find_entry(Entry::placed_by(hash), |e| {
                e.hash == hash && matches!(&slots[e.slot as usize], Some(s) if s.key == *key)
            })
            .ok()?;
        let n = entry.get().slot;
        let held_by = self.slots[n as usize].as_ref()?.holder.token;
        if token.is_some_and(|t| t != held_by) {
            return None;
        }
        entry.remove();
        let slot = self.slots[n as usize].take()?;
        self.free.push(n);
        self.heap_remove(slot.heap_at);
        Some(slot.holder)
    }

    /// Lets `key` go; its holder, if it was held.
    pub fn remove(&mut self, key: &Key) -> Option<Holder> {
        self.remove_if(key, None)
    }

    /// Moves the lease end of `key` to `expires_at` if `token` holds it;
    /// whether it did.
    pub fn set_lease_end(&mut self, key: &Key, token: Token, expires_at: Millis) -> bool {
        let Some(n) = self.find(key) else {
            return false;
        };
        let slot = self.slot_mut(n);
        if slot.holder.token != token {
            return false;
        }
        let earlier = expires_at < slot.holder.expires_at;
        slot.holder.expires_at = expires_at;
        let at = slot.heap_at;
        if earlier {
            self.sift_up(at);
        } else {
            self.sift_down(at);
        }
        true
    }

    /// Every grant, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&Key, &Holder)> {
        self.slots
            .iter()
            .flatten()
            .map(|slot| (&slot.key, &slot.holder))
    }

    /// The grant whose lease ends first (ties: the lowest token).
    pub fn first(&self) -> Option<(&Key, &Holder)> {
        let slot = self.slot(*self.heap.first()?);
        Some((&slot.key, &slot.holder))
    }

    /// Every grant by lease end (ties by token), produced lazily: taking
    /// `k` of them costs O(k log k), whatever the number held.
    pub fn by_lease_end(&self) -> impl Iterator<Item = (&Key, &Holder)> + '_ {
        let mut frontier = BinaryHeap::new();
        if let Some(&n) = self.heap.first() {
            frontier.push(Reverse((self.slot(n).order(), 0usize)));
        }
        std::iter::from_fn(move || {
            let Reverse((_, at)) = frontier.pop()?;
            for child in [2 * at + 1, 2 * at + 2] {
                if let Some(&n) = self.heap.get(child) {
                    frontier.push(Reverse((self.slot(n).order(), child)));
                }
            }
            let slot = self.slot(self.heap[at]);
            Some((&slot.key, &slot.holder))
        })
    }

    /// Every grant sorted by lease end (ties by token): for a snapshot.
    pub fn sorted_by_lease_end(&self) -> Vec<(&Key, &Holder)> {
        let mut all: Vec<(&Key, &Holder)> = self.iter().collect();
        all.sort_unstable_by_key(|(_, h)| (h.expires_at, h.token));
        all
    }

    fn order_at(&self, at: u32) -> (Millis, Token) {
        self.slot(self.heap[at as usize]).order()
    }

    fn swap(&mut self, a: u32, b: u32) {
        self.heap.swap(a as usize, b as usize);
        let (na, nb) = (self.heap[a as usize], self.heap[b as usize]);
        self.slot_mut(na).heap_at = a;
        self.slot_mut(nb).heap_at = b;
    }

    fn sift_up(&mut self, mut at: u32) {
        while at > 0 {
            let parent = (at - 1) / 2;
            if self.order_at(at) >= self.order_at(parent) {
                return;
            }
            self.swap(at, parent);
            at = parent;
        }
    }

    fn sift_down(&mut self, mut at: u32) {
        let len = self.heap.len() as u32;
        loop {
            let mut least = at;
            for child in [2 * at + 1, 2 * at + 2] {
                if child < len && self.order_at(child) < self.order_at(least) {
                    least = child;
                }
            }
            if least == at {
                return;
            }
            self.swap(at, least);
            at = least;
        }
    }

    /// Takes the entry at heap place `at` out (its slot is already empty).
    fn heap_remove(&mut self, at: u32) {
        let last = (self.heap.len() - 1) as u32;
        self.heap.swap_remove(at as usize);
        if at == last {
            return;
        }
        let moved = self.heap[at as usize];
        self.slot_mut(moved).heap_at = at;
        self.sift_up(at);
        let at = self.slot(moved).heap_at;
        self.sift_down(at);
    }

    /// Checks that the index, the heap and the slots agree; a description
    /// of the first disagreement otherwise.
    pub fn check(&self) -> Result<(), String> {
        let filled = self.slots.iter().flatten().count();
        if filled != self.heap.len() || filled != self.index.len() {
            return Err(format!(
                "{filled} slots filled, {} in the heap, {} indexed",
                self.heap.len(),
                self.index.len()
            ));
        }
        for (at, &n) in self.heap.iter().enumerate() {
            let slot = self.slot(n);
            if slot.heap_at as usize != at {
                return Err(format!("slot {n} at heap place {at} says {}", slot.heap_at));
            }
            if at > 0 && self.order_at(((at - 1) / 2) as u32) > slot.order() {
                return Err(format!("heap order broken at place {at}"));
            }
            if self.find(&slot.key) != Some(n) {
                return Err(format!("{:?} is not indexed to its slot", slot.key));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
impl Grants {
    /// Forgets the heap's last entry behind the index's back.
    pub fn drop_last_from_heap(&mut self) {
        self.heap.pop();
    }

    /// Moves `key`'s lease end without telling the heap.
    pub fn move_lease_end_behind_the_heap(&mut self, key: &Key, by: Millis) {
        if let Some(n) = self.find(key) {
            self.slot_mut(n).holder.expires_at += by;
        }
    }
}

#[cfg(test)]
#[path = "grants_tests.rs"]
mod tests;
