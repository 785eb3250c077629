//! The watches (`W`) of a node that serves clients: the core's registry
//! with each watch's connection as its handle, and the answers it sends.
//! Every mode's serving node keeps one and calls it after each input:
//! [`NodeWatches::after_changes`] with the keys whose holders or values
//! changed, [`NodeWatches::tick`] when a wait runs out.

use baton_core::{Key, KeyState, Millis, StateTag, Watch, WatchId, Watches};
use baton_proto::{Op, Response};

use crate::delivery::Mailbox;
use crate::node::{Events, NodeEvent};
use crate::request::Answer;

/// Why a watch past the node's cap is refused (`E W <key> ...`).
pub const TOO_MANY_WATCHES: &str = "too many watches";

/// A node's pending watches.
#[derive(Debug, Default)]
pub struct NodeWatches {
    watches: Watches<Mailbox>,
}

impl NodeWatches {
    /// The cap on pending watches (`--max-watches`).
    pub fn set_max(&mut self, max: usize) {
        self.watches.set_max(max);
    }

    /// A `W` of `key`, whose state is `state` now: answered at once if the
    /// client saw another tag, else pending until a change or `now +
    /// wait_ms`.
    pub fn watch(
        &mut self,
        key: &Key,
        wait_ms: u64,
        seen: StateTag,
        state: KeyState,
        now: Millis,
        reply_to: &Mailbox,
    ) -> Answer {
        if state.tag() != seen {
            return Answer::Watched(state);
        }
        let deadline = now.saturating_add(wait_ms);
        match self
            .watches
            .register(key.clone(), seen, deadline, reply_to.clone())
        {
            Ok(id) => Answer::Watching(id),
            Err(_) => Answer::Refused(TOO_MANY_WATCHES.to_owned()),
        }
    }

    /// Answers the watches of the `changed` keys (`None`: of every key)
    /// whose client saw another tag than the key's now (`state` gives it).
    pub fn after_changes(
        &mut self,
        changed: Option<Vec<Key>>,
        state: impl Fn(&Key) -> KeyState,
        events: &mut Events,
    ) {
        if self.watches.is_empty() {
            return;
        }
        let mut changed = changed.unwrap_or_else(|| self.watches.watched_keys());
        changed.sort_unstable();
        changed.dedup();
        for key in changed {
            if !self.watches.is_watched(&key) {
                continue;
            }
            let now = state(&key);
            for watch in self.watches.changed(&key, now.tag()) {
                events.push(answered(watch.id, watch.handle, key.clone(), now.clone()));
            }
        }
    }

    /// Answers, with their key's unchanged state, the watches whose wait
    /// ran out by `now`.
    pub fn tick(&mut self, now: Millis, state: impl Fn(&Key) -> KeyState, events: &mut Events) {
        for watch in self.watches.due(now) {
            let current = state(&watch.key);
            events.push(watch_answer(watch, Ok(current)));
        }
    }

    /// Takes out the watches whose wait ran out by `now`, for a node that
    /// confirms its state before it answers them (a Raft leader answers
    /// each with [`watch_answer`] after a read round).
    pub fn take_due(&mut self, now: Millis) -> Vec<Watch<Mailbox>> {
        self.watches.due(now)
    }

    /// The node stops serving: every watch is answered `M W <key> <to|->`.
    pub fn redirect_all(&mut self, to: Option<String>, events: &mut Events) {
        for watch in self.watches.drain() {
            events.push(watch_answer(watch, Err(to.clone())));
        }
    }

    /// A watch's connection closed.
    pub fn cancel(&mut self, id: WatchId) {
        self.watches.cancel(id);
    }

    /// When the next wait runs out.
    pub fn next_deadline(&self) -> Option<Millis> {
        self.watches.next_deadline()
    }

    pub fn len(&self) -> usize {
        self.watches.len()
    }

    pub fn is_empty(&self) -> bool {
        self.watches.is_empty()
    }
}

fn answered(id: WatchId, mailbox: Mailbox, key: Key, state: KeyState) -> NodeEvent {
    NodeEvent::WatchAnswered {
        id,
        mailbox,
        response: Response::Watched { key, state },
    }
}

/// The answer to a pending watch taken out of the registry: its key's
/// state, or `M W <key> <addr|->` (`Err`) from a node that does not serve.
pub fn watch_answer(watch: Watch<Mailbox>, state: Result<KeyState, Option<String>>) -> NodeEvent {
    match state {
        Ok(state) => answered(watch.id, watch.handle, watch.key, state),
        Err(addr) => NodeEvent::WatchAnswered {
            id: watch.id,
            mailbox: watch.handle,
            response: Response::Moved {
                op: Op::Watch,
                key: watch.key,
                addr,
            },
        },
    }
}

/// The earlier of two deadlines.
pub fn earliest(a: Option<Millis>, b: Option<Millis>) -> Option<Millis> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}
