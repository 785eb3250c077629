//! What the nodes of a priority cluster tell each other.
//!
//! Every message the engine emits postcard-encodes to at most
//! [`MAX_MESSAGE_BYTES`]: a table travels in pieces ([`TablePart`]) and a
//! batch of commands is cut by encoded size, so the shell can cap its
//! frames at exactly that and close a link that sends more.

use baton_core::{EncodedCommands, SnapshotLock, Token};
use serde::{Deserialize, Serialize};

/// The largest postcard encoding of one [`PriorityMessage`] the engine
/// emits: the frame cap of the peer links. A megabyte holds thousands of
/// locks of the longest keys (about 270 bytes each, encoded), so one
/// frame never waits long behind another, and a table of any size crosses
/// in pieces.
pub const MAX_MESSAGE_BYTES: usize = 1 << 20;

/// The most locks a table sent in pieces may hold: a receiver drops a
/// table that grows past it (one in progress per peer, so this bounds what
/// reassembly holds), and an active grants no new key past it, so every
/// table it has can cross. 16.7 million locks is gigabytes of table on
/// every node, far more than a lock service is meant to hold.
pub const MAX_TABLE_LOCKS: usize = 1 << 24;

/// Identifies one active period: the token floor the active took when it
/// promoted. A standby accepts commands only for the term it holds.
pub type Term = u64;

/// A node's position in the peer list, which is also its priority
/// (0 is the highest).
pub type NodeIndex = usize;

/// How a node describes itself in its heartbeats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PeerRole {
    Active,
    Standby,
    /// An active that is passing the role to a successor.
    HandingOff,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Heartbeat {
    pub role: PeerRole,
    /// The term of the state the node holds (its own, if active).
    pub term: Term,
    /// Commands of that term the node has applied.
    pub seq: u64,
    pub last_token: Token,
    /// The active this node replicates from, if a standby; the successor,
    /// if handing off.
    pub following: Option<NodeIndex>,
}

/// One piece of a lock table sent in several messages. The pieces of one
/// table carry the same `table` number and count `piece` up from 0 in
/// order; the table is complete with the piece marked `last`. A receiver
/// that misses a piece drops the whole table (links deliver in order, so
/// a gap means a loss).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TablePart {
    /// Which table of the sender's this piece belongs to: the sender
    /// numbers the tables it sends, from a start taken from its wall
    /// clock, so that a piece of an earlier process never fits a table of
    /// a later one.
    pub table: u64,
    pub piece: u32,
    pub last: bool,
    /// The table's last token (the same in every piece).
    pub last_token: Token,
    /// Some of the table's locks, in the table's order.
    pub locks: Vec<SnapshotLock>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum PriorityMessage {
    Heartbeat(Heartbeat),
    /// A standby asks the active for a full copy.
    SyncRequest,
    /// A piece of the active's full table; once the last one arrived,
    /// `Commands` continue from `seq`.
    SnapshotPart {
        term: Term,
        seq: u64,
        part: TablePart,
    },
    /// Commands the active applied, in order, numbered from `first_seq`;
    /// kept encoded, as the active journaled them and a receiver checked
    /// them (the encoding of a `Vec<Command>`).
    Commands {
        term: Term,
        first_seq: u64,
        commands: EncodedCommands,
    },
    /// A piece of the active's final state; with the last one, the active
    /// role (the successor takes it only once the whole table arrived).
    HandoffPart {
        part: TablePart,
    },
    /// The successor serves the table it was handed (and holds the role).
    HandoffTaken,
    /// The successor cannot take the role now: the sender serves on.
    HandoffRefused,
}

/// The first frame of a peer connection: who dials, with which peer list
/// (a node with another list is misconfigured and is refused).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkHello {
    pub from: NodeIndex,
    pub peers: Vec<String>,
}

/// What the dialled node writes on a link it will not take, before it
/// closes it: the only non-empty frame it ever writes on a link (the
/// others are empty signs of life), so the dialler knows the node answers
/// and why it refuses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum LinkRefusal {
    /// The dialler's peer list (or its place in it) is not this node's;
    /// `peers` is this node's list, for the dialler's log.
    PeerList { peers: Vec<String> },
}

/// The length of `value`'s postcard encoding (0 if it does not encode,
/// which the engine's own messages always do).
pub fn encoded_len<T: Serialize>(value: &T) -> usize {
    postcard::serialize_with_flavor(value, postcard::ser_flavors::Size::default()).unwrap_or(0)
}
