//! Persistence: the state a node writes to `--data-dir` when it changed,
//! and takes back at start-up.

use baton_core::{LockTable, Millis};

use super::{PersistedState, PriorityNode};

impl<H> PriorityNode<H> {
    /// Starts from a state written before a restart (`--data-dir`): its
    /// locks, with leases counted again from `now`, and its term, so that
    /// the election prefers it over nodes that know nothing. Called once,
    /// before any input.
    ///
    /// A state beyond the sanity bounds ([`Self::check_recovered`]) is not
    /// taken: a start-up should refuse it first (`state_file::load_checked`
    /// names the file); this keeps a caller that did not from spreading it.
    pub fn recover(&mut self, state: &PersistedState, now: Millis) {
        if let Err(why) = self.check_recovered(state, now) {
            tracing::error!("the recovered state is not taken: {why}");
            return;
        }
        self.service
            .replace_table(LockTable::restore(&state.table, now));
        self.term = state.term;
        self.seen_token = self.seen_token.max(state.seen_token);
        self.version += 1;
        self.checked();
    }

    /// The state to write if it changed since `written` (a version this
    /// returned before), with its version.
    pub fn state_to_persist(&self, written: u64, now: Millis) -> Option<(u64, PersistedState)> {
        if self.version == written {
            return None;
        }
        let state = PersistedState {
            term: self.term,
            seen_token: self.seen_token.max(self.service.table().last_token()),
            table: self.service.table().snapshot(now),
        };
        Some((self.version, state))
    }
}
