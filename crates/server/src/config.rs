//! What a node is told at start-up.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use baton_core::Quota;
use baton_proto::Limits;

use crate::auth::Auth;
use crate::tls::ServerTls;

/// Docs/protocol.md's default cap on one connection's pending watches: a
/// client watching many keys fits, one connection cannot take them all.
pub const DEFAULT_MAX_WATCHES_PER_CONNECTION: usize = 1_000;

/// Settings of a single node. The defaults are the protocol's defaults.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Where clients connect. Port 0 picks a free port (see `Server::local_addr`).
    pub listen: SocketAddr,
    /// Largest wait and lease a request may ask for.
    pub limits: Limits,
    /// Connections served at once; one more is refused with an `E` line.
    pub max_connections: usize,
    /// Acquires queued at once per connection; one more is answered `E`.
    pub max_pending: usize,
    /// Watches pending at once per connection; one more is answered
    /// `E W <key> too many watches`.
    pub max_watches_per_connection: usize,
    /// Grants held, acquires queued and watches pending at once over every
    /// connection; past them an acquire is answered `E A <key> too many
    /// locks` or `too many waiters`, a watch `E W <key> too many watches`.
    pub quota: Quota,
    /// The address the node is known by (`self=` in `S`, the cluster's peer
    /// list) when it differs from the bound one, e.g. when bound to 0.0.0.0.
    pub advertise: Option<String>,
    /// The users of `--auth-file`: with them every connection must
    /// authenticate (`U`) and is limited to its user's keys.
    pub auth: Option<Arc<Auth>>,
    /// With it the client port speaks TLS only (cluster peers still come in
    /// with their own hello); reloadable.
    pub tls: Option<Arc<ServerTls>>,
    /// A connection whose line has been unfinished this long (its first
    /// line: since connect) is closed. `None`: never.
    pub line_timeout: Option<Duration>,
    /// A connection with nothing pending that sent nothing this long is
    /// closed. `None` (the default): never.
    pub idle_timeout: Option<Duration>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 7411)),
            limits: Limits::default(),
            max_connections: 10_000,
            max_pending: 10_000,
            max_watches_per_connection: DEFAULT_MAX_WATCHES_PER_CONNECTION,
            quota: Quota::default(),
            advertise: None,
            auth: None,
            tls: None,
            line_timeout: Some(Duration::from_secs(10)),
            idle_timeout: None,
        }
    }
}
