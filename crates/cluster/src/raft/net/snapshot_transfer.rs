//! Snapshots between nodes, in pieces: the leader cuts a snapshot into
//! [`SnapshotPart`]s of at most [`SNAPSHOT_PART_BYTES`] and sends them one
//! after the other on one link, each acknowledged; the follower assembles
//! them ([`Assembly`]) up to [`MAX_SNAPSHOT_BYTES`] and installs the
//! snapshot once the last part is in.
//!
//! An assembly belongs to the link it arrives on: a superseded or closed
//! link drops it, a new transfer on the link replaces it, and one whose
//! next part does not come within [`SNAPSHOT_STALL`] is given up. Bytes
//! being assembled on the whole node are bounded by a shared
//! [`AssemblyBudget`], so peers cannot make a node hold a snapshot per
//! link.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::raft::types::{SnapshotMeta, Vote};

/// Snapshot data in one part, at most.
pub const SNAPSHOT_PART_BYTES: usize = 1024 * 1024;

/// The largest snapshot sent or accepted. A lock held in a snapshot takes
/// at most about 270 bytes (a 250-byte key, its token and lease), 30 or so
/// for short keys: this is millions of locks, far beyond what one leader
/// serves. A leader whose table outgrows it says so and sends nothing.
pub const MAX_SNAPSHOT_BYTES: usize = 1024 * 1024 * 1024;

/// A transfer whose next part does not come within this is given up.
pub const SNAPSHOT_STALL: Duration = Duration::from_secs(10);

/// One piece of a snapshot.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SnapshotPart {
    /// Names the transfer; a part with another id on the link starts over.
    pub transfer: u64,
    /// Where `data` goes in the snapshot.
    pub offset: u64,
    /// The whole snapshot's length.
    pub total: u64,
    pub data: Vec<u8>,
    /// With the first part only: the leader's vote and the snapshot's
    /// metadata.
    pub head: Option<SnapshotHead>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotHead {
    pub vote: Vote,
    pub meta: SnapshotMeta,
}

/// Cuts a snapshot into parts, the head in the first; always at least one
/// part (an empty snapshot is one empty part).
pub fn parts(transfer: u64, head: SnapshotHead, data: &[u8]) -> Vec<SnapshotPart> {
    let total = data.len() as u64;
    let mut head = Some(head);
    let mut out = Vec::with_capacity(data.len().div_ceil(SNAPSHOT_PART_BYTES).max(1));
    let mut offset = 0;
    loop {
        let end = data.len().min(offset + SNAPSHOT_PART_BYTES);
        out.push(SnapshotPart {
            transfer,
            offset: offset as u64,
            total,
            data: data[offset..end].to_vec(),
            head: head.take(),
        });
        if end == data.len() {
            return out;
        }
        offset = end;
    }
}

/// Why a part was refused; the transfer is then given up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransferError {
    #[error("a snapshot of {0} bytes is over the limit of {MAX_SNAPSHOT_BYTES}")]
    TooLarge(u64),
    #[error("a snapshot part of {0} bytes is over the limit of {SNAPSHOT_PART_BYTES}")]
    PartTooLarge(usize),
    #[error("other snapshots being received hold the memory for this one; try again")]
    NoBudget,
    #[error("a snapshot's first part without its metadata")]
    NoHead,
    #[error("a snapshot part that does not continue the transfer in progress")]
    OutOfOrder,
    #[error("a snapshot part that runs past the snapshot's length")]
    PastEnd,
}

/// What the node may hold in snapshots being received, across links.
#[derive(Debug, Clone)]
pub struct AssemblyBudget {
    used: Arc<AtomicUsize>,
    cap: usize,
}

impl Default for AssemblyBudget {
    fn default() -> Self {
        AssemblyBudget::new(MAX_SNAPSHOT_BYTES)
    }
}

impl AssemblyBudget {
    pub fn new(cap: usize) -> AssemblyBudget {
        AssemblyBudget {
            used: Arc::new(AtomicUsize::new(0)),
            cap,
        }
    }

    fn reserve(&self, bytes: usize) -> Option<Reserved> {
        let mut used = self.used.load(Ordering::Relaxed);
        loop {
            let after = used.checked_add(bytes).filter(|&after| after <= self.cap)?;
            match self
                .used
                .compare_exchange_weak(used, after, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => {
                    return Some(Reserved {
                        used: self.used.clone(),
                        bytes,
                    })
                }
                Err(now) => used = now,
            }
        }
    }

    /// Bytes reserved now (for tests).
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }
}

/// Budget held by one assembly until it is dropped.
#[derive(Debug)]
struct Reserved {
    used: Arc<AtomicUsize>,
    bytes: usize,
}

impl Drop for Reserved {
    fn drop(&mut self) {
        self.used.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

#[derive(Debug)]
struct InProgress {
    transfer: u64,
    head: SnapshotHead,
    total: usize,
    data: Vec<u8>,
    stalls_at: Instant,
    _reserved: Reserved,
}

/// The snapshot being received on one link, if any.
#[derive(Debug)]
pub struct Assembly {
    budget: AssemblyBudget,
    current: Option<InProgress>,
}

impl Assembly {
    pub fn new(budget: AssemblyBudget) -> Assembly {
        Assembly {
            budget,
            current: None,
        }
    }

    /// Takes one part at `now`: the whole snapshot once its last part is
    /// in. Any error gives the transfer up.
    pub fn receive(
        &mut self,
        part: SnapshotPart,
        now: Instant,
    ) -> Result<Option<(SnapshotHead, Vec<u8>)>, TransferError> {
        let result = self.take(part, now);
        if result.is_err() {
            self.current = None;
        }
        result
    }

    fn take(
        &mut self,
        part: SnapshotPart,
        now: Instant,
    ) -> Result<Option<(SnapshotHead, Vec<u8>)>, TransferError> {
        if part.data.len() > SNAPSHOT_PART_BYTES {
            return Err(TransferError::PartTooLarge(part.data.len()));
        }
        if part.offset != 0 && part.head.is_some() {
            return Err(TransferError::OutOfOrder);
        }
        if part.offset == 0 {
            // A new transfer supersedes whatever this link was receiving;
            // its budget comes back before the new one asks.
            self.current = None;
            let total = usize::try_from(part.total)
                .ok()
                .filter(|&total| total <= MAX_SNAPSHOT_BYTES)
                .ok_or(TransferError::TooLarge(part.total))?;
            let head = part.head.ok_or(TransferError::NoHead)?;
            let reserved = self.budget.reserve(total).ok_or(TransferError::NoBudget)?;
            self.current = Some(InProgress {
                transfer: part.transfer,
                head,
                total,
                // Grows with the parts that really come, not with the
                // length the first one claims.
                data: Vec::with_capacity(SNAPSHOT_PART_BYTES.min(total)),
                stalls_at: now + SNAPSHOT_STALL,
                _reserved: reserved,
            });
        }
        let current = self.current.as_mut().ok_or(TransferError::OutOfOrder)?;
        if part.transfer != current.transfer
            || part.offset != current.data.len() as u64
            || part.total != current.total as u64
        {
            return Err(TransferError::OutOfOrder);
        }
        if current.data.len() + part.data.len() > current.total {
            return Err(TransferError::PastEnd);
        }
        current.data.extend_from_slice(&part.data);
        current.stalls_at = now + SNAPSHOT_STALL;
        if current.data.len() < current.total {
            return Ok(None);
        }
        let done = self.current.take().map(|c| (c.head, c.data));
        debug_assert!(done.is_some());
        Ok(done)
    }

    /// When the transfer in progress is given up unless a part comes.
    pub fn stalls_at(&self) -> Option<Instant> {
        self.current.as_ref().map(|c| c.stalls_at)
    }

    /// Gives up the transfer in progress (stalled).
    pub fn give_up(&mut self) {
        self.current = None;
    }

    /// Whether a transfer is in progress.
    pub fn receiving(&self) -> bool {
        self.current.is_some()
    }
}

#[cfg(test)]
#[path = "snapshot_transfer_tests.rs"]
mod tests;
