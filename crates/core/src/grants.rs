//! The storage of the lock table's grants, compact: a slab of slots (key,
//! its grants, place in the lease heap), a hash index of slot numbers by
//! key, and a binary heap of slot numbers by each key's earliest lease end.
//!
//! A key's grants share its permits and mode (shared and exclusive grants
//! never hold a key together). A key of one grant keeps it inline; several
//! grants live in a vector sorted by token, so that a lone lock costs what
//! it did before semaphores.
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

use crate::lock_mode::LockMode;
use crate::table::Holder;
use crate::{Key, Millis, Token};

/// The grants of one key, in token order.
#[derive(Debug, Clone)]
enum Holders {
    One(Holder),
    Many(Vec<Holder>),
}

/// What holds one key: its grants, how many it may have, in which mode.
#[derive(Debug, Clone)]
pub struct KeyGrants {
    permits: u32,
    mode: LockMode,
    holders: Holders,
}

impl KeyGrants {
    /// How many grants the key may have at once (1 for a shared key).
    pub fn permits(&self) -> u32 {
        self.permits
    }

    pub fn mode(&self) -> LockMode {
        self.mode
    }

    /// Every grant, oldest (lowest token) first; never empty.
    pub fn holders(&self) -> &[Holder] {
        match &self.holders {
            Holders::One(holder) => std::slice::from_ref(holder),
            Holders::Many(holders) => holders,
        }
    }

    pub fn len(&self) -> usize {
        self.holders().len()
    }

    /// Always false: a key in the table has a grant.
    pub fn is_empty(&self) -> bool {
        self.holders().is_empty()
    }

    /// The grant with `token`, if it holds the key.
    pub fn holder(&self, token: Token) -> Option<&Holder> {
        let holders = self.holders();
        holders
            .binary_search_by_key(&token, |h| h.token)
            .ok()
            .map(|i| &holders[i])
    }

    /// The grant whose lease ends first (ties: the lowest token).
    fn earliest(&self) -> &Holder {
        let holders = self.holders();
        let first = &holders[0];
        holders
            .iter()
            .fold(first, |a, b| if order(b) < order(a) { b } else { a })
    }

    fn add(&mut self, holder: Holder) {
        match &mut self.holders {
            Holders::One(only) => {
                let mut both = vec![*only, holder];
                both.sort_unstable_by_key(|h| h.token);
                self.holders = Holders::Many(both);
            }
            Holders::Many(holders) => {
                let at = holders.partition_point(|h| h.token < holder.token);
                holders.insert(at, holder);
            }
        }
    }

    /// Takes the grant with `token` out of a key of several grants.
    fn take(&mut self, token: Token) -> Option<Holder> {
        let Holders::Many(holders) = &mut self.holders else {
            return None;
        };
        let at = holders.binary_search_by_key(&token, |h| h.token).ok()?;
        let holder = holders.remove(at);
        if let [only] = holders[..] {
            self.holders = Holders::One(only);
        }
        Some(holder)
    }

    fn holder_mut(&mut self, token: Token) -> Option<&mut Holder> {
        match &mut self.holders {
            Holders::One(holder) => (holder.token == token).then_some(holder),
            Holders::Many(holders) => {
                let at = holders.binary_search_by_key(&token, |h| h.token).ok()?;
                holders.get_mut(at)
            }
        }
    }
}

fn order(holder: &Holder) -> (Millis, Token) {
    (holder.expires_at, holder.token)
}

/// One held key.
#[derive(Debug, Clone)]
struct Slot {
    key: Key,
    grants: KeyGrants,
    /// Where this slot's number is in `heap`.
    heap_at: u32,
}

impl Slot {
    /// The key's place in the heap: its earliest lease end.
    fn order(&self) -> (Millis, Token) {
        order(self.grants.earliest())
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
    /// Slot numbers, a min-heap by their key's earliest (lease end, token).
    heap: Vec<u32>,
    /// Grants held, over every key.
    count: usize,
    /// Seeded per process: keys come from clients (no hash flooding);
    /// nothing iterates in hash order, so runs stay deterministic.
    hasher: foldhash::fast::RandomState,
}

impl Grants {
    /// Grants held, over every key.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Slots, filled or empty: what a walk of the storage visits.
    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    /// Keys held.
    pub fn key_count(&self) -> usize {
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

    pub fn get(&self, key: &Key) -> Option<&KeyGrants> {
        self.find(key).map(|n| &self.slot(n).grants)
    }

    /// Adds a grant of `key`. A key not held takes `permits` and `mode`;
    /// a held key keeps its own (the caller checked they agree).
    pub fn insert(&mut self, key: Key, permits: u32, mode: LockMode, holder: Holder) {
        self.count += 1;
        if let Some(n) = self.find(&key) {
            let slot = self.slot_mut(n);
            debug_assert!(slot.grants.holder(holder.token).is_none());
            slot.grants.add(holder);
            let at = slot.heap_at;
            return self.sift_up(at);
        }
        let hash = self.hash(&key);
        let heap_at = self.heap.len() as u32;
        let slot = Slot {
            key,
            grants: KeyGrants {
                permits,
                mode,
                holders: Holders::One(holder),
            },
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

    /// Ends the grant of `key` with `token`; the grant, if it held the key.
    pub fn remove(&mut self, key: &Key, token: Token) -> Option<Holder> {
        let n = self.find(key)?;
        let slot = self.slot_mut(n);
        if let Some(holder) = slot.grants.take(token) {
            let at = slot.heap_at;
            self.count -= 1;
            self.resift(at);
            return Some(holder);
        }
        match slot.grants.holders {
            Holders::One(holder) if holder.token == token => {}
            _ => return None,
        }
        let hash = self.hash(key);
        if let Ok(entry) = self
            .index
            .find_entry(Entry::placed_by(hash), |e| e.slot == n)
        {
            entry.remove();
        }
        let slot = self.slots[n as usize].take()?;
        self.free.push(n);
        self.count -= 1;
        self.heap_remove(slot.heap_at);
        Some(*slot.grants.earliest())
    }

    /// Moves the lease end of `key`'s grant with `token` to `expires_at`;
    /// whether it did.
    pub fn set_lease_end(&mut self, key: &Key, token: Token, expires_at: Millis) -> bool {
        let Some(n) = self.find(key) else {
            return false;
        };
        let slot = self.slot_mut(n);
        let Some(holder) = slot.grants.holder_mut(token) else {
            return false;
        };
        holder.expires_at = expires_at;
        let at = slot.heap_at;
        self.resift(at);
        true
    }

    /// Puts the entry at heap place `at` where its order now says.
    fn resift(&mut self, at: u32) {
        let n = self.heap[at as usize];
        self.sift_up(at);
        let at = self.slot(n).heap_at;
        self.sift_down(at);
    }

    /// Every held key, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&Key, &KeyGrants)> {
        self.slots
            .iter()
            .flatten()
            .map(|slot| (&slot.key, &slot.grants))
    }

    /// The grant whose lease ends first (ties: the lowest token).
    pub fn first(&self) -> Option<(&Key, &Holder)> {
        let slot = self.slot(*self.heap.first()?);
        Some((&slot.key, slot.grants.earliest()))
    }

    /// Every key's earliest grant by lease end (ties by token), produced
    /// lazily: taking `k` of them costs O(k log k), whatever the number
    /// held (what [`Grants::every_by_lease_end`] walks, checked alone).
    #[cfg(test)]
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
            Some((&slot.key, slot.grants.earliest()))
        })
    }

    /// Every grant by lease end (ties by token), lazily as
    /// [`Grants::by_lease_end`]: a key's later grants join the frontier
    /// when its earliest is reached.
    pub fn every_by_lease_end(&self) -> impl Iterator<Item = (&Key, Holder)> + '_ {
        let mut frontier: BinaryHeap<Reverse<Next<'_>>> = BinaryHeap::new();
        if let Some(&n) = self.heap.first() {
            frontier.push(Reverse(Next::key_at(self, 0, n)));
        }
        std::iter::from_fn(move || {
            let Reverse(next) = frontier.pop()?;
            let Place::Heap(at) = next.place else {
                return Some((next.key, next.holder));
            };
            for child in [2 * at + 1, 2 * at + 2] {
                if let Some(&n) = self.heap.get(child) {
                    frontier.push(Reverse(Next::key_at(self, child, n)));
                }
            }
            let others = self.slot(self.heap[at]).grants.holders().iter();
            for holder in others.filter(|h| h.token != next.holder.token) {
                frontier.push(Reverse(Next {
                    order: order(holder),
                    key: next.key,
                    holder: *holder,
                    place: Place::Grant,
                }));
            }
            Some((next.key, next.holder))
        })
    }

    /// Every grant sorted by lease end (ties by token), with its key's
    /// grants: for a snapshot.
    pub fn sorted_by_lease_end(&self) -> Vec<(&Key, &KeyGrants, &Holder)> {
        let mut all: Vec<_> = self
            .iter()
            .flat_map(|(key, grants)| grants.holders().iter().map(move |h| (key, grants, h)))
            .collect();
        all.sort_unstable_by_key(|(_, _, h)| order(h));
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
        let grants: usize = self.iter().map(|(_, g)| g.len()).sum();
        if grants != self.count {
            return Err(format!("{grants} grants held, {} counted", self.count));
        }
        for (key, grants) in self.iter() {
            let sorted = grants.holders().windows(2).all(|w| w[0].token < w[1].token);
            if !sorted || matches!(&grants.holders, Holders::Many(h) if h.len() < 2) {
                return Err(format!("{key:?}'s grants are out of order or shape"));
            }
        }
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

/// Where an entry of [`Grants::every_by_lease_end`]'s frontier came from.
#[derive(Debug, Clone, Copy)]
enum Place {
    /// A key's earliest grant, at this place of the heap.
    Heap(usize),
    /// One of a key's later grants.
    Grant,
}

/// An entry of [`Grants::every_by_lease_end`]'s frontier, ordered by its
/// grant's (lease end, token) alone: tokens are unique.
#[derive(Debug, Clone, Copy)]
struct Next<'a> {
    order: (Millis, Token),
    key: &'a Key,
    holder: Holder,
    place: Place,
}

impl<'a> Next<'a> {
    fn key_at(grants: &'a Grants, at: usize, n: u32) -> Next<'a> {
        let slot = grants.slot(n);
        let holder = *slot.grants.earliest();
        Next {
            order: order(&holder),
            key: &slot.key,
            holder,
            place: Place::Heap(at),
        }
    }
}

impl PartialEq for Next<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.order == other.order
    }
}

impl Eq for Next<'_> {}

impl PartialOrd for Next<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Next<'_> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.order.cmp(&other.order)
    }
}

#[cfg(test)]
impl Grants {
    /// Forgets the heap's last entry behind the index's back.
    pub fn drop_last_from_heap(&mut self) {
        self.heap.pop();
    }

    /// Moves `key`'s earliest lease end without telling the heap.
    pub fn move_lease_end_behind_the_heap(&mut self, key: &Key, by: Millis) {
        if let Some(n) = self.find(key) {
            let grants = &mut self.slot_mut(n).grants;
            let token = grants.earliest().token;
            if let Some(holder) = grants.holder_mut(token) {
                holder.expires_at += by;
            }
        }
    }
}

#[cfg(test)]
#[path = "grants_tests.rs"]
mod tests;
