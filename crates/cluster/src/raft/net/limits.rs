//! How much a Raft link may carry and hold: frame caps derived from what
//! openraft and the engine really send, and the queues and concurrency of
//! one link.
//!
//! The largest request a leader sends is an `AppendEntries` of
//! [`MAX_PAYLOAD_ENTRIES`] entries (openraft's `max_payload_entries`, set
//! from here), each entry one proposal of at most
//! [`crate::raft::engine::MAX_BATCH`] commands, each command at most
//! [`MAX_TAGGED_BYTES`] encoded (a key of `MAX_KEY_LEN` bytes and three
//! full-width varints). So a follower can cap request frames at that sum
//! and a leader never exceeds it; `limits_tests` encodes the worst case to
//! check the arithmetic. Snapshot parts are far smaller
//! ([`crate::raft::net::snapshot_transfer::SNAPSHOT_PART_BYTES`] of data). Replies are
//! small and fixed in shape. The first frame, the [`LinkHello`], is two
//! node ids. A membership (in a log entry or a snapshot's head) names at
//! most [`MAX_MEMBERS`] nodes with addresses of at most [`MAX_ADDR_LEN`]
//! bytes.

use crate::raft::engine::MAX_BATCH;
use crate::raft::members::{MAX_ADDR_LEN, MAX_MEMBERS};
use crate::raft::net::rpc::{LinkHello, MAX_FAILED_REASON};
use crate::raft::net::snapshot_transfer::SNAPSHOT_PART_BYTES;

/// Entries in one `AppendEntries`, at most (openraft's default is 300).
/// Steady replication sends one entry at a time (one proposal is in
/// flight, see `RaftLockNode::handle_tick`); only a follower catching up gets full
/// batches, 16 entries per round trip, which outpaces the leader's one
/// entry per commit. It keeps the worst-case frame at about 4.4 MiB.
pub const MAX_PAYLOAD_ENTRIES: u64 = 16;

/// A u64 as a postcard varint, at most.
const MAX_VARINT: usize = 10;

/// One tagged command encoded, at most: the tag and the command.
pub const MAX_TAGGED_BYTES: usize = MAX_VARINT + baton_core::MAX_ENCODED_COMMAND;

/// An entry around its commands: log id (term, node, index), payload
/// variant, the proposal's origin and command count, with room to spare.
const ENTRY_HEAD_BYTES: usize = 64;

/// A membership encoded, at most: in a joint one, two voter sets of every
/// node, and every node with its address.
pub(crate) const MAX_MEMBERSHIP_BYTES: usize =
    2 * MAX_VARINT * (1 + MAX_MEMBERS) + MAX_VARINT + MAX_MEMBERS * (2 * MAX_VARINT + MAX_ADDR_LEN);

/// One proposal entry encoded, at most.
pub const MAX_PROPOSAL_ENTRY_BYTES: usize = ENTRY_HEAD_BYTES + MAX_BATCH * MAX_TAGGED_BYTES;

/// A request around its entries or snapshot data: id, variant, vote, log
/// ids, lengths, with room to spare.
const REQUEST_HEAD_BYTES: usize = 256;

/// The largest reply: a vote response carries two log ids and a vote, a
/// failure its reason; all far below this.
pub const MAX_REPLY_FRAME: usize = 4 * 1024;

// A failure reply, the largest by design, fits a reply frame.
const _: () = assert!(MAX_REPLY_FRAME > MAX_FAILED_REASON + REQUEST_HEAD_BYTES);

/// RPCs one inbound link handles at once; past it the link stops reading
/// its connection, which holds the peer back.
pub const MAX_IN_FLIGHT: usize = 32;

/// Bytes of requests one inbound link holds in handling at once (beyond
/// a single request of any allowed size).
pub const MAX_BYTES_IN_FLIGHT: usize = 16 * 1024 * 1024;

/// Replies queued for one inbound link's writer; a reply that finds the
/// queue full is dropped and its caller times out.
pub const REPLY_QUEUE: usize = 2 * MAX_IN_FLIGHT;

/// Requests queued for one outbound link's writer, and calls awaiting a
/// reply on it; a call past either fails at once.
pub const REQUEST_QUEUE: usize = 64;
pub const MAX_CALLS_IN_FLIGHT: usize = 256;

/// The frame caps of the Raft links of one cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameCaps {
    /// The dialler's first frame: its [`LinkHello`].
    pub hello: usize,
    /// Requests, on the dialled side.
    pub request: usize,
    /// Replies, on the dialling side.
    pub reply: usize,
}

impl FrameCaps {
    /// The caps of every Raft link: the hello is two ids, and a
    /// membership entry may outgrow a proposal only with very many members.
    pub fn for_cluster() -> FrameCaps {
        let hello = LinkHello {
            from: u64::MAX,
            to: u64::MAX,
        };
        // Encoding two integers cannot fail; the floor keeps a link
        // possible whatever happens.
        let hello = postcard::to_allocvec(&hello).map_or(32, |bytes| bytes.len());
        let entry = MAX_PROPOSAL_ENTRY_BYTES.max(ENTRY_HEAD_BYTES + MAX_MEMBERSHIP_BYTES);
        let append = REQUEST_HEAD_BYTES + MAX_PAYLOAD_ENTRIES as usize * entry;
        // A part's head carries the snapshot's membership (twice: the log
        // id's and the one stored).
        let part = REQUEST_HEAD_BYTES + MAX_MEMBERSHIP_BYTES + MAX_VARINT + SNAPSHOT_PART_BYTES;
        FrameCaps {
            hello,
            request: append.max(part),
            reply: MAX_REPLY_FRAME,
        }
    }
}

#[cfg(test)]
#[path = "limits_tests.rs"]
mod tests;
