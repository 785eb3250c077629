//! When each tracked grant's lease ends, so that a grant that ends by
//! expiry counts in the hold-time histogram too, at its lease's end (the
//! node says only how many expired, not which). Kept beside [`Timing`]
//! under the node's mutex: a map of lease ends and a min-heap of them,
//! whose stale entries (renewed, released, granted again) are skipped when
//! they come up. Bounded like the timing maps: past [`MAX_TRACKED`] it is
//! emptied (those grants' hold times are lost, nothing else).
//!
//! [`Timing`]: crate::timing::Timing

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use baton_core::{FastMap, Key, Millis};

use crate::timing::MAX_TRACKED;

#[derive(Debug, Default)]
pub(crate) struct LeaseEnds {
    ends: FastMap<Key, Millis>,
    due: BinaryHeap<Reverse<(Millis, Key)>>,
}

impl LeaseEnds {
    /// `key`'s lease now ends at `end` (a grant, or a renewal of a tracked one).
    pub(crate) fn set(&mut self, key: &Key, end: Millis) {
        if self.ends.len() >= MAX_TRACKED || self.due.len() >= 2 * MAX_TRACKED {
            self.ends.clear();
            self.due.clear();
        }
        self.ends.insert(key.clone(), end);
        self.due.push(Reverse((end, key.clone())));
        debug_assert!(self.due.len() >= self.ends.len());
    }

    /// A renewal: only a grant tracked here gets a new end.
    pub(crate) fn renew(&mut self, key: &Key, end: Millis) {
        if self.ends.contains_key(key) {
            self.set(key, end);
        }
    }

    /// The grant of `key` ended otherwise (a release).
    pub(crate) fn forget(&mut self, key: &Key) {
        self.ends.remove(key);
    }

    /// The end of `key`'s lease if it has passed at `now`, forgotten.
    pub(crate) fn take_if_ended(&mut self, key: &Key, now: Millis) -> Option<Millis> {
        let end = *self.ends.get(key)?;
        (end <= now).then(|| {
            self.ends.remove(key);
            end
        })
    }

    /// Every tracked grant whose lease ended by `now`, with its end.
    pub(crate) fn take_ended(&mut self, now: Millis) -> Vec<(Key, Millis)> {
        let mut ended = Vec::new();
        while let Some(Reverse((end, _))) = self.due.peek() {
            if *end > now {
                break;
            }
            let Some(Reverse((end, key))) = self.due.pop() else {
                break;
            };
            // Stale unless it is still the key's current end.
            if self.ends.get(&key) == Some(&end) {
                self.ends.remove(&key);
                ended.push((key, end));
            }
        }
        ended
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::key;

    #[test]
    fn only_current_ends_come_out_once_passed() {
        let mut leases = LeaseEnds::default();
        leases.set(&key("a"), 100);
        leases.set(&key("b"), 150);
        leases.set(&key("c"), 120);
        leases.renew(&key("a"), 300);
        leases.renew(&key("untracked"), 50);
        leases.forget(&key("c"));
        assert_eq!(leases.take_ended(99), vec![]);
        assert_eq!(leases.take_ended(200), vec![(key("b"), 150)]);
        assert_eq!(leases.take_if_ended(&key("a"), 299), None);
        assert_eq!(leases.take_if_ended(&key("a"), 300), Some(300));
        assert_eq!(leases.take_ended(1_000), vec![]);
    }
}
