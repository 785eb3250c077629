//! The watches of the node that serves clients: `W` requests waiting for
//! a key's state tag to differ from the one their client last saw, or for
//! their wait to run out, whichever comes first. Pure: the user tells the
//! registry which keys changed and what time it is, and answers the
//! watches it hands back.
//!
//! Not replicated, like the wait queues: a watch is a live connection on
//! one node, and a node that stops serving answers its watches instead
//! of handing them on.

use std::collections::{BTreeSet, VecDeque};

use crate::invariant::{ensure, Broken};
use crate::state_tag::StateTag;
use crate::{FastMap, Key, Millis};

/// Names a pending watch; unique and increasing for one [`Watches`].
pub type WatchId = u64;

/// A pending watch. `handle` is whatever the user needs to answer it.
#[derive(Debug)]
pub struct Watch<H> {
    pub id: WatchId,
    pub key: Key,
    /// The tag the client last saw: answered once the key's differs.
    pub seen: StateTag,
    /// When the wait runs out: answered then with the unchanged state.
    pub deadline: Millis,
    pub handle: H,
}

/// Past the node's cap on pending watches (`--max-watches`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("too many watches")]
pub struct TooManyWatches;

/// Every pending watch of the node, by key in arrival order.
#[derive(Debug)]
pub struct Watches<H> {
    watches: FastMap<WatchId, Watch<H>>,
    by_key: FastMap<Key, VecDeque<WatchId>>,
    deadlines: BTreeSet<(Millis, WatchId)>,
    next_id: WatchId,
    max: usize,
}

impl<H> Default for Watches<H> {
    fn default() -> Self {
        Watches {
            watches: FastMap::default(),
            by_key: FastMap::default(),
            deadlines: BTreeSet::new(),
            next_id: 1,
            max: crate::Quota::DEFAULT_MAX_WATCHES,
        }
    }
}

impl<H> Watches<H> {
    pub fn new() -> Self {
        Self::default()
    }

    /// The cap on pending watches from now on; those pending stay.
    pub fn set_max(&mut self, max: usize) {
        self.max = max;
    }

    /// A watch of `key` until its tag differs from `seen` or `deadline`.
    /// The caller has checked the tag is still `seen`.
    pub fn register(
        &mut self,
        key: Key,
        seen: StateTag,
        deadline: Millis,
        handle: H,
    ) -> Result<WatchId, TooManyWatches> {
        if self.watches.len() >= self.max {
            return Err(TooManyWatches);
        }
        let id = self.next_id;
        self.next_id += 1;
        self.by_key.entry(key.clone()).or_default().push_back(id);
        self.deadlines.insert((deadline, id));
        let watch = Watch {
            id,
            key,
            seen,
            deadline,
            handle,
        };
        self.watches.insert(id, watch);
        Ok(id)
    }

    /// Every key with pending watches, in no particular order.
    pub fn watched_keys(&self) -> Vec<Key> {
        self.by_key.keys().cloned().collect()
    }

    /// Whether `key` has pending watches.
    pub fn is_watched(&self, key: &Key) -> bool {
        self.by_key.contains_key(key)
    }

    /// The watches of `key` whose client saw another tag than `tag`, taken
    /// out oldest first, to be answered with the key's state.
    pub fn changed(&mut self, key: &Key, tag: StateTag) -> Vec<Watch<H>> {
        let Some(ids) = self.by_key.get_mut(key) else {
            return Vec::new();
        };
        let mut answered = Vec::new();
        ids.retain(|id| match self.watches.get(id) {
            Some(watch) if watch.seen != tag => {
                answered.push(*id);
                false
            }
            Some(_) => true,
            None => false,
        });
        if ids.is_empty() {
            self.by_key.remove(key);
        }
        answered
            .into_iter()
            .filter_map(|id| self.take(id))
            .collect()
    }

    /// The watches whose wait ran out by `now`, taken out, soonest first
    /// (ties in arrival order), to be answered with their key's state.
    pub fn due(&mut self, now: Millis) -> Vec<Watch<H>> {
        let mut due = Vec::new();
        while let Some(&(at, id)) = self.deadlines.first() {
            if at > now {
                break;
            }
            due.extend(self.cancel(id));
        }
        due
    }

    /// A watch leaves (its connection closed, or it is answered): itself
    /// if it was pending.
    pub fn cancel(&mut self, id: WatchId) -> Option<Watch<H>> {
        let watch = self.take(id)?;
        if let Some(ids) = self.by_key.get_mut(&watch.key) {
            ids.retain(|other| *other != id);
            if ids.is_empty() {
                self.by_key.remove(&watch.key);
            }
        }
        Some(watch)
    }

    /// Out of the map and the deadlines, its key's list left to the caller.
    fn take(&mut self, id: WatchId) -> Option<Watch<H>> {
        let watch = self.watches.remove(&id)?;
        self.deadlines.remove(&(watch.deadline, id));
        Some(watch)
    }

    /// When the next wait runs out.
    pub fn next_deadline(&self) -> Option<Millis> {
        self.deadlines.first().map(|&(at, _)| at)
    }

    /// Every pending watch, taken out oldest first (a node that stops
    /// serving redirects them all).
    pub fn drain(&mut self) -> Vec<Watch<H>> {
        self.by_key.clear();
        self.deadlines.clear();
        let mut all: Vec<Watch<H>> = self.watches.drain().map(|(_, w)| w).collect();
        all.sort_unstable_by_key(|w| w.id);
        all
    }

    pub fn len(&self) -> usize {
        self.watches.len()
    }

    pub fn is_empty(&self) -> bool {
        self.watches.is_empty()
    }

    /// Checks that the map, the lists by key and the deadlines name the
    /// same watches, and no list is empty.
    pub fn validate(&self) -> Result<(), Broken> {
        let listed: usize = self.by_key.values().map(VecDeque::len).sum();
        ensure(listed == self.watches.len(), || {
            format!("{} watches, {listed} listed by key", self.watches.len())
        })?;
        ensure(self.deadlines.len() == self.watches.len(), || {
            format!(
                "{} watches, {} deadlines",
                self.watches.len(),
                self.deadlines.len()
            )
        })?;
        for (key, ids) in &self.by_key {
            ensure(!ids.is_empty(), || format!("{key:?} lists no watch"))?;
            for id in ids {
                let watch = self.watches.get(id);
                ensure(watch.is_some_and(|w| w.key == *key), || {
                    format!("watch {id} listed under {key:?}")
                })?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test
mod tests {
    use super::*;

    fn key(s: &str) -> Key {
        Key::try_from(s).unwrap()
    }

    #[test]
    fn a_change_answers_the_watches_that_saw_another_tag_oldest_first() {
        let mut w = Watches::new();
        let a = w.register(key("k"), StateTag::Free, 100, "a").unwrap();
        let b = w.register(key("k"), StateTag::Plain(3), 50, "b").unwrap();
        let c = w.register(key("k"), StateTag::Free, 70, "c").unwrap();
        w.register(key("other"), StateTag::Free, 10, "d").unwrap();
        let answered: Vec<_> = w
            .changed(&key("k"), StateTag::Plain(3))
            .iter()
            .map(|x| x.id)
            .collect();
        assert_eq!(answered, vec![a, c]);
        assert_eq!(w.len(), 2);
        assert!(w.changed(&key("k"), StateTag::Plain(3)).is_empty());
        assert_eq!(w.changed(&key("k"), StateTag::Free)[0].id, b);
        assert!(!w.is_watched(&key("k")));
        assert_eq!(w.validate(), Ok(()));
    }

    #[test]
    fn waits_run_out_soonest_first_and_the_cap_holds() {
        let mut w = Watches::new();
        w.set_max(2);
        let late = w.register(key("a"), StateTag::Free, 20, ()).unwrap();
        let soon = w.register(key("b"), StateTag::Free, 10, ()).unwrap();
        assert_eq!(
            w.register(key("c"), StateTag::Free, 5, ()),
            Err(TooManyWatches)
        );
        assert_eq!(w.next_deadline(), Some(10));
        assert!(w.due(9).is_empty());
        let due: Vec<_> = w.due(20).iter().map(|x| x.id).collect();
        assert_eq!(due, vec![soon, late]);
        assert!(w.is_empty());
        assert_eq!(w.validate(), Ok(()));
    }

    #[test]
    fn a_cancelled_watch_is_gone_and_drain_takes_the_rest() {
        let mut w = Watches::new();
        let a = w.register(key("a"), StateTag::Free, 20, ()).unwrap();
        let b = w.register(key("a"), StateTag::Free, 20, ()).unwrap();
        assert!(w.cancel(a).is_some());
        assert!(w.cancel(a).is_none());
        assert_eq!(w.validate(), Ok(()));
        let drained: Vec<_> = w.drain().iter().map(|x| x.id).collect();
        assert_eq!(drained, vec![b]);
        assert_eq!(w.next_deadline(), None);
    }
}
