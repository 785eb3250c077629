//! The lock state machine of Baton, pure and deterministic.
//!
//! No I/O, no clock reads: time arrives as [`Millis`], milliseconds since
//! an epoch the caller chooses. The same crate drives the single node, both
//! cluster engines and the simulations.

mod key;

pub use key::{validate as validate_key, Key, KeyError, MAX_KEY_LEN};

/// A fencing token: every grant gets one, greater than every token before.
/// Zero is never issued.
pub type Token = u64;

/// A point in time, in milliseconds since an epoch the caller chooses.
pub type Millis = u64;
