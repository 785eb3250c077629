//! The priority cluster: one active node serves, standbys replicate it
//! asynchronously, the peer list's order decides who serves. No quorum.

#[cfg(any(test, feature = "test-support"))]
pub mod driver;
mod engine;
mod inspect;
mod link_frames;
mod lock_node;
mod messages;
mod shell;
mod state_file;
#[cfg(test)]
mod tests;
mod token_floor;
mod wire;

pub use engine::{
    wall_floor, Barred, Broken, HandoffCounts, Implausible, LinkRefused, NodeRole, PersistedState,
    PriorityConfig, PriorityNode, CLOCK_ALLOWANCE_MS, REFUSAL_HOLD_MIN_MS, REFUSAL_LOG_EVERY_MS,
    TOKEN_MARGIN,
};
pub use lock_node::{HandoffStep, PriorityLockNode, RoleView};
pub use messages::{
    encoded_len, Heartbeat, LinkHello, LinkRefusal, NodeIndex, PeerRole, PriorityMessage,
    TablePart, Term, MAX_MESSAGE_BYTES, MAX_TABLE_LOCKS,
};
pub use shell::{start, PriorityCluster, PriorityHandle, PrioritySettings, PriorityStartError};
pub use state_file::{load_checked, StateFile, StateFileError};
pub use token_floor::{TokenBlocks, BLOCK};
