//! The async shell around Baton's lock state machine.
//!
//! A [`Server`] accepts client connections, parses their pipelined
//! requests with `baton-proto`, applies them to a `baton-core`
//! [`LockService`](baton_core::LockService) held behind one short-lived
//! mutex, and answers. One timer task serves every lease and wait deadline.
//! The cluster modes reuse the same pieces.

mod clock;
mod config;
mod connection;
mod delivery;
mod listener;
mod locks;
mod node;
mod timer;

pub use clock::Clock;
pub use config::ServerConfig;
pub use delivery::Mailbox;
pub use listener::{PeerAcceptor, Server, ServerError};
pub use locks::{Events, SharedLocks};
pub use node::{LockNode, NodeEvent, NodeStatus, Served, SingleNode};
