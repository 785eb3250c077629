//! The Raft node as the server sees it: the lock node over the engine
//! ([`lock_node`]), what feeds it, and its decisions outside the engine:
//! the role to serve in and stuck streams ([`observe`]), leader contact
//! ([`contact`]), read confirmation ([`reads`]) and group commit
//! ([`group_commit`]).

pub mod contact;
pub mod group_commit;
mod inspect;
pub mod lock_node;
mod node_inputs;
pub mod observe;
pub mod reads;
