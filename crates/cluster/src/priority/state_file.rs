//! The state a priority node keeps in `--data-dir`: its lock table, term
//! and highest token seen, rewritten whole (it is small) a few times a
//! second when it changed, so that a restart of the whole cluster keeps
//! the held locks. The file and its writer are the ones the single mode
//! uses too ([`baton_server::StateFile`], [`baton_server::Persister`]).
//! What it holds is checked against the engine's sanity bounds before the
//! node starts on it ([`load_checked`]).

use std::path::Path;

use baton_core::Millis;
pub use baton_server::StateFileError;
use baton_server::{Persister, SharedLocks};

use super::engine::{PersistedState, PriorityNode};
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

/// The state in `file`, if any, checked against `engine`'s sanity bounds
/// at `now`: one with a token or term beyond what the cluster can have
/// reached (a bad disk, a bug, a clock set far back) is refused as
/// damaged, naming the file, so that the node does not start on it and
/// spread it to its peers.
pub fn load_checked<H>(
    file: &StateFile,
    engine: &PriorityNode<H>,
    now: Millis,
) -> Result<Option<PersistedState>, StateFileError> {
    let Some(state) = file.load()? else {
        return Ok(None);
    };
    engine
        .check_recovered(&state, now)
        .map_err(|why| StateFileError::Damaged {
            path: file.path().to_path_buf(),
            why: why.to_string(),
        })?;
    Ok(Some(state))
}

/// A writer of `locks`' state to `file`, not yet started.
pub fn persister(
    file: StateFile,
    locks: std::sync::Arc<SharedLocks<PriorityLockNode>>,
) -> std::sync::Arc<PriorityPersister> {
    Persister::new(
        file,
        locks,
        |node: &PriorityLockNode, written, now| node.state_to_persist(written, now),
        0,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_core::{Command, Key, LockTable, Token};

    use super::super::engine::PriorityConfig;

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

    fn engine() -> PriorityNode<u64> {
        let config = PriorityConfig {
            me: 0,
            peers: vec!["127.0.0.1:7400".into(), "127.0.0.1:7401".into()],
            heartbeat_ms: 10,
            failure_timeout_ms: 50,
            wall_at_zero: 1_700_000_000_000,
        };
        PriorityNode::new(config, 0)
    }

    /// A file whose token or term is beyond the sanity bound (a bad disk,
    /// a forged frame's values saved by an older node) stops the start
    /// with an error naming it, and the engine never takes it.
    #[test]
    fn a_state_beyond_the_bounds_is_refused_naming_the_file() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let file = open(dir.path()).unwrap_or_else(|e| panic!("{e}"));
        let mut engine = engine();
        // A state of a normal run loads.
        let mut sound = state();
        sound.term = 1_700_000_000_000 << 20;
        file.store(&sound).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(load_checked(&file, &engine, 5).ok().flatten(), Some(sound));
        for poison in [
            |s: &mut PersistedState| s.seen_token = Token::MAX,
            |s: &mut PersistedState| s.term = Token::MAX - 1,
            |s: &mut PersistedState| s.table.last_token = 1 << 63,
            |s: &mut PersistedState| s.table.locks[0].token = Token::MAX,
        ] {
            let mut bad = state();
            poison(&mut bad);
            file.store(&bad).unwrap_or_else(|e| panic!("{e}"));
            match load_checked(&file, &engine, 5) {
                Err(error @ StateFileError::Damaged { .. }) => {
                    let line = error.to_string();
                    assert!(line.contains(&file.path().display().to_string()), "{line}");
                    assert!(line.contains("beyond"), "{line}");
                }
                other => panic!("a poisoned state was not refused: {other:?}"),
            }
            // A caller that recovers it anyway does not take it.
            engine.recover(&bad, 5);
            assert_eq!(engine.term(), 0);
            assert_eq!(engine.table().last_token(), 0);
            assert!(engine.table().is_empty());
        }
    }
}
