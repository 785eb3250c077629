//! What the nodes of a priority cluster tell each other.

use baton_core::{Command, TableSnapshot, Token};
use serde::{Deserialize, Serialize};

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

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum PriorityMessage {
    Heartbeat(Heartbeat),
    /// A standby asks the active for a full copy.
    SyncRequest,
    /// The active's full table, after which `Commands` continue from `seq`.
    Snapshot {
        term: Term,
        seq: u64,
        table: TableSnapshot,
    },
    /// Commands the active applied, in order, numbered from `first_seq`.
    Commands {
        term: Term,
        first_seq: u64,
        commands: Vec<Command>,
    },
    /// The active's final state, and with it the active role.
    Handoff {
        table: TableSnapshot,
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
