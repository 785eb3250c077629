//! The node's latest snapshot of the lock table, kept as one file in the
//! data directory and replaced atomically (write, fsync, rename).
//!
//! The file is a magic tag, a CRC-32 of the body, and the body (the
//! postcard encoding of a [`StoredSnapshot`]): a damaged snapshot is
//! refused at start, naming the file, rather than installed. Files from
//! before the checksum (no tag; their first byte, an `Option` tag, is 0 or
//! 1 and never the magic's) are still read, with a warning, and replaced
//! by the next snapshot.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use baton_core::TableSnapshot;
use serde::{Deserialize, Serialize};

use super::segment;
use super::types::{SnapshotData, SnapshotMeta};

const FILE: &str = "snapshot.bin";
const TEMP: &str = "snapshot.tmp";
/// The first bytes of a snapshot file with a checksum.
const MAGIC: &[u8; 8] = b"BATONSN1";

/// A snapshot as it is stored and sent: openraft's metadata and the data,
/// which is the postcard encoding of a [`TableSnapshot`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StoredSnapshot {
    pub meta: SnapshotMeta,
    pub data: SnapshotData,
}

/// Encodes a lock table snapshot as snapshot data.
pub fn encode_table(table: &TableSnapshot) -> io::Result<SnapshotData> {
    postcard::to_allocvec(table).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// Decodes snapshot data, which may come from a peer.
pub fn decode_table(data: &[u8]) -> io::Result<TableSnapshot> {
    postcard::from_bytes(data).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// Appends `n` as postcard writes a length: LEB128, 7 bits a byte.
fn push_varint(mut n: u64, out: &mut Vec<u8>) {
    while n >= 0x80 {
        out.push((n as u8 & 0x7f) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// Where the snapshot lives.
#[derive(Debug, Clone)]
pub struct SnapshotStore {
    dir: PathBuf,
}

impl SnapshotStore {
    pub fn new(dir: &Path) -> io::Result<SnapshotStore> {
        fs::create_dir_all(dir).map_err(|e| at(dir, e))?;
        Ok(SnapshotStore {
            dir: dir.to_path_buf(),
        })
    }

    /// Where the snapshot lives.
    pub fn path(&self) -> PathBuf {
        self.dir.join(FILE)
    }

    /// Replaces the stored snapshot; durable when this returns.
    pub fn save(&self, snapshot: &StoredSnapshot) -> io::Result<()> {
        self.save_parts(&snapshot.meta, &snapshot.data)
    }

    /// [`SnapshotStore::save`] of a snapshot in its two parts. The body is
    /// postcard's encoding of a [`StoredSnapshot`], written in pieces (the
    /// metadata, the data's length, the data) so that the data, the size
    /// of the whole table, is never copied.
    pub fn save_parts(&self, meta: &SnapshotMeta, data: &[u8]) -> io::Result<()> {
        let mut head = postcard::to_allocvec(meta)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        push_varint(data.len() as u64, &mut head);
        let mut sum = crc32fast::Hasher::new();
        sum.update(&head);
        sum.update(data);
        let sum = sum.finalize();
        let temp = self.dir.join(TEMP);
        let write = || -> io::Result<()> {
            let mut file = fs::File::create(&temp)?;
            file.write_all(MAGIC)?;
            file.write_all(&sum.to_le_bytes())?;
            file.write_all(&head)?;
            segment::write(&mut file, data, true)
        };
        write().map_err(|e| at(&temp, e))?;
        fs::rename(&temp, self.path()).map_err(|e| at(&self.path(), e))?;
        segment::sync_dir(&self.dir).map_err(|e| at(&self.dir, e))
    }

    /// The stored snapshot, if any; a damaged one is an error naming the
    /// file.
    pub fn load(&self) -> io::Result<Option<StoredSnapshot>> {
        let path = self.path();
        let bytes = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(error) => return Err(at(&path, error)),
        };
        let damaged = |why: &str| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "the raft snapshot {} is damaged ({why}); refusing to start. Moved \
                     away, the data directory of one node of a healthy cluster is restored \
                     by the leader",
                    path.display()
                ),
            )
        };
        let body = match bytes.strip_prefix(MAGIC) {
            Some(rest) => {
                let (sum, body) = rest
                    .split_first_chunk::<4>()
                    .ok_or_else(|| damaged("too short"))?;
                if u32::from_le_bytes(*sum) != crc32fast::hash(body) {
                    return Err(damaged("checksum mismatch"));
                }
                body
            }
            None => {
                tracing::warn!(
                    file = %path.display(),
                    "snapshot without a checksum (an older batond wrote it); the next snapshot replaces it"
                );
                &bytes[..]
            }
        };
        postcard::from_bytes(body)
            .map(Some)
            .map_err(|e| damaged(&e.to_string()))
    }
}

/// `error`, saying which file or directory it is about.
fn at(path: &Path, error: io::Error) -> io::Error {
    io::Error::new(error.kind(), format!("{}: {error}", path.display()))
}
