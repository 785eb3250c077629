//! The Raft cluster: every change of lock state is a command in a log that
//! a majority stores before any node applies it (openraft underneath).
//!
//! - [`engine`]: the lock logic, pure: the table as the log builds it, and
//!   the leader's waiters and proposals.
//! - [`log_store`], `segment`, [`snapshot_store`]: the durable log and
//!   snapshots in `--data-dir`.
//! - [`state_machine`]: openraft's state machine, forwarding to the engine.
//! - [`rpc`], [`link`], [`network`], [`inbound`]: Raft RPCs between nodes on
//!   the client port, over the authenticated peer channel; [`limits`] caps
//!   their frames and queues, [`snapshot_transfer`] sends snapshots in
//!   parts, [`bounds`] refuses what no sound peer can report.
//! - [`members`], [`identity`], [`membership`]: who may be a member and
//!   under which id, the id a data directory keeps, and the operator's
//!   online membership changes (`baton member`).
//! - [`observe`]: the role to serve in (a leader without a majority steps
//!   down), followers' replication, a dead core, from openraft's metrics.
//! - [`group_commit`], [`hold_timer`]: when the leader proposes its next
//!   entry (held briefly for the clients it just answered).
//! - [`shell`]: wires it all to the server; `node_inputs` names what the
//!   shell and the state machine feed the node.

mod append_stream;
pub mod bounds;
pub mod contact;
pub mod engine;
#[cfg(test)]
mod engine_tests;
pub mod group_commit;
pub mod hold_timer;
pub mod identity;
pub mod inbound;
mod inspect;
pub mod limits;
pub mod link;
pub mod lock_node;
pub mod log_store;
#[cfg(test)]
mod log_store_tests;
mod log_writer;
pub mod members;
pub mod membership;
pub mod network;
mod node_inputs;
pub mod observe;
pub mod reads;
pub mod rpc;
mod segment;
pub mod settings;
pub mod shell;
pub mod snapshot_store;
pub mod snapshot_transfer;
pub mod state_machine;
#[cfg(test)]
mod test_host;
pub mod types;
mod writer_policy;

pub use engine::{EngineEvent, RaftEngine, RaftRole};
pub use lock_node::RaftLockNode;
pub use settings::RaftSettings;
pub use shell::{build_raft, start, start_on, NodeIo, RaftCluster, RaftHandle, StartError};
