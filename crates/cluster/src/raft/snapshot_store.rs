//! The node's latest snapshot of the lock table, kept as one file in the
//! data directory and replaced atomically (write, fsync, rename).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use baton_core::TableSnapshot;
use serde::{Deserialize, Serialize};

use super::segment;
use super::types::{SnapshotData, SnapshotMeta};

const FILE: &str = "snapshot.bin";
const TEMP: &str = "snapshot.tmp";

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

/// Where the snapshot lives.
#[derive(Debug, Clone)]
pub struct SnapshotStore {
    dir: PathBuf,
}

impl SnapshotStore {
    pub fn new(dir: &Path) -> io::Result<SnapshotStore> {
        fs::create_dir_all(dir)?;
        Ok(SnapshotStore {
            dir: dir.to_path_buf(),
        })
    }

    /// Replaces the stored snapshot; durable when this returns.
    pub fn save(&self, snapshot: &StoredSnapshot) -> io::Result<()> {
        let bytes = postcard::to_allocvec(snapshot)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        let temp = self.dir.join(TEMP);
        let mut file = fs::File::create(&temp)?;
        segment::write(&mut file, &bytes, true)?;
        drop(file);
        fs::rename(&temp, self.dir.join(FILE))?;
        segment::sync_dir(&self.dir)
    }

    /// The stored snapshot, if any.
    pub fn load(&self) -> io::Result<Option<StoredSnapshot>> {
        match fs::read(self.dir.join(FILE)) {
            Ok(bytes) => postcard::from_bytes(&bytes)
                .map(Some)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e)),
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(error),
        }
    }
}
