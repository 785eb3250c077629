//! Small files replaced whole and durably, and the checksum that guards
//! them: the single and priority modes' state file, the Raft snapshot and
//! the Raft node's id all live in such a file.
//!
//! A replacement is written to a temporary name, synced, renamed over the
//! old file and the directory synced: a crash leaves the old content or
//! the new, never half of one. Every error names the file or directory it
//! is about ([`PathError`]).

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};

use crate::sync_metrics::SyncHistogram;

/// An I/O error and the file or directory it is about.
#[derive(Debug, thiserror::Error)]
#[error("{}: {source}", path.display())]
pub struct PathError {
    pub path: PathBuf,
    pub source: io::Error,
}

impl From<PathError> for io::Error {
    /// The same kind, the path in the message.
    fn from(error: PathError) -> io::Error {
        io::Error::new(error.source.kind(), error.to_string())
    }
}

/// A closure that turns an I/O error into one about `path`.
pub fn at(path: &Path) -> impl FnOnce(io::Error) -> PathError {
    let path = path.to_path_buf();
    move |source| PathError { path, source }
}

/// One small file, replaced whole through a temporary file beside it.
#[derive(Debug, Clone)]
pub struct DurableFile {
    dir: PathBuf,
    path: PathBuf,
    temp: PathBuf,
    timing: Option<&'static SyncHistogram>,
}

impl DurableFile {
    /// The file `name` in `dir`, replaced through `{name}.tmp`.
    pub fn new(dir: &Path, name: &str) -> DurableFile {
        DurableFile {
            dir: dir.to_path_buf(),
            path: dir.join(name),
            temp: dir.join(format!("{name}.tmp")),
            timing: None,
        }
    }

    /// The same file, replaced through the temporary file `temp` instead.
    pub fn with_temp(self, temp: &str) -> DurableFile {
        DurableFile {
            temp: self.dir.join(temp),
            ..self
        }
    }

    /// The same file, its syncs counted in `histogram` (`/metrics`).
    pub fn timed(self, histogram: &'static SyncHistogram) -> DurableFile {
        DurableFile {
            timing: Some(histogram),
            ..self
        }
    }

    /// Where the file lives.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Creates the directory if missing, then writes and removes the
    /// temporary file once, so that a directory the node cannot write is
    /// refused at start rather than at the first replacement.
    pub fn probe(&self) -> Result<(), PathError> {
        fs::create_dir_all(&self.dir).map_err(at(&self.dir))?;
        self.write_temp(|_| Ok(()))?;
        fs::remove_file(&self.temp).map_err(at(&self.temp))
    }

    /// The file's bytes, or `None` if there is no file.
    pub fn read(&self) -> Result<Option<Vec<u8>>, PathError> {
        match fs::read(&self.path) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(at(&self.path)(error)),
        }
    }

    /// Replaces the file with what `write` writes; durable when this
    /// returns.
    pub fn replace(
        &self,
        write: impl FnOnce(&mut File) -> io::Result<()>,
    ) -> Result<(), PathError> {
        self.write_temp(write)?;
        fs::rename(&self.temp, &self.path).map_err(at(&self.path))?;
        File::open(&self.dir)
            .and_then(|dir| dir.sync_all())
            .map_err(at(&self.dir))
    }

    /// Creates the temporary file, lets `write` fill it and syncs it.
    fn write_temp(&self, write: impl FnOnce(&mut File) -> io::Result<()>) -> Result<(), PathError> {
        let run = || -> io::Result<()> {
            let mut file = File::create(&self.temp)?;
            write(&mut file)?;
            match self.timing {
                Some(histogram) => histogram.time(|| file.sync_all()),
                None => file.sync_all(),
            }
        };
        run().map_err(at(&self.temp))
    }
}

/// Bytes of the checksum that [`checksum`] makes and [`checked`] reads.
pub const CHECKSUM_LEN: usize = 4;

/// The CRC-32 (little-endian) of a body given in `parts`, to be written
/// before it.
pub fn checksum(parts: &[&[u8]]) -> [u8; CHECKSUM_LEN] {
    let mut sum = crc32fast::Hasher::new();
    for part in parts {
        sum.update(part);
    }
    sum.finalize().to_le_bytes()
}

/// The body of `bytes`, a [`checksum`] followed by the body, or why it is
/// damaged.
pub fn checked(bytes: &[u8]) -> Result<&[u8], &'static str> {
    let (sum, body) = bytes
        .split_first_chunk::<CHECKSUM_LEN>()
        .ok_or("too short")?;
    if *sum != checksum(&[body]) {
        return Err("checksum mismatch");
    }
    Ok(body)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test
mod tests {
    use super::*;
    use std::io::Write;

    fn names(dir: &Path) -> Vec<std::ffi::OsString> {
        let mut names: Vec<_> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_replacement_leaves_only_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = DurableFile::new(&dir.path().join("sub"), "f").with_temp("t");
        file.probe().unwrap();
        assert!(names(&dir.path().join("sub")).is_empty());
        assert_eq!(file.read().unwrap(), None);
        file.replace(|f| f.write_all(b"one")).unwrap();
        file.replace(|f| f.write_all(b"two")).unwrap();
        assert_eq!(file.read().unwrap(), Some(b"two".to_vec()));
        assert_eq!(names(&dir.path().join("sub")), vec!["f"]);
    }

    #[test]
    fn a_failed_write_keeps_the_old_file_and_names_the_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let file = DurableFile::new(dir.path(), "f");
        file.replace(|f| f.write_all(b"old")).unwrap();
        let error = file
            .replace(|_| Err(io::Error::other("refused")))
            .unwrap_err();
        assert_eq!(error.path, dir.path().join("f.tmp"));
        let error = io::Error::from(error);
        assert!(error.to_string().contains("f.tmp: refused"), "{error}");
        assert_eq!(file.read().unwrap(), Some(b"old".to_vec()));
    }

    #[test]
    fn a_checksum_catches_a_flipped_bit_and_a_short_file() {
        let mut bytes = checksum(&[b"ab", b"c"]).to_vec();
        bytes.extend_from_slice(b"abc");
        assert_eq!(checked(&bytes), Ok(&b"abc"[..]));
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        assert_eq!(checked(&bytes), Err("checksum mismatch"));
        assert_eq!(checked(&bytes[..3]), Err("too short"));
    }
}
