//! The state a priority node keeps in `--data-dir`: its lock table and
//! term, rewritten whole (it is small) a few times a second when it changed,
//! so that a restart of the whole cluster keeps the held locks.
//!
//! The file is written to a temporary name, synced, renamed over the old
//! one and the directory synced: a crash leaves the old state or the new,
//! never half of one. A checksum guards against anything else.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use super::engine::PersistedState;

const FILE_NAME: &str = "priority-state";

/// Why the state file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum StateFileError {
    #[error("cannot read {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("{path} is damaged ({why}); move it away to start without it")]
    Damaged { path: PathBuf, why: String },
}

#[derive(Debug, Clone)]
pub struct StateFile {
    dir: PathBuf,
}

impl StateFile {
    /// The state file in `dir`, created if missing.
    pub fn open(dir: &Path) -> Result<StateFile, StateFileError> {
        fs::create_dir_all(dir).map_err(|source| StateFileError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        Ok(StateFile {
            dir: dir.to_path_buf(),
        })
    }

    fn path(&self) -> PathBuf {
        self.dir.join(FILE_NAME)
    }

    /// The state last written, if any.
    pub fn load(&self) -> Result<Option<PersistedState>, StateFileError> {
        let path = self.path();
        let bytes = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(StateFileError::Io { path, source }),
        };
        let damaged = |why: &str| StateFileError::Damaged {
            path: path.clone(),
            why: why.to_string(),
        };
        let (sum, body) = bytes
            .split_first_chunk::<4>()
            .ok_or_else(|| damaged("too short"))?;
        if u32::from_le_bytes(*sum) != crc32fast::hash(body) {
            return Err(damaged("checksum mismatch"));
        }
        postcard::from_bytes(body)
            .map(Some)
            .map_err(|e| damaged(&e.to_string()))
    }

    /// Replaces the state on disk with `state`, durably.
    pub fn store(&self, state: &PersistedState) -> io::Result<()> {
        let body = postcard::to_allocvec(state).map_err(io::Error::other)?;
        let tmp = self.dir.join(format!("{FILE_NAME}.tmp"));
        {
            let mut file = File::create(&tmp)?;
            file.write_all(&crc32fast::hash(&body).to_le_bytes())?;
            file.write_all(&body)?;
            file.sync_all()?;
        }
        fs::rename(&tmp, self.path())?;
        File::open(&self.dir)?.sync_all()
    }
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
        let file = StateFile::open(dir.path()).unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(file.load(), Ok(None)));
        file.store(&state()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(file.load().ok().flatten(), Some(state()));
    }

    #[test]
    fn a_damaged_file_is_refused_not_half_read() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let file = StateFile::open(dir.path()).unwrap_or_else(|e| panic!("{e}"));
        file.store(&state()).unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join(FILE_NAME);
        let mut bytes = fs::read(&path).unwrap_or_else(|e| panic!("{e}"));
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        fs::write(&path, &bytes).unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(file.load(), Err(StateFileError::Damaged { .. })));
        fs::write(&path, b"ab").unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(file.load(), Err(StateFileError::Damaged { .. })));
    }
}
