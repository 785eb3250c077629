//! The Raft type configuration of Baton's lock log: what one log entry
//! carries, and the openraft type aliases the rest of the module uses.

use std::fmt;

use baton_core::Command;
use serde::{Deserialize, Serialize};

use super::node::lock_node::RaftLockNode;
use super::storage::state_machine::LockStateMachine;
use baton_server::SharedLocks;

/// A node's id: its position in `--peers`.
pub type NodeId = u64;

/// One lock command in a log entry, with the tag its proposer uses to find
/// the request waiting for its outcome.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tagged {
    pub tag: u64,
    pub command: Command,
}

/// The application data of one log entry: a batch of lock commands from one
/// leader, applied in order. Many commands share an entry (and its fsync)
/// under load.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Proposal {
    /// Names the process that proposed the entry. A restarted node gets a
    /// new one, so tags of entries proposed before its restart never match
    /// its own pending requests.
    pub origin: u64,
    pub commands: Vec<Tagged>,
}

impl fmt::Display for Proposal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "proposal from {:x} with {} commands",
            self.origin,
            self.commands.len()
        )
    }
}

openraft::declare_raft_types!(
    /// Baton's Raft types: lock command batches in, nothing back (outcomes
    /// reach clients from the state machine itself).
    pub TypeConfig:
        D = Proposal,
        R = (),
        NodeId = NodeId,
        Node = openraft::BasicNode,
);

/// The openraft node over a lock table held by `H`.
pub type RaftOf<H> = openraft::Raft<TypeConfig, LockStateMachine<H>>;
/// The openraft node of a server.
pub type Raft = RaftOf<SharedLocks<RaftLockNode>>;

pub type Entry = openraft::type_config::alias::EntryOf<TypeConfig>;
pub type LogId = openraft::type_config::alias::LogIdOf<TypeConfig>;
pub type Vote = openraft::type_config::alias::VoteOf<TypeConfig>;
pub type StoredMembership = openraft::type_config::alias::StoredMembershipOf<TypeConfig>;
pub type SnapshotMeta = openraft::type_config::alias::SnapshotMetaOf<TypeConfig>;
pub type Snapshot = openraft::type_config::alias::SnapshotOf<TypeConfig, SnapshotData>;
/// A snapshot travels and rests as one buffer: the lock table is small.
pub type SnapshotData = Vec<u8>;

/// The members a peer list describes: node `i` at the list's `i`th address.
pub fn members_of(peers: &[String]) -> std::collections::BTreeMap<NodeId, openraft::BasicNode> {
    peers
        .iter()
        .enumerate()
        .map(|(i, addr)| (i as NodeId, openraft::BasicNode { addr: addr.clone() }))
        .collect()
}
