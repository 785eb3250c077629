//! The node itself: accepts within the connection limit from whatever
//! listener it is given, runs a task per connection and the timer, and
//! shuts down cleanly. [`run`] is the whole server in one call; [`Server`]
//! lets a cluster shell bind first and share the node's state and tasks.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use baton_proto::{Role, StatusReport, PROTOCOL_VERSION};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

use crate::accept::{Accept, ServerStream};
use crate::clock::Clock;
use crate::config::ServerConfig;
use crate::connection::Connection;
use crate::evict::{Connections, EVICT_GRACE};
use crate::locks::SharedLocks;
use crate::node::{LockNode, NodeStatus};
use crate::single::SingleNode;
use crate::tasks::Tasks;
use crate::timer;

/// How long a stopping node waits for its tasks to end.
const STOP_WAIT: Duration = Duration::from_secs(5);

/// The client port's accept queue. Tokio's default, 1,024, overflows
/// under a burst of connections (2,000 peer hellos at once overflowed it
/// some 4,000 times), and a connection the kernel drops there waits out
/// TCP's doubling retransmission before the node even sees it: seconds
/// in which its handshake or line timeout has not started. Linux caps
/// the queue at `net.core.somaxconn` (4,096 by default since 5.4).
const LISTEN_BACKLOG: u32 = 4096;

/// Binds the client port at `addr`, with an accept queue of 4,096
/// connections (`LISTEN_BACKLOG`).
pub fn bind_client_port(addr: SocketAddr) -> Result<TcpListener, ServerError> {
    let bind = || {
        let socket = if addr.is_ipv4() {
            tokio::net::TcpSocket::new_v4()?
        } else {
            tokio::net::TcpSocket::new_v6()?
        };
        // As `TcpListener::bind` does: a restarted node rebinds at once
        // over its old connections in TIME_WAIT.
        #[cfg(unix)]
        socket.set_reuseaddr(true)?;
        socket.bind(addr)?;
        socket.listen(LISTEN_BACKLOG)
    };
    bind().map_err(|source| ServerError::Bind { addr, source })
}

/// Serves `node` on `listener` with `clock` until `shutdown` completes,
/// then stops every task of the node and returns. `batond` calls this with
/// a TCP listener; the simulations with a simulated network's.
pub async fn run<N: LockNode, L: Accept>(
    listener: L,
    clock: Clock,
    node: N,
    config: ServerConfig,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServerError> {
    let locks = Arc::new(SharedLocks::new(node, clock));
    Server::on(listener, config, locks, None, Tasks::new())?
        .run(shutdown)
        .await;
    Ok(())
}

/// Why a node could not start or keep serving.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("the listener has no address: {0}")]
    Unbound(std::io::Error),
}

/// Takes the connections of the node's cluster peers, which arrive on the
/// client port and open with a hello line no client request starts with.
pub trait PeerAcceptor<S = TcpStream>: Send + Sync + 'static {
    /// The first bytes of every peer connection.
    fn hello(&self) -> &'static [u8];
    /// Takes a peer connection; `already_read` starts with the hello.
    fn accept(&self, stream: S, already_read: bytes::BytesMut);
}

/// The node's release, as `S` and `/health` show it: the workspace's
/// version, which batond shares.
pub const NODE_VERSION: &str = env!("CARGO_PKG_VERSION");

/// What every connection needs to know about the node it belongs to.
pub(crate) struct NodeInfo<S> {
    pub(crate) config: ServerConfig,
    pub(crate) self_addr: String,
    pub(crate) peer_acceptor: Option<Arc<dyn PeerAcceptor<S>>>,
    /// `http=` in `S`: the HTTP endpoint's address, once it is bound
    /// (after the client port, hence set later than the rest).
    pub(crate) http_addr: std::sync::OnceLock<String>,
}

impl<S> std::fmt::Debug for NodeInfo<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeInfo")
            .field("config", &self.config)
            .field("self_addr", &self.self_addr)
            .finish_non_exhaustive()
    }
}

impl<S> NodeInfo<S> {
    pub(crate) fn status(&self, status: NodeStatus) -> StatusReport {
        let serving = matches!(status.role, Role::Single | Role::Active | Role::Leader);
        StatusReport {
            role: status.role,
            mode: status.mode,
            self_addr: self.self_addr.clone(),
            active: if serving {
                Some(self.self_addr.clone())
            } else {
                status.active
            },
            token: status.token,
            locks: status.locks,
            waiters: status.waiters,
            extra: self.with_http(status.extra),
        }
    }

    /// `extra` with `http=<addr>` when the endpoint is known, then
    /// `version=` last: extra fields at the end, which parsers of the
    /// protocol skip.
    fn with_http(&self, mut extra: Vec<(String, String)>) -> Vec<(String, String)> {
        if let Some(addr) = self.http_addr.get() {
            extra.push(("http".to_owned(), addr.clone()));
        }
        extra.push(("protocol".to_owned(), PROTOCOL_VERSION.to_owned()));
        extra.push(("version".to_owned(), NODE_VERSION.to_owned()));
        extra
    }
}

/// A Baton node, bound and ready to serve.
pub struct Server<N = SingleNode, L: Accept = TcpListener> {
    listener: L,
    node: Arc<NodeInfo<L::Stream>>,
    locks: Arc<SharedLocks<N>>,
    tasks: Tasks,
}

impl<N: std::fmt::Debug, L: Accept + std::fmt::Debug> std::fmt::Debug for Server<N, L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("listener", &self.listener)
            .field("node", &self.node)
            .field("locks", &self.locks)
            .finish_non_exhaustive()
    }
}

impl Server<SingleNode> {
    /// A single node.
    pub async fn bind(config: ServerConfig) -> Result<Server<SingleNode>, ServerError> {
        Server::bind_node(config, SingleNode::new()).await
    }
}

impl<N: LockNode> Server<N> {
    /// A node whose lock logic is `node` (a cluster engine, say).
    pub async fn bind_node(config: ServerConfig, node: N) -> Result<Server<N>, ServerError> {
        let locks = Arc::new(SharedLocks::new(node, Clock::new()));
        Server::bind_shared(config, locks, None).await
    }

    /// A node whose state the caller shares with others (a cluster shell);
    /// `peers` takes the connections of its cluster peers.
    pub async fn bind_shared(
        config: ServerConfig,
        locks: Arc<SharedLocks<N>>,
        peers: Option<Arc<dyn PeerAcceptor>>,
    ) -> Result<Server<N>, ServerError> {
        let listener = bind_client_port(config.listen)?;
        Server::on(listener, config, locks, peers, Tasks::new())
    }
}

impl<N: LockNode, L: Accept> Server<N, L> {
    /// A node on a listener bound by the caller (a simulated network's,
    /// say), with its state shared as in [`Server::bind_shared`]; `tasks`
    /// holds whatever the caller already started for the node (a cluster
    /// shell's peer links), stopped with the server.
    pub fn on(
        listener: L,
        config: ServerConfig,
        locks: Arc<SharedLocks<N>>,
        peers: Option<Arc<dyn PeerAcceptor<L::Stream>>>,
        tasks: Tasks,
    ) -> Result<Server<N, L>, ServerError> {
        let local = listener.local_addr().map_err(ServerError::Unbound)?;
        let quota = config.quota;
        locks.with(|node, _, _| node.set_quota(quota));
        let now = crate::token_floor::wall_clock_ms();
        locks.metrics().started(config.max_connections, quota, now);
        let self_addr = config
            .advertise
            .clone()
            .unwrap_or_else(|| local.to_string());
        let info = Arc::new(NodeInfo {
            config,
            self_addr,
            peer_acceptor: peers,
            http_addr: std::sync::OnceLock::new(),
        });
        Ok(Server {
            listener,
            node: info,
            locks,
            tasks,
        })
    }

    /// The node's lock state, for the shells that feed it peer messages.
    pub fn locks(&self) -> &Arc<SharedLocks<N>> {
        &self.locks
    }

    /// The node's tasks: a cluster shell spawns its own here, so that they
    /// stop with the server.
    pub fn tasks(&self) -> &Tasks {
        &self.tasks
    }

    /// Advertises the node's HTTP endpoint (`--http-listen`) as `http=<addr>`
    /// in its `S` answers, so that `baton locks` can find it. Only the
    /// first call counts.
    pub fn advertise_http(&self, addr: SocketAddr) {
        let _ = self.node.http_addr.set(addr.to_string());
    }

    /// The address actually bound (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        // Checked in `on`.
        self.listener
            .local_addr()
            .unwrap_or(self.node.config.listen)
    }

    /// Serves until `shutdown` completes; then stops accepting, lets each
    /// connection flush what it has and close, stops every other task of
    /// the node, and returns once they are all gone (or after 5 s).
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let tasks = self.tasks.clone();
        tasks.spawn(timer::run(self.locks.clone()));
        let open = Arc::new(AtomicUsize::new(0));
        let connections = Connections::new();
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                accepted = self.listener.accept() => match accepted {
                    Ok((stream, peer)) => self.admit(stream, peer, &open, &connections),
                    Err(error) => {
                        // Out of file descriptors and the like: pause rather
                        // than spin; the node keeps serving who it has.
                        tracing::warn!(%error, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                },
            }
        }
        tracing::info!("shutting down");
        drop(self.listener);
        if !tasks.stop(STOP_WAIT).await {
            tracing::warn!(left = tasks.len(), "some tasks did not stop in time");
        }
    }

    fn admit(
        &self,
        mut stream: L::Stream,
        peer: SocketAddr,
        open: &Arc<AtomicUsize>,
        connections: &Arc<Connections>,
    ) {
        // At the limit, a connection stuck in an unfinished line makes
        // room (see `evict`); it closes at once, so the count exceeds the
        // limit by at most the evicted connections still closing.
        if open.fetch_add(1, Ordering::AcqRel) >= self.node.config.max_connections
            && !connections.evict_oldest(tokio::time::Instant::now(), EVICT_GRACE)
        {
            open.fetch_sub(1, Ordering::AcqRel);
            tracing::debug!(%peer, "refused: too many connections");
            self.tasks.spawn(async move {
                let refuse = async {
                    let _ = stream
                        .write_all(&baton_proto::connection_refused_line())
                        .await;
                    let _ = stream.shutdown().await;
                };
                let _ = tokio::time::timeout(Duration::from_secs(1), refuse).await;
            });
            return;
        }
        stream.set_nodelay();
        // Its own token: the node's shutdown, or its eviction.
        let stopping = self.tasks.stopping().child_token();
        let registered = connections.register(stopping.clone());
        let (connection, deliveries) =
            Connection::new(self.locks.clone(), self.node.clone(), registered);
        let open = open.clone();
        let locks = self.locks.clone();
        locks.metrics().connection_opened();
        self.tasks.spawn_graceful(async move {
            connection.serve(stream, deliveries, stopping).await;
            open.fetch_sub(1, Ordering::AcqRel);
            locks.metrics().connection_closed();
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// More connections than tokio's default queue of 1,024.
    const BURST: usize = 1_200;

    #[tokio::test]
    async fn a_burst_larger_than_tokios_default_backlog_waits_in_the_queue() {
        // Both ends of every connection are open at once.
        rlimit::increase_nofile_limit(2 * BURST as u64 + 64).expect("open-file limit");
        let listener = bind_client_port("127.0.0.1:0".parse().expect("addr")).expect("bind");
        let addr = listener.local_addr().expect("addr");
        // Nothing accepts yet: each connect completes only if the kernel
        // queued it. A dropped SYN is retried after a second; the bound
        // is well inside that.
        let mut clients = Vec::with_capacity(BURST);
        for i in 0..BURST {
            let connect = TcpStream::connect(addr);
            match tokio::time::timeout(Duration::from_millis(500), connect).await {
                Ok(Ok(stream)) => clients.push(stream),
                Ok(Err(error)) => panic!("connection {i}: {error}"),
                Err(_) => panic!("connection {i} was not queued: the accept queue is full"),
            }
        }
        for i in 0..BURST {
            let accept = tokio::time::timeout(Duration::from_secs(5), listener.accept());
            assert!(matches!(accept.await, Ok(Ok(_))), "accept {i}");
        }
    }
}
