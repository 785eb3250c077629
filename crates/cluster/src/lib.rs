//! Baton's cluster engines, over the lock state machine of `baton-core`.
//!
//! Each engine is a pure core (peer messages and client requests in,
//! peer messages and answers out, time passed in) that the async shell in
//! the same module drives over the node's single port.

pub mod peer;
pub mod priority;
pub mod raft;
