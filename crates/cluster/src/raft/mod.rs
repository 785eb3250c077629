//! The Raft cluster: every change of lock state is a command in a log that
//! a majority stores before any node applies it (openraft underneath).
//!
//! - [`engine`]: the lock logic, pure: the table as the log builds it, and
//!   the leader's waiters and proposals.
//! - [`node`]: the lock node the server calls, and its decisions outside
//!   the engine (role, stuck streams, leader contact, reads, group commit).
//! - [`shell`]: wires it all to openraft and the server.
//! - [`storage`]: the durable log, snapshots and identity in `--data-dir`.
//! - [`net`]: Raft RPCs between nodes over the authenticated peer channel.
//! - [`members`], [`membership`]: who may be a member and under which id,
//!   and the operator's online membership changes (`baton member`).
//! - [`removal`]: whether this node was removed from the membership.
//! - [`types`]: the type configuration, and the `Raft`/`RaftOf` aliases.

pub mod engine;
pub mod members;
pub mod membership;
pub mod net;
pub mod node;
pub mod removal;
pub mod settings;
pub mod shell;
pub mod storage;
#[cfg(test)]
mod test_host;
pub mod types;

pub use engine::{EngineEvent, RaftEngine, RaftRole};
pub use node::lock_node::RaftLockNode;
pub use settings::RaftSettings;
pub use shell::{build_raft, start, start_on, NodeIo, RaftCluster, RaftHandle, StartError};
