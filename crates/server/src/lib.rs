//! The async shell around Baton's lock state machine.
//!
//! A [`Server`] (or [`run`], the whole server in one call) accepts client
//! connections from any [`Accept`] source (a TCP listener in `batond`, a
//! simulated network's in the simulations), parses their pipelined
//! requests with `baton-proto`, applies them to a `baton-core`
//! [`LockService`](baton_core::LockService) held behind one short-lived
//! mutex, and answers. One timer task serves every lease and wait deadline.
//! The cluster modes reuse the same pieces, and the data directory's: the
//! lock on it ([`DataDir`]), the state file and its writer ([`StateFile`],
//! [`Persister`]) and the token floor at a restart ([`token_floor`]).

mod accept;
pub mod auth;
mod clock;
mod config;
mod connection;
mod data_dir;
mod deadline;
mod delivery;
pub mod durable;
mod evict;
mod force_release;
pub mod inspect;
mod lease_ends;
mod listener;
mod locks;
pub mod metrics;
mod node;
mod persister;
mod request;
pub mod secret_file;
mod single;
mod sniff;
mod state_file;
pub mod sync_metrics;
mod tasks;
#[cfg(test)]
mod test_support;
mod timer;
mod timing;
pub mod tls;
pub mod token_floor;
mod watching;

pub use accept::{Accept, ServerStream};
pub use auth::{Auth, AuthFileError};
pub use baton_core::Quota;
pub use clock::Clock;
pub use config::{ServerConfig, DEFAULT_MAX_WATCHES_PER_CONNECTION};
pub use data_dir::{DataDir, DataDirError, LOCK_FILE};
pub use delivery::Mailbox;
pub use evict::EVICT_GRACE;
pub use force_release::{ForceRelease, FORCE_RELEASE_WAIT};
pub use listener::{bind_client_port, run, PeerAcceptor, Server, ServerError, NODE_VERSION};
pub use locks::SharedLocks;
pub use metrics::Metrics;
pub use node::{Events, LockNode, NodeCounters, NodeEvent, NodeStatus, Observed, Served};
pub use persister::{Persister, TakeState, PERSIST_EVERY};
pub use request::{AcquireRef, Answer, Incoming, LockRequest};
pub use single::{
    start_single, LegacySingleState, SingleNode, SinglePersister, SingleRunning, SingleStartError,
    SingleState, STATE_FILE as SINGLE_STATE_FILE,
};
pub use state_file::{StateFile, StateFileError, StateFormat};
pub use tasks::Tasks;
pub use tls::{Prefixed, ServerTls, TlsError, TlsPaths};
pub use watching::{earliest, watch_answer, NodeWatches, TOO_MANY_WATCHES};
