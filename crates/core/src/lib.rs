//! The lock state machine of Baton, pure and deterministic.
//!
//! No I/O, no clock reads: time arrives as [`Millis`], milliseconds since
//! an epoch the caller chooses. The same crate drives the single node, both
//! cluster engines and the simulations.
//!
//! - [`LockTable`] is the replicated state: who holds which key, with which
//!   fencing token, until when. It changes only through [`Command`]s, so
//!   replicas applying the same commands agree.
//! - [`WaitQueues`] are the FIFO queues of acquires waiting for a held key,
//!   local to the node that serves clients.
//! - [`LockRules`] are the lock rules, once for every engine: first come,
//!   first served, a freed key handed to the oldest waiter still in time,
//!   timeouts before expiries, a grant nobody holds given back, and the
//!   [`Quota`] on grants and waiters. It owns the queues and answers in
//!   commands over a table its user owns.
//! - [`LockService`] applies the rules' answers at once on the serving node
//!   (single node, priority cluster) and journals the table's commands for
//!   replication; the Raft engine proposes them to its log instead.
//! - [`invariant`]: every state machine's `validate()`, run after each
//!   change in debug builds.

mod byte_string;
mod encoded;
mod event;
mod grants;
mod holder_value;
pub mod invariant;
mod key;
mod lock_mode;
mod log_gate;
mod query;
mod quota;
mod rules;
mod service;
mod state_tag;
mod table;
mod waiters;
mod watches;

pub use byte_string::forbidden_byte;
pub use encoded::{DecodeError, EncodedCommands};
pub use event::{Change, Event, NodeIndex, NotServing};
pub use holder_value::{validate as validate_value, HolderValue, ValueError, MAX_VALUE_LEN};
pub use invariant::Broken;
pub use key::{validate as validate_key, Key, KeyError, MAX_KEY_LEN};
pub use lock_mode::{Acquire, AcquireOptions, LockMode, MAX_PERMITS};
pub use log_gate::{LogGate, Moment, MAX_SOURCES};
pub use query::{HolderState, KeyDetail, KeyState, LiveGrant, MAX_LISTED_HOLDERS};
pub use quota::{Quota, Refusal};
pub use rules::{Handover, LockRules};
pub use service::{AcquireOutcome, LockService};
pub use state_tag::{StateTag, TagHolder, MAX_TAG_LEN};
pub use table::{
    Command, Holder, KeyGrants, LegacySnapshotLock, LegacyTableSnapshot, LockTable, Outcome,
    SnapshotLock, TableSnapshot, MAX_ENCODED_COMMAND, TABLE_FORMAT_2,
};
pub use waiters::{WaitQueues, Waiter, WaiterId};
pub use watches::{TooManyWatches, Watch, WatchId, Watches};

/// A fencing token: every grant gets one, greater than every token before.
/// Zero is never issued.
pub type Token = u64;

/// A point in time, in milliseconds since an epoch the caller chooses.
pub type Millis = u64;

/// The hash maps of the lock state. Every request hashes its key several
/// times, and SipHash was the largest single cost in a profile of the
/// node; foldhash is several times faster and still seeded per process, so
/// clients cannot aim collisions at a node they cannot read the seed of.
pub type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
/// The set counterpart of [`FastMap`].
pub type FastSet<T> = std::collections::HashSet<T, foldhash::fast::RandomState>;
