//! The errors a caller of the client can branch on.

use std::time::Duration;

use baton_core::{Key, KeyError, Token, ValueError};

/// Everything that can go wrong in a client call.
///
/// The variants map to decisions a caller makes: retry later
/// ([`Error::TimedOut`], [`Error::NoServer`], [`Error::NotServing`],
/// [`Error::Unanswered`]), fix the request
/// ([`Error::Rejected`], [`Error::InvalidKey`], [`Error::InvalidDuration`],
/// [`Error::InvalidOption`], [`Error::InvalidValue`],
/// [`Error::InvalidAddress`]),
/// or stop touching the protected resource ([`Error::LeaseLost`],
/// [`Error::NotHeld`]).
///
/// ```no_run
/// # async fn demo(client: baton_client::Client) -> baton_client::Result<()> {
/// # use std::time::Duration;
/// match client.acquire("orders/42", Duration::from_secs(1), Duration::from_secs(30)).await {
///     Ok(guard) => guard.release().await?,
///     Err(baton_client::Error::TimedOut { key }) => println!("{key} is busy"),
///     Err(baton_client::Error::NoServer) => println!("retry later"),
///     Err(other) => return Err(other),
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The node said the wait ran out (`T`): the lock was not granted
    /// (for [`Client::try_acquire`](crate::Client::try_acquire): it is
    /// held). Only a node's `T` gives this error, or a wait that ran out
    /// while the acquire waited in the client, unsent, behind another
    /// acquire of its key in flight on its connection: a wait that ran out
    /// while no node answered is [`Error::NoServer`],
    /// [`Error::NotServing`] or [`Error::Unanswered`].
    #[error("timed out waiting for {key}")]
    TimedOut {
        /// The key asked for.
        key: Key,
    },
    /// No node could be reached on any connection, or every node reached
    /// stopped answering (a frozen process is treated like a cut
    /// connection: see [`ClientBuilder::unresponsive_after`](crate::ClientBuilder::unresponsive_after)).
    #[error("no server reachable")]
    NoServer,
    /// The nodes reached answered that none of them serves now
    /// (`M <op> <key> -`), for as long as the request could wait: a Raft
    /// cluster without a majority, or a priority cluster between two
    /// active nodes. Nothing was granted or changed; retry later.
    #[error(
        "no node is serving: none of the nodes reached is a leader or active node \
         (no Raft majority, or no active node)"
    )]
    NotServing,
    /// A node answered `E`: the request is malformed or beyond a limit.
    #[error("rejected by the node: {reason}")]
    Rejected {
        /// The node's words after `E`.
        reason: String,
    },
    /// A renewal found that the grant no longer exists (`N K`): another
    /// holder may own the lock now.
    #[error("lease on {key} (token {token}) was lost")]
    LeaseLost {
        /// The lock.
        key: Key,
        /// The grant's token.
        token: Token,
    },
    /// A release found no live grant with that token (`N R`): it was already
    /// released or its lease expired.
    #[error("{key} is not held with token {token}")]
    NotHeld {
        /// The lock.
        key: Key,
        /// The token given.
        token: Token,
    },
    /// A node took the request but did not answer in time.
    #[error("no answer from the node within {} ms", .after.as_millis())]
    Unanswered {
        /// How long the client waited.
        after: Duration,
    },
    /// The key breaks the protocol's key rules; nothing was sent.
    #[error("invalid key: {0}")]
    InvalidKey(#[from] KeyError),
    /// A wait or lease the protocol cannot carry; nothing was sent.
    #[error("invalid {what}: {why}")]
    InvalidDuration {
        /// `wait` or `lease`.
        what: &'static str,
        /// What is wrong with it.
        why: &'static str,
    },
    /// An acquire option the protocol cannot carry (permits out of range,
    /// shared with permits); nothing was sent.
    #[error("invalid acquire option: {why}")]
    InvalidOption {
        /// What is wrong with it.
        why: String,
    },
    /// A holder value breaks the protocol's value rules (1 to 128 bytes,
    /// no space or control byte, not `-`); nothing was sent.
    #[error("invalid value: {0}")]
    InvalidValue(#[from] ValueError),
    /// The node speaks protocol 1.1 (its `S` answer says so), and the
    /// request needs 1.2: a watch, a value, an acquire with permits,
    /// shared or a value. Nothing was sent; no other usable node speaks 1.2.
    #[error("{addr} speaks protocol 1.1: {what} needs protocol 1.2")]
    Unsupported {
        /// The node's address.
        addr: String,
        /// What needed 1.2.
        what: &'static str,
    },
    /// The builder was given no server address.
    #[error("no server address given")]
    NoAddress,
    /// A server address given to the builder is not `host:port` (an IP
    /// address, `[v6]` in brackets, or a DNS name, and a port); nothing was
    /// dialled.
    #[error("invalid server address: {why}")]
    InvalidAddress {
        /// The address as given.
        addr: String,
        /// What is wrong with it.
        why: String,
    },
    /// The client was closed with [`Client::close`](crate::Client::close):
    /// nothing was sent, or (for an acquire granted as the client closed)
    /// the grant was given back. From [`Guard::release`](crate::Guard::release):
    /// `close` already released this lock.
    #[error("the client was closed")]
    Closed,
    /// The TLS side of the connection to `addr` failed: the node speaks TLS
    /// and the client does not (or the reverse), or a certificate does not
    /// verify. Retrying will not help; the configuration must change.
    #[error("TLS with {addr}: {why}")]
    Tls {
        /// The node's address.
        addr: String,
        /// What failed.
        why: String,
    },
    /// The TLS material given to the builder is unusable (a file that
    /// cannot be read, PEM without a certificate, a key that does not fit).
    #[error("TLS setup: {why}")]
    TlsConfig {
        /// What is wrong, naming the file.
        why: String,
    },
    /// A node answered something that does not fit the request.
    #[error("unexpected answer from the node: {0}")]
    Unexpected(String),
    /// The node refused the credentials (`E U <user> authentication
    /// failed`): a wrong user name or secret. From
    /// [`ClientBuilder::build`](crate::ClientBuilder::build).
    #[error("authentication failed: wrong user name or secret")]
    AuthenticationFailed,
    /// Credentials were given, but the node has no users (`E U <user>
    /// authentication is not enabled`): they would protect nothing.
    #[error("authentication is not enabled on the node, yet credentials were given")]
    AuthenticationNotEnabled,
    /// The node requires authentication and the client has no credentials
    /// (or the node no longer knows its user): see
    /// [`ClientBuilder::credentials`](crate::ClientBuilder::credentials).
    /// From [`ClientBuilder::build`](crate::ClientBuilder::build) when every
    /// node reached requires it.
    #[error("the node requires authentication: give a user name and secret")]
    AuthenticationRequired,
    /// The user may not use this key (`E <op> <key> permission denied`);
    /// nothing changed on the node.
    #[error("permission denied on {key}")]
    PermissionDenied {
        /// The key refused.
        key: Key,
    },
    /// The user name or secret given to the builder breaks the protocol's
    /// rules; nothing was sent.
    #[error("invalid credentials: {why}")]
    InvalidCredentials {
        /// The rule broken.
        why: String,
    },
}

/// Shorthand for results of client calls.
///
/// ```no_run
/// async fn token_of(client: &baton_client::Client) -> baton_client::Result<u64> {
///     let guard = client.acquire("k", std::time::Duration::ZERO, std::time::Duration::from_secs(30)).await?;
///     Ok(guard.into_token())
/// }
/// ```
pub type Result<T, E = Error> = std::result::Result<T, E>;
