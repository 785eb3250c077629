//! A node's data directory (`--data-dir`), opened once at start in every
//! mode that has one and held for the life of the process.
//!
//! Two nodes on one directory would each overwrite the other's state (two
//! Raft nodes appending to one log; a node replaying a live node's log).
//! So the directory is locked before anything in it is read: an exclusive
//! `flock` on `<dir>/LOCK`, which the kernel drops when the process ends,
//! kill -9 included, so a stale lock file never blocks a restart. The file
//! says who holds it (pid and address), for the error a second node gets.
//!
//! Writing the lock file is also the start-up check that the directory can
//! be written at all: a node that could not save its state must not serve.

use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{self, Read, Seek, Write};
use std::path::{Path, PathBuf};

/// The lock file's name inside the directory.
pub const LOCK_FILE: &str = "LOCK";

/// Why a data directory cannot be used. Every variant names the path.
#[derive(Debug, thiserror::Error)]
pub enum DataDirError {
    #[error("cannot create the data directory {path}: {source}")]
    Create { path: PathBuf, source: io::Error },
    #[error("the data directory {path} is not a directory")]
    NotADirectory { path: PathBuf },
    #[error(
        "the data directory {path} is in use by another batond ({holder}); \
         every node needs a data directory of its own"
    )]
    InUse { path: PathBuf, holder: String },
    #[error("cannot lock the data directory {path}: {source}")]
    Lock { path: PathBuf, source: io::Error },
    #[error("cannot write to the data directory {path}: {source}")]
    Unwritable { path: PathBuf, source: io::Error },
}

/// A locked data directory; the lock lasts as long as this value.
#[derive(Debug)]
pub struct DataDir {
    path: PathBuf,
    lock: File,
}

impl DataDir {
    /// Creates `path` if missing, locks it and writes `holder` (this
    /// node's address, say) and the process id into the lock file.
    pub fn open(path: &Path, holder: &str) -> Result<DataDir, DataDirError> {
        let path = path.to_path_buf();
        if path.exists() && !path.is_dir() {
            return Err(DataDirError::NotADirectory { path });
        }
        // Created for its owner only: it holds the node's locks and tokens.
        let created = {
            use std::os::unix::fs::DirBuilderExt;
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&path)
        };
        if let Err(source) = created {
            return Err(DataDirError::Create { path, source });
        }
        let lock_path = path.join(LOCK_FILE);
        let mut lock = match OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock_path)
        {
            Ok(file) => file,
            Err(source) => return Err(DataDirError::Unwritable { path, source }),
        };
        match lock.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut text = String::new();
                let _ = lock.read_to_string(&mut text);
                let holder = match text.trim() {
                    "" => "it has not said who it is yet".to_string(),
                    said => said.to_string(),
                };
                return Err(DataDirError::InUse { path, holder });
            }
            Err(TryLockError::Error(source)) => return Err(DataDirError::Lock { path, source }),
        }
        let dir = DataDir { path, lock };
        dir.record_holder(holder)?;
        Ok(dir)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Rewrites who holds the directory (once the node knows its bound
    /// address), durably: this is also the check that the directory takes
    /// writes.
    pub fn record_holder(&self, holder: &str) -> Result<(), DataDirError> {
        let line = format!("pid {}, {holder}\n", std::process::id());
        let mut file = &self.lock;
        let mut write = || -> io::Result<()> {
            file.set_len(0)?;
            file.rewind()?;
            file.write_all(line.as_bytes())?;
            file.sync_all()?;
            File::open(&self.path)?.sync_all()
        };
        write().map_err(|source| DataDirError::Unwritable {
            path: self.path.clone(),
            source,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_opener_is_refused_with_the_path_and_the_holder() {
        let base = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = base.path().join("node");
        let first =
            DataDir::open(&path, "listening 127.0.0.1:7411").unwrap_or_else(|e| panic!("{e}"));
        let error = DataDir::open(&path, "listening 127.0.0.1:7412")
            .err()
            .unwrap_or_else(|| panic!("opened twice"));
        let message = error.to_string();
        assert!(matches!(error, DataDirError::InUse { .. }), "{message}");
        assert!(message.contains(&path.display().to_string()), "{message}");
        let pid = format!("pid {}", std::process::id());
        assert!(message.contains(&pid), "{message}");
        assert!(message.contains("127.0.0.1:7411"), "{message}");
        drop(first);
        let again = DataDir::open(&path, "listening 127.0.0.1:7412");
        assert!(again.is_ok(), "a released directory opens again");
    }

    #[test]
    fn a_file_in_place_of_the_directory_is_refused_with_its_path() {
        let base = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = base.path().join("not-a-dir");
        fs::write(&path, b"x").unwrap_or_else(|e| panic!("{e}"));
        let error = DataDir::open(&path, "x")
            .err()
            .unwrap_or_else(|| panic!("opened a file"));
        assert!(matches!(error, DataDirError::NotADirectory { .. }));
        assert!(error.to_string().contains(&path.display().to_string()));
        let below = path.join("below");
        let error = DataDir::open(&below, "x")
            .err()
            .unwrap_or_else(|| panic!("created a directory under a file"));
        assert!(error.to_string().contains(&below.display().to_string()));
    }

    #[test]
    fn an_unwritable_lock_file_is_refused_with_the_path() {
        let base = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        // Root ignores permissions; a directory where the lock file goes
        // cannot be opened for writing by anyone.
        fs::create_dir(base.path().join(LOCK_FILE)).unwrap_or_else(|e| panic!("{e}"));
        let error = DataDir::open(base.path(), "x")
            .err()
            .unwrap_or_else(|| panic!("opened"));
        assert!(matches!(error, DataDirError::Unwritable { .. }));
        assert!(error
            .to_string()
            .contains(&base.path().display().to_string()));
    }
}
