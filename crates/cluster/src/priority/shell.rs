//! The async shell of a priority node: peer links over the client port,
//! the outbox pump, and the graceful handoff at shutdown.
//!
//! Each node dials every other node and writes its messages on the link it
//! dialled (`outbound`); it reads its peers' messages on the links they
//! dialled, and writes back an empty frame now and then as a sign of life
//! (`inbound`). Every link runs over the authenticated channel of
//! [`crate::peer`]: a node that does not hold the cluster key gets no
//! further than the handshake. Either end closes a link that brought
//! nothing for a failure timeout, and the dialling end dials again: a link
//! a partition froze is replaced instead of waiting out the kernel's
//! backed-off retransmissions. Ticks come from the server's single timer,
//! which `LockNode::next_deadline` drives.
//!
//! Every task the shell spawns (links, pump, the state-file writer) runs
//! in its [`Tasks`] until they stop ([`PriorityHandle::shut_down`]); the queues
//! between them are bounded. The engine is reached only through the named
//! inputs of [`PriorityLockNode`] (its call protocol is in `lock_node`).

mod counted;
mod inbound;
mod outbound;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use baton_core::Millis;
pub(super) use baton_server::Tasks;
use baton_server::{Clock, Server, ServerConfig, ServerError, SharedLocks};

use super::engine::{PriorityConfig, PriorityNode};
use super::lock_node::{HandoffStep, PriorityLockNode, RoleView};
use super::messages::NodeIndex;
use super::state_file::{self, PriorityPersister, StateFile, StateFileError};
use crate::peer::refusals::RefusalLog;
use crate::peer::{self, ClusterKeys, GateLimits, PeerGate};
use inbound::{Inbound, InboundLinks};
use outbound::Outbound;

type Shared = Arc<SharedLocks<PriorityLockNode>>;

/// A graceful stop waits this long for the successor to take over.
const HANDOFF_WAIT: Duration = Duration::from_secs(2);
/// A shutdown waits this long for the shell's tasks to end.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(5);

/// A running priority node: the server, and a handle for the handoff.
#[derive(Debug)]
pub struct PriorityCluster {
    pub server: Server<PriorityLockNode>,
    pub handle: PriorityHandle,
}

/// What a graceful stop needs of a running priority node.
#[derive(Debug, Clone)]
pub struct PriorityHandle {
    locks: Shared,
    persister: Option<Arc<PriorityPersister>>,
    failure_timeout: Duration,
    role: watch::Receiver<RoleView>,
    tasks: Tasks,
}

impl PriorityHandle {
    /// Graceful stop, first part: hand the active role to a live peer and
    /// wait (bounded) until it confirms. The server keeps answering
    /// meanwhile. A successor that refuses leaves this node serving: the
    /// role is offered again, to it or another, until `HANDOFF_WAIT`. With
    /// no live peer yet, it waits a few failure timeouts for one (a link
    /// being redialled after a heal) before giving up. Between steps it
    /// sleeps until the node's role view changes (see `RoleView`).
    pub async fn hand_off(&self) {
        let begun = tokio::time::Instant::now();
        let look_for = begun + self.failure_timeout * 3;
        let give_up = begun + HANDOFF_WAIT;
        let mut role = self.role.clone();
        loop {
            role.mark_unchanged();
            let step = self
                .locks
                .with(|node, now, events| node.handoff_step(now, events));
            let wait_until = match step {
                HandoffStep::Done(successor) => {
                    let successor = self.locks.inspect(|node| node.peer_addr(successor));
                    tracing::info!(successor, "handed over");
                    return;
                }
                HandoffStep::NothingToHand => return,
                HandoffStep::NoSuccessor => look_for.min(give_up),
                HandoffStep::Waiting => give_up,
            };
            let changed = tokio::time::timeout_at(wait_until, role.changed()).await;
            // The view's sender lives as long as the node: `Ok(Err)` cannot
            // come while this handle holds the node, and would end the wait.
            if !matches!(changed, Ok(Ok(()))) || tokio::time::Instant::now() >= give_up {
                if step == HandoffStep::NoSuccessor && wait_until < give_up {
                    tracing::warn!("no live peer to hand the active role to");
                } else {
                    tracing::warn!("successor did not confirm the handoff in time");
                }
                return;
            }
        }
    }

    /// Graceful stop, last part: the state goes to the data directory, if
    /// the node has one, so that a restart finds it.
    pub async fn persist(&self) -> Result<(), Arc<StateFileError>> {
        match &self.persister {
            Some(persister) => persister.write_if_changed().await,
            None => Ok(()),
        }
    }

    /// Resolves if the node's state could not be saved (never without a
    /// data directory): the node must then stop serving.
    pub async fn storage_failed(&self) -> Arc<StateFileError> {
        match &self.persister {
            Some(persister) => persister.failed().await,
            None => std::future::pending().await,
        }
    }

    /// Ends every task of the shell (links, pump) and waits, bounded, for
    /// them: after the server stopped, or for a node stopped in a test.
    pub async fn shut_down(&self) {
        if !self.tasks.stop(SHUTDOWN_WAIT).await {
            tracing::warn!("some peer links did not close in time");
        }
    }
}

/// How a priority node is set up (beyond its server).
#[derive(Debug, Clone)]
pub struct PrioritySettings {
    /// Every node's client address, in priority order.
    pub peers: Vec<String>,
    /// This node's index in `peers`.
    pub me: NodeIndex,
    pub heartbeat_ms: u64,
    pub failure_timeout_ms: u64,
    /// Where the node keeps its state across restarts, if anywhere.
    pub data_dir: Option<PathBuf>,
    /// The cluster key(s): peers prove they hold one (see `crate::peer`).
    pub keys: ClusterKeys,
}

/// Why a priority node did not start.
#[derive(Debug, thiserror::Error)]
pub enum PriorityStartError {
    #[error(transparent)]
    Bind(#[from] ServerError),
    #[error(transparent)]
    State(#[from] StateFileError),
}

/// Binds a priority node and starts its shell.
/// Gives the inbound gate the peers' addresses, IPs at once, names as
/// they resolve.
fn keep_peer_ips(links: &Arc<InboundLinks>, tasks: &Tasks) {
    let peers = links.peers.clone();
    links.gate.set_peer_ips(peer::known_ips::literal_ips(
        peers.iter().map(String::as_str),
    ));
    let links = links.clone();
    tasks.spawn(async move {
        peer::known_ips::keep_current(&links.gate, || peers.clone()).await;
    });
}

pub async fn start(
    server_config: ServerConfig,
    settings: PrioritySettings,
) -> Result<PriorityCluster, PriorityStartError> {
    let clock = Clock::new();
    let now = clock.now();
    let (engine, state_file) = engine(&settings, now)?;
    let node = PriorityLockNode::new(engine);
    let role = node.watch_role();
    let locks: Shared = Arc::new(SharedLocks::new(node, clock));
    let tasks = Tasks::default();
    // A link that has heard nothing for a failure timeout is stale: its
    // bytes may sit behind a backed-off retransmission long after the
    // network healed. It is closed and dialled again.
    let link_timeout = Duration::from_millis(settings.failure_timeout_ms.max(1));
    let inbound = Inbound {
        links: Arc::new(InboundLinks {
            locks: locks.clone(),
            peers: settings.peers.clone(),
            me: settings.me,
            keys: settings.keys.clone(),
            gate: PeerGate::new(GateLimits::for_cluster(settings.peers.len())),
            link_timeout,
            ack_every: Duration::from_millis(settings.heartbeat_ms / 2),
            peer_lists: RefusalLog::new(
                "refused a peer with another peer list; every node needs the same --peers",
            ),
        }),
        tasks: tasks.clone(),
    };
    keep_peer_ips(&inbound.links, &tasks);
    let server = Server::bind_shared(server_config, locks.clone(), Some(Arc::new(inbound))).await?;
    let outbound = Outbound {
        peers: &settings.peers,
        me: settings.me,
        key: settings.keys.primary(),
        timeout: link_timeout,
    };
    outbound.spawn(&locks, &tasks);
    let persister = state_file.map(|file| state_file::persister(file, locks.clone()));
    if let Some(persister) = &persister {
        persister.spawn(&tasks);
    }
    Ok(PriorityCluster {
        server,
        handle: PriorityHandle {
            locks,
            persister,
            failure_timeout: link_timeout,
            role,
            tasks,
        },
    })
}

/// The node's engine at `now`, from the state of the last run if the data
/// directory has one, and that directory's state file.
fn engine(
    settings: &PrioritySettings,
    now: Millis,
) -> Result<(PriorityNode<baton_server::Mailbox>, Option<StateFile>), StateFileError> {
    let wall_ms = baton_server::token_floor::wall_clock_ms();
    let config = PriorityConfig {
        me: settings.me,
        peers: settings.peers.clone(),
        heartbeat_ms: settings.heartbeat_ms,
        failure_timeout_ms: settings.failure_timeout_ms,
        wall_at_zero: wall_ms.saturating_sub(now),
    };
    let mut engine = PriorityNode::new(config, now);
    let Some(dir) = &settings.data_dir else {
        return Ok((engine, None));
    };
    let file = state_file::open(dir)?;
    if let Some(state) = state_file::load_checked(&file, &engine, now)? {
        tracing::info!(
            locks = state.table.locks.len(),
            term = state.term,
            "recovered the state of the last run"
        );
        engine.recover(&state, now);
    }
    Ok((engine, Some(file)))
}
