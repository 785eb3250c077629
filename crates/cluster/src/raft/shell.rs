//! The async shell of a Raft node: builds openraft over the durable log and
//! the lock node, runs the node's one loop (`run`: its inputs in, its
//! commands run against openraft), takes peer connections on the client
//! port, and hands leadership over at a graceful stop.
//!
//! [`start`] runs it on TCP; [`start_on`] on whatever listener, dialer,
//! clock and run name it is given, which is how the simulation runs this
//! very shell, its server and its connections on turmoil's network. Every
//! task it starts (the node's loop, the peer links and handlers) belongs to the server's [`Tasks`] and stops with it.

use std::hash::{BuildHasher, Hasher};
use std::io;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use openraft::async_runtime::WatchReceiver;
use openraft::ServerState;
use tokio::net::TcpListener;

use baton_server::{
    Accept, Clock, PeerAcceptor, Server, ServerConfig, ServerStream, SharedLocks, Tasks,
};

use super::engine::RaftEngine;
use super::members::Members;
use super::membership::MembershipChanges;
use super::net::inbound::RaftAcceptor;
use super::net::link::{Dialer, TcpDialer};
use super::net::network::{Network, PeerReach};
use super::net::rpc::RAFT_HELLO;
use super::node::lock_node::RaftLockNode;
use super::node::{observe, NodeTimes};
use super::removal::RemovalNotice;
pub use super::settings::RaftSettings;
use super::storage::log_store::LogStore;
use super::storage::snapshot_store::SnapshotStore;
use super::storage::state_machine::{LockStateMachine, TableHost};
use super::types::{members_of, NodeId, Raft, RaftOf};
use hold_timer::HoldClock;

pub mod hold_timer;
mod run;

type Shared = Arc<SharedLocks<RaftLockNode>>;

/// A graceful stop waits this long for the new leader to take over.
const HANDOFF_WAIT: Duration = Duration::from_secs(2);

/// Why a Raft node could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot open the data directory: {0}")]
    Storage(#[from] io::Error),
    #[error("raft would not start: {0}")]
    Raft(String),
    #[error(transparent)]
    Server(#[from] baton_server::ServerError),
}

/// A name for this run of the process, so that entries it proposed before
/// a restart are not taken for its own afterwards.
pub fn fresh_origin() -> u64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    hasher.write_u32(std::process::id());
    hasher.finish()
}

/// Opens the node's storage and starts openraft over `host`'s table. A
/// fresh node 0 proposes the membership from `peers` (unless it joins); a
/// node with a log keeps the one it has. `settings.me` must be settled
/// (see [`RaftSettings::settled`]).
pub async fn build_raft<H: TableHost>(
    settings: &RaftSettings,
    host: Arc<H>,
    dialer: Arc<dyn Dialer>,
) -> Result<RaftOf<H>, StartError> {
    let removal = RemovalNotice::default();
    let links = NodeLinks {
        tasks: Tasks::new(),
        removal,
        reach: PeerReach::default(),
    };
    build_raft_in(settings, host, dialer, links).await
}

/// What the network of a node shares with the rest of it.
#[derive(Debug, Clone)]
pub struct NodeLinks {
    /// The node's tasks: the peer links' among them.
    pub tasks: Tasks,
    /// Told when a member says this node is none.
    pub removal: RemovalNotice,
    /// Whether each peer can be reached, shared with the inbound side.
    pub reach: PeerReach,
}

/// [`build_raft`], its network sharing `links` with the rest of the node.
pub async fn build_raft_in<H: TableHost>(
    settings: &RaftSettings,
    host: Arc<H>,
    dialer: Arc<dyn Dialer>,
    links: NodeLinks,
) -> Result<RaftOf<H>, StartError> {
    let log = LogStore::open_with(
        &settings.data_dir.join("log"),
        settings.segment_bytes,
        settings.log_writes,
    )?;
    let snapshots = SnapshotStore::new(&settings.data_dir.join("snapshot"))?;
    log.check_covers(snapshots.check()?, &settings.data_dir.join("log"))?;
    let state_machine = LockStateMachine::open(host, snapshots)?;
    let network = Network::new(settings.me, settings.keys.primary().clone(), dialer)
        .in_tasks(links.tasks)
        .with_removal(links.removal)
        .with_reach(links.reach);
    let config = Arc::new(settings.openraft_config()?);
    let raft = openraft::Raft::new(settings.me, config, network, log, state_machine)
        .await
        .map_err(|e| StartError::Raft(e.to_string()))?;
    let initialized = raft
        .is_initialized()
        .await
        .map_err(|e| StartError::Raft(e.to_string()))?;
    // Only the first node of the peer list sets up a fresh cluster: were
    // every node to propose the same membership, each would hold a
    // different first entry and the first leaders would not last. The
    // others join once its log reaches them, as does a node that joins
    // later.
    if !initialized && !settings.join && settings.me == 0 {
        let members = members_of(&settings.peers);
        if let Err(error) = raft.initialize(members).await {
            tracing::debug!(%error, "cluster already initialized");
        }
    }
    Ok(raft)
}

/// A running Raft node: the server, and a handle for the graceful stop.
#[derive(Debug)]
pub struct RaftCluster<L: Accept = TcpListener> {
    pub server: Server<RaftLockNode, L>,
    pub handle: RaftHandle,
}

/// What a graceful stop needs of a running Raft node.
#[derive(Debug, Clone)]
pub struct RaftHandle {
    raft: Raft,
    me: NodeId,
    membership: MembershipChanges,
}

impl RaftHandle {
    pub fn raft(&self) -> &Raft {
        &self.raft
    }

    /// The node's online membership changes.
    pub fn membership(&self) -> &MembershipChanges {
        &self.membership
    }

    /// Graceful stop, first part: a leader hands the lead to the follower
    /// with the most of its log and waits (bounded) until it leads. The
    /// server keeps answering meanwhile, redirecting to the new leader.
    pub async fn hand_off(&self) {
        let metrics = self.raft.metrics().borrow_watched().clone();
        if metrics.state != ServerState::Leader {
            return;
        }
        let now = <openraft::TokioInstant as openraft::Instant>::now();
        let Some(to) = observe::hand_off_target(&metrics, now, HANDOFF_WAIT) else {
            return;
        };
        if let Err(error) = self.raft.trigger().transfer_leader(to).await {
            tracing::warn!(%error, "could not hand over the lead");
            return;
        }
        let mut watch = self.raft.metrics();
        let moved = tokio::time::timeout(HANDOFF_WAIT, async {
            loop {
                let leader = watch.borrow_watched().current_leader;
                if leader.is_some_and(|l| l != self.me) {
                    return leader;
                }
                if watch.changed().await.is_err() {
                    return None;
                }
            }
        })
        .await;
        let members = Members::of(metrics.membership_config.membership());
        match moved {
            Ok(Some(leader)) => {
                let leader = members.name_of(leader);
                tracing::info!(leader, "handed over the lead to {leader}");
            }
            _ => tracing::warn!("no new leader took over in time"),
        }
    }

    /// Resolves, with the reason, when the consensus core has died (a
    /// storage error such as a full disk, or a panic). The node can then
    /// neither lead nor follow: the process should exit so that a
    /// supervisor restarts it.
    pub fn core_died(&self) -> impl std::future::Future<Output = String> + Send + 'static {
        run::core_died(self.raft.clone())
    }

    /// Graceful stop, last part: stops openraft once the server is done.
    pub async fn shut_down(&self) {
        if let Err(error) = self.raft.shutdown().await {
            tracing::warn!(%error, "raft did not stop cleanly");
        }
    }
}

/// What a Raft node runs on besides its listener, given from outside.
#[derive(Clone)]
pub struct NodeIo {
    /// Dials the peers.
    pub dialer: Arc<dyn Dialer>,
    /// The server's clock.
    pub clock: Clock,
    /// The name of this run of the node (see [`fresh_origin`]).
    pub origin: u64,
    /// The clock a group-commit hold sleeps on.
    pub hold_clock: HoldClock,
}

impl std::fmt::Debug for NodeIo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeIo")
            .field("clock", &self.clock)
            .field("origin", &self.origin)
            .finish_non_exhaustive()
    }
}

impl NodeIo {
    /// TCP, the monotonic clock and a fresh run name: what `batond` runs on.
    pub fn tcp() -> NodeIo {
        NodeIo {
            dialer: Arc::new(TcpDialer),
            clock: Clock::new(),
            origin: fresh_origin(),
            hold_clock: HoldClock::Kernel,
        }
    }
}

/// Binds a Raft node on TCP and starts its shell. The storage is opened
/// before the port is bound, so a node that cannot start never listens.
pub async fn start(
    server_config: ServerConfig,
    settings: RaftSettings,
) -> Result<RaftCluster, StartError> {
    let settings = settings.settled()?;
    let opened = Opened::open(&settings, NodeIo::tcp()).await?;
    let listener = baton_server::bind_client_port(server_config.listen)?;
    opened.serve_on(listener, server_config, &settings)
}

/// Starts a Raft node on `listener`, dialing, timing and naming itself
/// with `io`.
pub async fn start_on<L: Accept>(
    listener: L,
    io: NodeIo,
    server_config: ServerConfig,
    settings: RaftSettings,
) -> Result<RaftCluster<L>, StartError> {
    let settings = settings.settled()?;
    Opened::open(&settings, io)
        .await?
        .serve_on(listener, server_config, &settings)
}

/// A node whose storage and openraft are up, not yet serving.
struct Opened {
    hold_clock: HoldClock,
    locks: Shared,
    raft: Raft,
    links: NodeLinks,
}

impl Opened {
    async fn open(settings: &RaftSettings, io: NodeIo) -> Result<Opened, StartError> {
        let mut engine = RaftEngine::new(settings.me, settings.seeds(), io.origin);
        engine.set_orphan_wait(settings.orphan_wait_ms());
        let wall_ms = baton_server::token_floor::wall_clock_ms();
        engine.set_wall_at_zero(wall_ms.saturating_sub(io.clock.now()));
        let node = RaftLockNode::new(engine, NodeTimes::of(settings));
        let locks: Shared = Arc::new(SharedLocks::new(node, io.clock));
        let links = NodeLinks {
            tasks: Tasks::new(),
            removal: RemovalNotice::default(),
            reach: PeerReach::default(),
        };
        let raft = build_raft_in(settings, locks.clone(), io.dialer, links.clone()).await?;
        let hold_clock = io.hold_clock;
        Ok(Opened {
            hold_clock,
            locks,
            raft,
            links,
        })
    }

    /// Serves on `listener`: peers arrive there too. Starts the shell's
    /// tasks among the server's.
    fn serve_on<L: Accept>(
        self,
        listener: L,
        server_config: ServerConfig,
        settings: &RaftSettings,
    ) -> Result<RaftCluster<L>, StartError> {
        let Opened {
            hold_clock,
            locks,
            raft,
            links:
                NodeLinks {
                    tasks,
                    removal,
                    reach,
                },
        } = self;
        let acceptor = Arc::new(Inbound(RaftAcceptor::new_in(
            raft.clone(),
            settings.me,
            settings.peers.clone(),
            settings.keys.clone(),
            tasks.clone(),
            reach,
        )));
        let server = Server::on(
            listener,
            server_config,
            locks.clone(),
            Some(acceptor),
            tasks.clone(),
        )?;
        tasks.spawn(run::run(
            raft.clone(),
            locks,
            hold_clock,
            removal.subscribe(),
        ));
        let membership =
            MembershipChanges::new(raft.clone(), settings.silent_after(), tasks.clone());
        tasks.spawn(membership.clone().keep());
        Ok(RaftCluster {
            server,
            handle: RaftHandle {
                raft,
                me: settings.me,
                membership,
            },
        })
    }
}

/// Takes the Raft peer connections that arrive on the client port.
struct Inbound(Arc<RaftAcceptor<SharedLocks<RaftLockNode>>>);

impl<S: ServerStream> PeerAcceptor<S> for Inbound {
    fn hello(&self) -> &'static [u8] {
        RAFT_HELLO
    }

    fn accept(&self, stream: S, already_read: BytesMut) {
        // Without its address a peer cannot be told apart in the refusal
        // log; such a socket is already gone.
        let Ok(from) = stream.peer_addr() else {
            return;
        };
        stream.set_nodelay();
        self.0.take(stream, already_read, from.ip());
    }
}
