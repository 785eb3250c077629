//! The async shell of a priority node: peer links over the client port,
//! the outbox pump, and the graceful handoff at shutdown.
//!
//! Each node dials every other node and writes its messages on the link it
//! dialled; it reads its peers' messages on the links they dialled, and
//! writes back a zero byte now and then as a sign of life. Either end
//! closes a link that brought nothing for a failure timeout, and the
//! dialling end dials again: a link a partition froze is replaced instead
//! of waiting out the kernel's backed-off retransmissions. Ticks come from
//! the server's single timer, which `LockNode::next_deadline` drives.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::BytesMut;
use futures_util::{SinkExt, StreamExt};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_util::codec::{Framed, FramedParts, FramedWrite};

use baton_server::{Clock, PeerAcceptor, Server, ServerConfig, ServerError, SharedLocks};

use super::engine::{NodeRole, PriorityConfig, PriorityNode};
use super::lock_node::PriorityLockNode;
use super::messages::{LinkHello, NodeIndex, PriorityMessage};
use super::state_file::{self, PriorityPersister, StateFileError};
use crate::peer::{self, ClusterKeys, PEER_HELLO};

type Shared = Arc<SharedLocks<PriorityLockNode>>;

/// Pause between attempts to reach a peer that is down.
const REDIAL_PAUSE: Duration = Duration::from_millis(100);
/// A graceful stop waits this long for the successor to take over.
const HANDOFF_WAIT: Duration = Duration::from_secs(2);

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
}

/// Where a graceful stop's handoff stands.
enum HandoffStep {
    Done(NodeIndex),
    /// Not active (any more): nothing of ours to hand over.
    NothingToHand,
    Waiting,
    NoSuccessor,
}

impl PriorityHandle {
    /// Graceful stop, first part: hand the active role to a live peer and
    /// wait (bounded) until it confirms. The server keeps answering
    /// meanwhile. A successor that refuses leaves this node serving: the
    /// role is offered again, to it or another, until `HANDOFF_WAIT`. With
    /// no live peer yet, it waits a few failure timeouts for one (a link
    /// being redialled after a heal) before giving up.
    pub async fn hand_off(&self) {
        let begun = tokio::time::Instant::now();
        let look_for = self.failure_timeout * 3;
        loop {
            let step = self.locks.with(|node, now, events| {
                if let Some(successor) = node.engine().handed_off_to() {
                    return HandoffStep::Done(successor);
                }
                match node.engine().role() {
                    NodeRole::Standby => HandoffStep::NothingToHand,
                    NodeRole::HandingOff { .. } => HandoffStep::Waiting,
                    NodeRole::Active => {
                        if node.drive(events, |engine, ev| engine.begin_handoff(now, ev)) {
                            HandoffStep::Waiting
                        } else if node.engine().has_live_peer(now) {
                            // A live peer refused a moment ago: offer again.
                            HandoffStep::Waiting
                        } else {
                            HandoffStep::NoSuccessor
                        }
                    }
                }
            });
            match step {
                HandoffStep::Done(successor) => {
                    tracing::info!(successor, "handed over");
                    return;
                }
                HandoffStep::NothingToHand => return,
                HandoffStep::NoSuccessor if begun.elapsed() >= look_for => {
                    tracing::warn!("no live peer to hand the active role to");
                    return;
                }
                HandoffStep::NoSuccessor | HandoffStep::Waiting => {}
            }
            if begun.elapsed() >= HANDOFF_WAIT {
                tracing::warn!("successor did not confirm the handoff in time");
                return;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
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
pub async fn start(
    server_config: ServerConfig,
    settings: PrioritySettings,
) -> Result<PriorityCluster, PriorityStartError> {
    let PrioritySettings {
        peers,
        me,
        heartbeat_ms,
        failure_timeout_ms,
        data_dir,
        keys: _keys,
    } = settings;
    let clock = Clock::new();
    let now = clock.now();
    let wall_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    let config = PriorityConfig {
        me,
        peers: peers.clone(),
        heartbeat_ms,
        failure_timeout_ms,
        wall_at_zero: wall_ms.saturating_sub(now),
    };
    let mut engine = PriorityNode::new(config, now);
    let state_file = match &data_dir {
        Some(dir) => {
            let file = state_file::open(dir)?;
            if let Some(state) = file.load()? {
                tracing::info!(
                    locks = state.table.locks.len(),
                    term = state.term,
                    "recovered the state of the last run"
                );
                engine.recover(&state, now);
            }
            Some(file)
        }
        None => None,
    };
    let locks: Shared = Arc::new(SharedLocks::new(PriorityLockNode::new(engine), clock));
    // A link that has heard nothing for a failure timeout is stale: its
    // bytes may sit behind a backed-off retransmission long after the
    // network healed. It is closed and dialled again.
    let link_timeout = Duration::from_millis(failure_timeout_ms.max(1));
    let inbound = Arc::new(Inbound {
        locks: locks.clone(),
        peers: peers.clone(),
        me,
        link_timeout,
        ack_every: Duration::from_millis(heartbeat_ms / 2),
    });
    let server = Server::bind_shared(server_config, locks.clone(), Some(inbound)).await?;

    let mut links = Vec::with_capacity(peers.len());
    for (index, addr) in peers.iter().enumerate() {
        if index == me {
            links.push(None);
            continue;
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let hello = LinkHello {
            from: me,
            peers: peers.clone(),
        };
        tokio::spawn(dial(
            index,
            addr.clone(),
            hello,
            rx,
            locks.clone(),
            link_timeout,
        ));
        links.push(Some(tx));
    }
    tokio::spawn(pump(locks.clone(), links));
    let persister = state_file.map(|file| state_file::persister(file, locks.clone()));
    if let Some(persister) = &persister {
        persister.spawn();
    }
    Ok(PriorityCluster {
        server,
        handle: PriorityHandle {
            locks,
            persister,
            failure_timeout: link_timeout,
        },
    })
}

/// Moves the engine's outbox onto the links, in order.
async fn pump(locks: Shared, links: Vec<Option<mpsc::UnboundedSender<PriorityMessage>>>) {
    loop {
        locks.output_ready().await;
        let output = locks.with(|node, _, _| node.engine_mut().take_output());
        for (to, message) in output {
            if let Some(Some(link)) = links.get(to) {
                // A link task that ended means the runtime is going down.
                let _ = link.send(message);
            }
        }
    }
}

/// Keeps the outgoing link to one peer up and writes the engine's messages
/// to it. While the peer is unreachable its messages are dropped: they
/// would be stale by the time it came back, and heartbeats, sync requests
/// and snapshots are all repeated as needed.
async fn dial(
    index: NodeIndex,
    addr: String,
    hello: LinkHello,
    mut outbox: mpsc::UnboundedReceiver<PriorityMessage>,
    locks: Shared,
    link_timeout: Duration,
) {
    let mut batch = Vec::with_capacity(64);
    loop {
        // Short, so that the first attempt after a heal comes soon.
        let connected = tokio::time::timeout(link_timeout, TcpStream::connect(&addr)).await;
        let mut stream = match connected {
            Ok(Ok(stream)) => stream,
            _ => {
                while outbox.try_recv().is_ok() {}
                tokio::time::sleep(REDIAL_PAUSE).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        // What queued while there was no link is stale.
        while outbox.try_recv().is_ok() {}
        let sent = send_link(&mut stream, &hello, &mut outbox, &mut batch, link_timeout).await;
        if let Err(error) = sent {
            tracing::debug!(peer = index, %error, "peer link down");
        }
        locks.with(|node, _, _| node.engine_mut().on_link_down(index));
        while outbox.try_recv().is_ok() {}
        tokio::time::sleep(REDIAL_PAUSE).await;
    }
}

/// Why a peer link was closed on purpose.
#[derive(Debug, thiserror::Error)]
enum LinkClosed {
    #[error(transparent)]
    Peer(#[from] peer::PeerError),
    #[error("nothing heard for a failure timeout")]
    Silent,
    #[error("a write did not finish within a failure timeout")]
    WriteStalled,
}

async fn send_link(
    stream: &mut TcpStream,
    hello: &LinkHello,
    outbox: &mut mpsc::UnboundedReceiver<PriorityMessage>,
    batch: &mut Vec<PriorityMessage>,
    link_timeout: Duration,
) -> Result<(), LinkClosed> {
    let (mut reader, writer) = stream.split();
    let mut frames = FramedWrite::new(writer, peer::frame_codec());
    let opening = async {
        frames.get_mut().write_all(PEER_HELLO).await?;
        frames.send(peer::encode(hello)?).await?;
        Ok::<_, peer::PeerError>(())
    };
    match tokio::time::timeout(link_timeout, opening).await {
        Ok(result) => result?,
        Err(_) => return Err(LinkClosed::WriteStalled),
    }
    // The peer writes a byte back now and then for what it reads: a link
    // that brings none for a failure timeout is stale.
    let mut sink = [0u8; 64];
    let mut heard = tokio::time::Instant::now();
    loop {
        tokio::select! {
            n = outbox.recv_many(batch, 64) => {
                if n == 0 {
                    return Ok(());
                }
                let write = async {
                    for message in batch.drain(..) {
                        frames.feed(peer::encode(&message)?).await?;
                    }
                    SinkExt::<bytes::Bytes>::flush(&mut frames).await?;
                    Ok::<_, peer::PeerError>(())
                };
                match tokio::time::timeout(link_timeout, write).await {
                    Ok(result) => result?,
                    Err(_) => return Err(LinkClosed::WriteStalled),
                }
            }
            read = tokio::io::AsyncReadExt::read(&mut reader, &mut sink) => {
                match read {
                    Ok(0) | Err(_) => return Ok(()),
                    Ok(_) => heard = tokio::time::Instant::now(),
                }
            }
            () = tokio::time::sleep_until(heard + link_timeout) => {
                return Err(LinkClosed::Silent);
            }
        }
    }
}

/// Takes the links peers dial to this node.
struct Inbound {
    locks: Shared,
    peers: Vec<String>,
    me: NodeIndex,
    /// A link that brings nothing for this long is closed (the peer
    /// heartbeats much more often, and dials again).
    link_timeout: Duration,
    /// How often at most the node writes a byte back on a link it reads.
    ack_every: Duration,
}

impl PeerAcceptor for Inbound {
    fn hello(&self) -> &'static [u8] {
        PEER_HELLO
    }

    fn accept(&self, stream: TcpStream, mut already_read: BytesMut) {
        let _ = already_read.split_to(PEER_HELLO.len().min(already_read.len()));
        let locks = self.locks.clone();
        let peers = self.peers.clone();
        let me = self.me;
        let limits = (self.link_timeout, self.ack_every);
        tokio::spawn(async move {
            if let Err(error) = receive_link(stream, already_read, locks, &peers, me, limits).await
            {
                tracing::debug!(%error, "inbound peer link closed");
            }
        });
    }
}

async fn receive_link(
    stream: TcpStream,
    already_read: BytesMut,
    locks: Shared,
    peers: &[String],
    me: NodeIndex,
    (idle_limit, ack_every): (Duration, Duration),
) -> Result<(), peer::PeerError> {
    let _ = stream.set_nodelay(true);
    let mut parts = FramedParts::new::<bytes::Bytes>(stream, peer::hello_frame_codec());
    parts.read_buf = already_read;
    let mut frames = Framed::from_parts(parts);
    let first = match tokio::time::timeout(idle_limit, frames.next()).await {
        Ok(Some(frame)) => frame?,
        _ => return Err(peer::PeerError::NoHello),
    };
    let hello: LinkHello = peer::decode(&first)?;
    if hello.peers != peers || hello.from == me || hello.from >= peers.len() {
        tracing::warn!(
            from = hello.from,
            their_peers = ?hello.peers,
            "refused a peer with another peer list; every node needs the same --peers"
        );
        return Ok(());
    }
    frames.codec_mut().set_max_frame_length(peer::MAX_FRAME);
    let mut acked: Option<tokio::time::Instant> = None;
    loop {
        let frame = match tokio::time::timeout(idle_limit, frames.next()).await {
            Ok(Some(frame)) => frame?,
            Ok(None) => return Ok(()),
            Err(_) => {
                tracing::debug!(from = hello.from, "peer link idle; closing");
                return Ok(());
            }
        };
        // Tells the dialling side the link still carries: never waits (a
        // full buffer means the link is stalled, and the dialler will
        // notice the silence).
        if acked.is_none_or(|at| at.elapsed() >= ack_every) {
            let _ = frames.get_ref().try_write(&[0]);
            acked = Some(tokio::time::Instant::now());
        }
        let message: PriorityMessage = peer::decode(&frame)?;
        locks.with(|node, now, events| {
            node.drive(events, |engine, ev| {
                engine.on_message(hello.from, message, now, ev)
            })
        });
    }
}
