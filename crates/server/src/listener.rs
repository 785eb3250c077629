//! The node itself: binds, accepts within the connection limit, spawns a
//! task per connection and the timer, and shuts down cleanly.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use baton_proto::{Role, StatusReport};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::clock::Clock;
use crate::config::ServerConfig;
use crate::connection::Connection;
use crate::locks::SharedLocks;
use crate::node::{LockNode, NodeStatus};
use crate::single::SingleNode;
use crate::timer;

/// Why a node could not start or keep serving.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// Takes the connections of the node's cluster peers, which arrive on the
/// client port and open with a hello line no client request starts with.
pub trait PeerAcceptor: Send + Sync + 'static {
    /// The first bytes of every peer connection.
    fn hello(&self) -> &'static [u8];
    /// Takes a peer connection; `already_read` starts with the hello.
    fn accept(&self, stream: TcpStream, already_read: bytes::BytesMut);
}

/// What every connection needs to know about the node it belongs to.
pub(crate) struct NodeInfo {
    pub(crate) config: ServerConfig,
    pub(crate) self_addr: String,
    pub(crate) peer_acceptor: Option<Arc<dyn PeerAcceptor>>,
}

impl std::fmt::Debug for NodeInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeInfo")
            .field("config", &self.config)
            .field("self_addr", &self.self_addr)
            .finish_non_exhaustive()
    }
}

impl NodeInfo {
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
            extra: status.extra,
        }
    }
}

/// A Baton node, bound and ready to serve.
#[derive(Debug)]
pub struct Server<N = SingleNode> {
    listener: TcpListener,
    node: Arc<NodeInfo>,
    locks: Arc<SharedLocks<N>>,
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
        let listener =
            TcpListener::bind(config.listen)
                .await
                .map_err(|source| ServerError::Bind {
                    addr: config.listen,
                    source,
                })?;
        let local = listener.local_addr().map_err(|source| ServerError::Bind {
            addr: config.listen,
            source,
        })?;
        let self_addr = config
            .advertise
            .clone()
            .unwrap_or_else(|| local.to_string());
        let info = Arc::new(NodeInfo {
            config,
            self_addr,
            peer_acceptor: peers,
        });
        Ok(Server {
            listener,
            node: info,
            locks,
        })
    }

    /// The node's lock state, for the shells that feed it peer messages.
    pub fn locks(&self) -> &Arc<SharedLocks<N>> {
        &self.locks
    }

    /// The address actually bound (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        // Checked in `bind`.
        self.listener
            .local_addr()
            .unwrap_or(self.node.config.listen)
    }

    /// Serves until `shutdown` completes; then stops accepting, lets each
    /// connection flush what it has and close, and returns.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let cancel = CancellationToken::new();
        let tasks = TaskTracker::new();
        tasks.spawn(timer::run(self.locks.clone(), cancel.clone()));
        let open = Arc::new(AtomicUsize::new(0));
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                accepted = self.listener.accept() => match accepted {
                    Ok((stream, peer)) => self.admit(stream, peer, &open, &tasks, &cancel),
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
        cancel.cancel();
        tasks.close();
        if tokio::time::timeout(Duration::from_secs(5), tasks.wait())
            .await
            .is_err()
        {
            tracing::warn!("some connections did not close in time");
        }
    }

    fn admit(
        &self,
        mut stream: TcpStream,
        peer: SocketAddr,
        open: &Arc<AtomicUsize>,
        tasks: &TaskTracker,
        cancel: &CancellationToken,
    ) {
        if open.fetch_add(1, Ordering::AcqRel) >= self.node.config.max_connections {
            open.fetch_sub(1, Ordering::AcqRel);
            tracing::debug!(%peer, "refused: too many connections");
            tasks.spawn(async move {
                let refuse = async {
                    let _ = stream.write_all(&baton_proto::connection_refused_line()).await;
                    let _ = stream.shutdown().await;
                };
                let _ = tokio::time::timeout(Duration::from_secs(1), refuse).await;
            });
            return;
        }
        let _ = stream.set_nodelay(true);
        let (connection, deliveries) = Connection::new(self.locks.clone(), self.node.clone());
        let open = open.clone();
        let cancel = cancel.clone();
        tasks.spawn(async move {
            connection.serve(stream, deliveries, cancel).await;
            open.fetch_sub(1, Ordering::AcqRel);
        });
    }
}
