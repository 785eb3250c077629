//! The Raft node, as one sans-IO state machine: the lock node the server
//! calls ([`lock_node`]), over the pure engine, with its decisions outside
//! the engine as parts: the role to serve in and a stuck follower
//! ([`observe`]), leader contact ([`contact`]), read confirmation
//! ([`reads`]) and group commit ([`group_commit`]). Named `handle_*`
//! inputs, each with the time (`inputs`), and [`RaftCommand`]s out, which
//! the shell's one loop runs against openraft (see `shell`).

mod command;
pub mod contact;
pub mod group_commit;
mod inputs;
mod inspect;
pub mod lock_node;
pub mod observe;
pub mod reads;
#[cfg(test)]
mod tests;

pub use command::{NodeTimes, RaftCommand};
