//! Baton's Rust client. A [`Client`] keeps pipelined connections to the
//! nodes, follows redirects and fails over: a broken connection, or a
//! frozen node (see [`ClientBuilder::unresponsive_after`]), leaves the
//! rotation, and its acquires go elsewhere with what is left of their
//! wait. [`Client::acquire`] returns a [`Guard`] whose token the protected
//! resource checks with a [`Fence`]; protocol 1.2 adds
//! [`Acquire::permits`], [`Acquire::shared`], [`Acquire::value`],
//! [`Client::watch`] and [`Client::election`].
//!
//! Call [`Client::close`] before the program exits: dropping a [`Guard`]
//! only starts a release in the background, which does not outlive the
//! runtime, so a lock `close` did not release stays held until its lease
//! ends. Failover, frozen nodes, what each [`Error`] means and what drop
//! does are told in full in the crate's README (`crates/client/README.md`).
//!
//! ```no_run
//! use std::time::Duration;
//!
//! # async fn demo() -> Result<(), baton_client::Error> {
//! let client = baton_client::Client::builder()
//!     .servers(["127.0.0.1:7411"])
//!     .build()
//!     .await?;
//! // Wait up to 5 s for the lock, hold it for 30 s unless renewed.
//! let mut guard = client
//!     .acquire("orders/42", Duration::from_secs(5), Duration::from_secs(30))
//!     .await?;
//! guard.keep_alive();
//! tokio::select! {
//!     () = async { /* the guarded work, writing with guard.token() */ } => {}
//!     lost = guard.lost() => return Err(lost),
//! }
//! guard.release().await?;
//! client.close().await?;
//! # Ok(())
//! # }
//! ```

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
mod one_in_flight;
mod pool;
mod protocol;
mod slot;
mod tls;
mod turns;
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
