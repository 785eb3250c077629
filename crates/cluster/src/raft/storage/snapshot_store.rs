//! The node's latest snapshot of the lock table, kept as one file in the
//! data directory and replaced durably ([`baton_server::durable`]).
//!
//! The file is a magic tag, a CRC-32 of the body, and the body (the
//! postcard encoding of a [`StoredSnapshot`]): a damaged snapshot is
//! refused at start, naming the file, rather than installed. Files from
//! before the checksum (no tag; their first byte, an `Option` tag, is 0 or
//! 1 and never the magic's) are still read, with a warning, and replaced
//! by the next snapshot.

use std::fs;
use std::io::{self, Write};
use std::path::Path;

use baton_server::durable::{self, at, DurableFile};
use baton_server::sync_metrics::FSYNC_RAFT_LOG;
use baton_server::token_floor::TOKEN_CEILING;

use baton_core::{LegacyTableSnapshot, TableSnapshot, TABLE_FORMAT_2};
use serde::{Deserialize, Serialize};

use crate::raft::types::{LogId, SnapshotData, SnapshotMeta};

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

/// Encodes a lock table snapshot as snapshot data: [`TABLE_FORMAT_2`],
/// then postcard's encoding.
pub fn encode_table(table: &TableSnapshot) -> io::Result<SnapshotData> {
    let data = TABLE_FORMAT_2.to_vec();
    postcard::to_extend(table, data).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// Decodes snapshot data, which may come from a peer, or from a node
/// before protocol 1.2 (a [`LegacyTableSnapshot`] without the format's
/// first bytes).
pub fn decode_table(data: &[u8]) -> io::Result<TableSnapshot> {
    match data.strip_prefix(&TABLE_FORMAT_2[..]) {
        Some(data) => postcard::from_bytes(data),
        None => postcard::from_bytes::<LegacyTableSnapshot>(data).map(Into::into),
    }
    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// The error of a damaged snapshot file at `path`, saying `why`.
fn damaged(path: &Path, why: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!(
            "the raft snapshot {} is damaged ({why}); refusing to start. Moved \
             away, the data directory of one node of a healthy cluster is restored \
             by the leader",
            path.display()
        ),
    )
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
    file: DurableFile,
}

impl SnapshotStore {
    pub fn new(dir: &Path) -> io::Result<SnapshotStore> {
        fs::create_dir_all(dir).map_err(at(dir))?;
        let file = DurableFile::new(dir, FILE)
            .with_temp(TEMP)
            .timed(&FSYNC_RAFT_LOG);
        Ok(SnapshotStore { file })
    }

    /// Where the snapshot lives.
    pub fn path(&self) -> &Path {
        self.file.path()
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
        let sum = durable::checksum(&[&head, data]);
        self.file.replace(|file| {
            file.write_all(MAGIC)?;
            file.write_all(&sum)?;
            file.write_all(&head)?;
            file.write_all(data)
        })?;
        Ok(())
    }

    /// Reads the stored snapshot, table included, as a node does before it
    /// starts on it, and returns its last log id: a damaged one, or one with
    /// a token at or beyond [`TOKEN_CEILING`] (which no node reaches before
    /// 2248; started on it, the cluster would have no token left to grant)
    /// is an error naming the file.
    pub fn check(&self) -> io::Result<Option<LogId>> {
        let Some(stored) = self.load()? else {
            return Ok(None);
        };
        let table = decode_table(&stored.data).map_err(|e| damaged(self.path(), &e.to_string()))?;
        let highest = table
            .locks
            .iter()
            .map(|lock| lock.token)
            .fold(table.last_token, u64::max);
        if highest >= TOKEN_CEILING {
            let why = format!("token {highest} is at or beyond {TOKEN_CEILING}");
            return Err(damaged(self.path(), &why));
        }
        Ok(stored.meta.last_log_id)
    }

    /// The stored snapshot, if any; a damaged one is an error naming the
    /// file.
    pub fn load(&self) -> io::Result<Option<StoredSnapshot>> {
        let path = self.path();
        let Some(bytes) = self.file.read()? else {
            return Ok(None);
        };
        let damaged = |why: &str| damaged(path, why);
        let body = match bytes.strip_prefix(MAGIC) {
            Some(rest) => durable::checked(rest).map_err(damaged)?,
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
