//! The state a priority node keeps in `--data-dir`: its lock table, term
//! and highest token seen, rewritten whole (it is small) a few times a
//! second when it changed, so that a restart of the whole cluster keeps
//! the held locks. The file and its writer are the ones the single mode
//! uses too ([`baton_server::StateFile`], [`baton_server::Persister`]).

use std::path::Path;

pub use baton_server::StateFileError;
use baton_server::{Persister, SharedLocks};

use super::engine::PersistedState;
use super::lock_node::PriorityLockNode;

/// The priority node's file in its data directory.
pub const FILE_NAME: &str = "priority-state";

/// The priority node's state file.
pub type StateFile = baton_server::StateFile<PersistedState>;

/// Writes the node's state when it changed, and once more at a graceful
/// stop; stops the node at the first failed write (see `baton_server`).
pub type PriorityPersister = Persister<PriorityLockNode, PersistedState>;

/// The state file in `dir`, created if missing (`batond` has locked it).
pub fn open(dir: &Path) -> Result<StateFile, StateFileError> {
    StateFile::open(dir, FILE_NAME)
}

/// A writer of `locks`' state to `file`, not yet started.
pub fn persister(
    file: StateFile,
    locks: std::sync::Arc<SharedLocks<PriorityLockNode>>,
) -> std::sync::Arc<PriorityPersister> {
    Persister::new(
        file,
        locks,
        |node: &PriorityLockNode, written, now| node.engine().state_to_persist(written, now),
        0,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_core::{Command, Key, LockTable};

    fn state() -> PersistedState {
        let mut table = LockTable::new();
        let key = Key::new(b"orders/42").unwrap_or_else(|e| panic!("{e}"));
        table.apply(
            &Command::Grant {
                key,
                lease_ms: 30_000,
            },
            0,
        );
        PersistedState {
            term: 7,
            seen_token: 9,
            table: table.snapshot(1_000),
        }
    }

    #[test]
    fn a_stored_state_loads_back() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let file = open(dir.path()).unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(file.load(), Ok(None)));
        file.store(&state()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(file.load().ok().flatten(), Some(state()));
        assert_eq!(file.path(), dir.path().join(FILE_NAME));
    }
}
