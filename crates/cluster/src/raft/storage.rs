//! What a Raft node keeps in `--data-dir`: the durable log ([`log_store`]
//! over segment files written by one thread), the snapshots
//! ([`snapshot_store`]), the id the directory keeps ([`identity`]), and
//! openraft's state machine forwarding to the engine ([`state_machine`]).

pub mod identity;
pub mod log_store;
#[cfg(test)]
mod log_store_tests;
mod log_writer;
mod segment;
pub mod snapshot_store;
pub mod state_machine;
mod writer_policy;
