//! The priority cluster: one active node serves, standbys replicate it
//! asynchronously, the peer list's order decides who serves. No quorum.

mod engine;
mod lock_node;
mod messages;
mod shell;
mod state_file;
#[cfg(test)]
mod tests;
mod token_floor;

pub use engine::{
    wall_floor, ClusterEvent, NodeRole, NotServing, PersistedState, PriorityConfig, PriorityNode,
    TOKEN_MARGIN,
};
pub use lock_node::PriorityLockNode;
pub use messages::{Heartbeat, LinkHello, NodeIndex, PeerRole, PriorityMessage, Term};
pub use shell::{start, PriorityCluster, PriorityHandle, PrioritySettings, PriorityStartError};
pub use state_file::{StateFile, StateFileError};
pub use token_floor::{TokenBlocks, BLOCK};
