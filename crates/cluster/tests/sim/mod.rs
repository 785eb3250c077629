//! A deterministic harness over the pure priority engine: simulated clock,
//! seeded network faults, pauses, crashes and clients, with the cluster's
//! guarantees checked after every simulated millisecond.

pub mod client;
pub mod net;
pub mod rng;
pub mod world;
