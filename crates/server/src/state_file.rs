//! The state a node keeps in its data directory (`--data-dir`) in the
//! single and priority modes: one small file, its lock table and tokens,
//! rewritten whole when it changed, so that a restart keeps the held locks
//! and issues tokens above the ones it issued before.
//!
//! The file is replaced durably and guarded by a CRC-32 ([`crate::durable`]):
//! a crash leaves the old state or the new, never half of one. Its body
//! starts with [`TABLE_FORMAT_2`] since protocol 1.2 (grants carry permits,
//! a mode and a value); a body without it is the state as older nodes
//! wrote it ([`StateFormat::Legacy`]), read so that an upgraded node keeps
//! its data directory.

use std::io::{self, Write};
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

use baton_core::TABLE_FORMAT_2;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::durable::{self, DurableFile, PathError};

/// Why the state file could not be read or written. Every variant names
/// the path.
#[derive(Debug, thiserror::Error)]
pub enum StateFileError {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("cannot write {path}: {source}")]
    Write { path: PathBuf, source: io::Error },
    #[error("{path} is damaged ({why}); move it away to start without it")]
    Damaged { path: PathBuf, why: String },
}

impl StateFileError {
    fn write(PathError { path, source }: PathError) -> StateFileError {
        StateFileError::Write { path, source }
    }
}

/// A state kept in a state file, whose encoding changed with protocol 1.2.
pub trait StateFormat: Serialize + DeserializeOwned {
    /// The state as nodes before protocol 1.2 encoded it.
    type Legacy: DeserializeOwned + Into<Self>;
}

/// One state file of type `S`, named `name` in a data directory.
#[derive(Debug)]
pub struct StateFile<S> {
    file: DurableFile,
    state: PhantomData<fn() -> S>,
}

impl<S> Clone for StateFile<S> {
    fn clone(&self) -> Self {
        StateFile {
            file: self.file.clone(),
            state: PhantomData,
        }
    }
}

impl<S> StateFile<S> {
    /// Where the state lives.
    pub fn path(&self) -> &Path {
        self.file.path()
    }
}

impl<S: StateFormat> StateFile<S> {
    /// The state file `name` in `dir`, created if missing, and checked
    /// writable at once ([`DurableFile::probe`]).
    pub fn open(dir: &Path, name: &str) -> Result<StateFile<S>, StateFileError> {
        let file = DurableFile::new(dir, name).timed(&crate::sync_metrics::FSYNC_STATE_FILE);
        file.probe().map_err(StateFileError::write)?;
        Ok(StateFile {
            file,
            state: PhantomData,
        })
    }

    /// The state last written, if any.
    pub fn load(&self) -> Result<Option<S>, StateFileError> {
        let read = self.file.read();
        let Some(bytes) =
            read.map_err(|PathError { path, source }| StateFileError::Read { path, source })?
        else {
            return Ok(None);
        };
        let damaged = |why: &str| StateFileError::Damaged {
            path: self.path().to_path_buf(),
            why: why.to_string(),
        };
        let body = durable::checked(&bytes).map_err(damaged)?;
        match body.strip_prefix(&TABLE_FORMAT_2[..]) {
            Some(body) => whole::<S>(body),
            None => whole::<S::Legacy>(body).map(Into::into),
        }
        .map(Some)
        .map_err(|e| damaged(&e))
    }

    /// Replaces the state on disk with `state`, durably.
    pub fn store(&self, state: &S) -> Result<(), StateFileError> {
        let body = postcard::to_allocvec(state).map_err(|e| StateFileError::Write {
            path: self.path().to_path_buf(),
            source: io::Error::other(e),
        })?;
        let sum = durable::checksum(&[&TABLE_FORMAT_2, &body]);
        self.file
            .replace(|file| {
                file.write_all(&sum)?;
                file.write_all(&TABLE_FORMAT_2)?;
                file.write_all(&body)
            })
            .map_err(StateFileError::write)
    }
}

/// `body` decoded as a `T` that takes every byte of it. Bytes left over
/// mean a layout this node does not know (a newer batond's, or damage):
/// read as far as it goes, such a file could yield a lower token than the
/// one written, so it is refused instead.
fn whole<T: DeserializeOwned>(body: &[u8]) -> Result<T, String> {
    let (value, rest) = postcard::take_from_bytes(body).map_err(|e| e.to_string())?;
    if !rest.is_empty() {
        return Err(format!(
            "{} bytes this batond does not know follow the state: written by a newer batond?",
            rest.len()
        ));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_core::{
        Command, Key, LegacySnapshotLock, LegacyTableSnapshot, LockTable, TableSnapshot,
    };
    use std::fs;

    const NAME: &str = "test-state";

    impl StateFormat for TableSnapshot {
        type Legacy = LegacyTableSnapshot;
    }

    #[test]
    fn a_state_an_older_node_wrote_still_loads() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let old = LegacyTableSnapshot {
            last_token: 1,
            locks: vec![LegacySnapshotLock {
                key: Key::new(b"orders/42").unwrap_or_else(|e| panic!("{e}")),
                token: 1,
                remaining_ms: 29_000,
            }],
        };
        // What batond before protocol 1.2 wrote: a checksum, then postcard.
        let body = postcard::to_allocvec(&old).unwrap_or_else(|e| panic!("{e}"));
        let mut bytes = durable::checksum(&[&body]).to_vec();
        bytes.extend_from_slice(&body);
        fs::write(dir.path().join(NAME), &bytes).unwrap_or_else(|e| panic!("{e}"));
        let file = open(dir.path());
        let loaded = file.load().ok().flatten();
        assert_eq!(loaded, Some(TableSnapshot::from(old)));
        assert_eq!(loaded, Some(state()));
    }

    fn state() -> TableSnapshot {
        let mut table = LockTable::new();
        let key = Key::new(b"orders/42").unwrap_or_else(|e| panic!("{e}"));
        table.apply(
            &Command::Grant {
                key,
                lease_ms: 30_000,
            },
            0,
        );
        table.snapshot(1_000)
    }

    fn open(dir: &Path) -> StateFile<TableSnapshot> {
        StateFile::open(dir, NAME).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_stored_state_loads_back() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let file = open(dir.path());
        assert!(matches!(file.load(), Ok(None)));
        file.store(&state()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(file.load().ok().flatten(), Some(state()));
        // The probe at open left nothing behind but the state.
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap_or_else(|e| panic!("{e}"))
            .filter_map(|e| e.ok().map(|e| e.file_name()))
            .collect();
        assert_eq!(names, vec![NAME]);
    }

    #[test]
    fn a_damaged_file_is_refused_not_half_read() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let file = open(dir.path());
        file.store(&state()).unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join(NAME);
        let mut bytes = fs::read(&path).unwrap_or_else(|e| panic!("{e}"));
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        fs::write(&path, &bytes).unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(file.load(), Err(StateFileError::Damaged { .. })));
        fs::write(&path, b"ab").unwrap_or_else(|e| panic!("{e}"));
        let error = file.load().err().unwrap_or_else(|| panic!("loaded"));
        assert!(error.to_string().contains(&path.display().to_string()));
    }

    #[test]
    fn a_state_with_bytes_after_it_is_refused_not_half_read() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let file = open(dir.path());
        let mut body = TABLE_FORMAT_2.to_vec();
        body.extend(postcard::to_allocvec(&state()).unwrap_or_else(|e| panic!("{e}")));
        body.extend_from_slice(b"newer");
        let mut bytes = durable::checksum(&[&body]).to_vec();
        bytes.extend_from_slice(&body);
        fs::write(dir.path().join(NAME), &bytes).unwrap_or_else(|e| panic!("{e}"));
        let error = file.load().err().unwrap_or_else(|| panic!("loaded"));
        assert!(matches!(error, StateFileError::Damaged { .. }), "{error}");
        assert!(error.to_string().contains("newer batond"), "{error}");
    }

    #[test]
    fn a_file_that_cannot_be_written_is_refused_with_its_path() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        // Root ignores permissions; a directory in the way of the
        // temporary file fails every write.
        let tmp = dir.path().join(format!("{NAME}.tmp"));
        fs::create_dir(&tmp).unwrap_or_else(|e| panic!("{e}"));
        let error = StateFile::<TableSnapshot>::open(dir.path(), NAME)
            .err()
            .unwrap_or_else(|| panic!("opened"));
        assert!(matches!(error, StateFileError::Write { .. }));
        assert!(error.to_string().contains(&tmp.display().to_string()));
        // Opened before the fault: the next store fails the same way.
        fs::remove_dir(&tmp).unwrap_or_else(|e| panic!("{e}"));
        let file = open(dir.path());
        fs::create_dir(&tmp).unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(
            file.store(&state()),
            Err(StateFileError::Write { .. })
        ));
    }
}
