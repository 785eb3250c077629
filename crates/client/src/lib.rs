//! Baton's Rust client.
//!
//! A [`Client`] keeps one persistent connection per server address (two
//! when given a single address) and sends requests round-robin over the
//! usable ones, pipelined: any number of requests may be in flight on one
//! connection. A broken connection leaves the rotation at once and is
//! reconnected in the background every 3 seconds. An acquire whose
//! connection breaks is sent again elsewhere with what is left of its wait;
//! a release is retried for 5 seconds; `M` redirects are followed, and a
//! redirect to a node whose connection is down dials it at once.
//!
//! # A node that stops answering
//!
//! A frozen node (SIGSTOP, a long pause, a VM migration, a stuck disk)
//! keeps its sockets open: nothing breaks, it just does not answer. While a
//! connection has requests in flight and has heard nothing for a second,
//! the client asks the node for its status (`S`); if that goes unanswered
//! for the protocol's 3 s (4 s of silence in all, see
//! [`ClientBuilder::unresponsive_after`]) the connection is treated exactly
//! like a cut one: closed, left out of the rotation, redialled in the
//! background, its pending acquires sent to the next connection with what
//! is left of their wait, its releases and renewals retried elsewhere. A
//! connection is used once its node answered a first `S`, so a redial to a
//! node still frozen is not. A renewal waits for one node at most half the
//! time its lease has left, then goes to another, so a keep-alive lease
//! outlasts a frozen node even before the node is found out (3 s leases
//! do, given another node that serves).
//!
//! [`Error::TimedOut`] means a node said the wait ran out (`T`), nothing
//! else: a wait that runs out while no node answers ends as
//! [`Error::NoServer`], while no node serves (`M ... -`: a Raft cluster
//! without a majority) as [`Error::NotServing`], and a request a live node
//! left unanswered as [`Error::Unanswered`].
//!
//! ```no_run
//! use std::time::Duration;
//!
//! # async fn demo() -> Result<(), baton_client::Error> {
//! let client = baton_client::Client::builder()
//!     .servers(["127.0.0.1:7411"])
//!     .build()
//!     .await?;
//!
//! // Wait up to 5 s for the lock, hold it for 30 s unless renewed.
//! let mut guard = client
//!     .acquire("orders/42", Duration::from_secs(5), Duration::from_secs(30))
//!     .await?;
//! guard.keep_alive();
//! let token = guard.token(); // hand this to the protected resource
//! # let _ = token;
//! tokio::select! {
//!     () = async { /* the guarded work, writing with `token` */ } => {}
//!     lost = guard.lost() => return Err(lost),
//! }
//! guard.release().await?;
//!
//! // Before the program exits: releases whatever the client's guards still
//! // hold and waits for the answers (at most 5 s).
//! client.close().await?;
//! # Ok(())
//! # }
//! ```
//!
//! # Ending guards, and what drop does
//!
//! [`Guard::release`] releases one lock and reports the outcome.
//! [`Client::close`] releases every lock still held by one of the client's
//! guards, waits for the answers and for releases started earlier in the
//! background, then closes the connections; call it before `main` returns.
//!
//! Dropping a [`Guard`] only *starts* a release, as a background task, and
//! returns at once. It does not wait, and it does not survive the runtime:
//! a guard dropped at the end of `main` (or just before the runtime shuts
//! down) is never released, and its key stays held for the rest of its
//! lease. Without a tokio runtime a drop sends nothing at all. Dropping the
//! [`Client`] releases nothing either. `close` is what makes an exit clean.
//!
//! So a program that exits (or crashes, or is killed) without `close` keeps
//! every lock it held until that lock's lease ends: other clients wait
//! that long for its keys. The client warns once (a `tracing` warning)
//! when the program drops its last [`Client`] handle while guards still
//! hold locks, and when a guard is dropped outside a tokio runtime.
//!
//! Tokens fence the resource: see [`Fence`] for the check the resource
//! makes so that a holder whose lease lapsed cannot do harm.
//!
//! # Beyond the mutex (protocol 1.2)
//!
//! - Semaphores and shared locks: [`Acquire::permits`] and
//!   [`Acquire::shared`] on the same [`Client::acquire`]; each grant is a
//!   [`Guard`] with its own token.
//! - Holder values: [`Acquire::value`], then [`Guard::set_value`];
//!   [`Client::inspect`] reports every holder with its value
//!   ([`KeyStateExt`] reads holders, permits and mode whether the node sent
//!   the 1.2 detail or the key is plain).
//! - Watches: [`Client::watch`], a [`Stream`](futures_util::Stream) of the
//!   key's states, one per change of its holders or their values.
//! - Leader election: [`Client::election`] ([`Election::campaign`],
//!   [`Leadership::proclaim`], [`Election::leader`], [`Election::observe`],
//!   [`Leadership::resign`]).
//!
//! A node whose `S` answer does not say `protocol=1.2` is not sent these
//! requests ([`Error::Unsupported`]).

#![warn(missing_docs)]

mod acquire;
mod acquire_attempt;
mod auth;
mod builder;
mod client;
mod connection;
mod duration;
mod election;
mod error;
mod fence;
mod guard;
mod key_state;
mod lifecycle;
mod liveness;
mod pool;
mod protocol;
mod slot;
mod tls;
mod watch;

pub use acquire::Acquire;
pub use baton_core::{
    HolderState, HolderValue, Key, KeyDetail, KeyState, LiveGrant, LockMode, StateTag, Token,
    ValueError,
};
pub use baton_proto::{Mode, Role, StatusReport};
pub use builder::ClientBuilder;
pub use client::{Client, NodeStatus};
pub use election::{Election, Leader, Leadership, Observe};
pub use error::{Error, Result};
pub use fence::{Fence, FenceError};
pub use guard::Guard;
pub use key_state::KeyStateExt;
pub use tls::TlsConfig;
pub use watch::Watch;
