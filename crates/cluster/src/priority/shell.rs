//! The async shell of a priority node: peer links over the client port,
//! the outbox pump, and the graceful handoff at shutdown.
//!
//! Each node dials every other node and writes its messages on the link it
//! dialled; it reads its peers' messages on the links they dialled, and
//! writes back an empty frame now and then as a sign of life. Every link
//! runs over the authenticated channel of [`crate::peer`]: a node that
//! does not hold the cluster key gets no further than the handshake. Either end
//! closes a link that brought nothing for a failure timeout, and the
//! dialling end dials again: a link a partition froze is replaced instead
//! of waiting out the kernel's backed-off retransmissions. Ticks come from
//! the server's single timer, which `LockNode::next_deadline` drives.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use std::sync::atomic::{AtomicBool, Ordering};

use bytes::BytesMut;
use futures_util::{FutureExt, SinkExt, StreamExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use baton_server::{Clock, PeerAcceptor, Server, ServerConfig, ServerError, SharedLocks};

use super::engine::{NodeRole, PriorityConfig, PriorityNode};
use super::link_frames::{self, MAX_FRAME};
use super::lock_node::PriorityLockNode;
use super::messages::{LinkHello, NodeIndex, PriorityMessage};
use super::state_file::{self, PriorityPersister, StateFileError};
use crate::peer::refusals::REFUSAL_LOG_INTERVAL;
use crate::peer::{self, ClusterKey, ClusterKeys, GateLimits, PeerGate, PEER_HELLO};

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
        keys,
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
            if let Some(state) = state_file::load_checked(&file, &engine, now)? {
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
    let inbound = Arc::new(Inbound(Arc::new(InboundLinks {
        locks: locks.clone(),
        peers: peers.clone(),
        me,
        keys: keys.clone(),
        gate: PeerGate::new(GateLimits::for_cluster(peers.len())),
        link_timeout,
        ack_every: Duration::from_millis(heartbeat_ms / 2),
    })));
    let server = Server::bind_shared(server_config, locks.clone(), Some(inbound)).await?;

    let mut links = Vec::with_capacity(peers.len());
    for (index, addr) in peers.iter().enumerate() {
        if index == me {
            links.push(None);
            continue;
        }
        let (tx, rx) = mpsc::channel(LINK_QUEUE);
        let overflowed = Arc::new(AtomicBool::new(false));
        let link = OutboundLink {
            index,
            addr: addr.clone(),
            hello: LinkHello {
                from: me,
                peers: peers.clone(),
            },
            key: keys.primary().clone(),
            timeout: link_timeout,
            overflowed: overflowed.clone(),
        };
        tokio::spawn(dial(link, rx, locks.clone()));
        links.push(Some(LinkQueue { tx, overflowed }));
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

/// Messages queued for one peer's link, at most. Past it the link is
/// behind for good: it is closed, and the standby resyncs once it is back.
/// Room for a whole table of `MAX_TABLE_LOCKS` in pieces, which the engine
/// queues at once; the queue drains or the link is torn down within a
/// failure timeout, which bounds what it holds in time as well.
const LINK_QUEUE: usize = 1 << 16;
/// Bytes of acks an inbound link may have waiting to be written; past it
/// the dialler is not reading, and the link is closed.
const MAX_UNSENT_ACKS: usize = 4096;
/// The largest first frame of an incoming link (its `LinkHello`: a peer
/// list of addresses).
const MAX_HELLO_FRAME: usize = 64 * 1024;

/// One peer's outgoing queue, and whether it overflowed.
struct LinkQueue {
    tx: mpsc::Sender<PriorityMessage>,
    overflowed: Arc<AtomicBool>,
}

/// Moves the engine's outbox onto the links, in order.
async fn pump(locks: Shared, links: Vec<Option<LinkQueue>>) {
    loop {
        locks.output_ready().await;
        let output = locks.with(|node, _, _| node.engine_mut().take_output());
        for (to, message) in output {
            if let Some(Some(link)) = links.get(to) {
                // Full: the link is far behind (a stalled peer); dropping
                // one message leaves a gap, so the link is torn down and
                // the peer starts over from a snapshot. Closed: the
                // runtime is going down.
                if let Err(mpsc::error::TrySendError::Full(_)) = link.tx.try_send(message) {
                    link.overflowed.store(true, Ordering::Release);
                }
            }
        }
    }
}

/// Keeps the outgoing link to one peer up and writes the engine's messages
/// to it. While the peer is unreachable its messages are dropped: they
/// would be stale by the time it came back, and heartbeats, sync requests
/// and snapshots are all repeated as needed.
async fn dial(link: OutboundLink, mut outbox: mpsc::Receiver<PriorityMessage>, locks: Shared) {
    let mut batch = Vec::with_capacity(64);
    let mut warned: Option<tokio::time::Instant> = None;
    loop {
        // Short, so that the first attempt after a heal comes soon.
        let connected = tokio::time::timeout(link.timeout, TcpStream::connect(&link.addr)).await;
        if let Ok(Ok(stream)) = connected {
            let _ = stream.set_nodelay(true);
            // What queued while there was no link is stale.
            while outbox.try_recv().is_ok() {}
            link.overflowed.store(false, Ordering::Release);
            if let Err(error) = send_link(stream, &link, &mut outbox, &mut batch).await {
                tracing::debug!(peer = link.index, %error, "peer link down");
                let quiet = warned.is_some_and(|at| at.elapsed() < REFUSAL_LOG_INTERVAL);
                if matches!(error, LinkClosed::Peer(peer::PeerError::WrongKey)) && !quiet {
                    warned = Some(tokio::time::Instant::now());
                    tracing::warn!(
                        peer = link.index,
                        addr = %link.addr,
                        "peer does not hold this cluster's key; every node needs the same --cluster-key-file"
                    );
                }
            }
            locks.with(|node, _, _| node.engine_mut().on_link_down(link.index));
        }
        while outbox.try_recv().is_ok() {}
        tokio::time::sleep(REDIAL_PAUSE).await;
    }
}

/// What a dialling task knows of its link.
struct OutboundLink {
    index: NodeIndex,
    addr: String,
    hello: LinkHello,
    key: ClusterKey,
    /// Closes a link that hears nothing, or cannot write, for this long.
    timeout: Duration,
    overflowed: Arc<AtomicBool>,
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
    #[error("the link fell {LINK_QUEUE} messages behind")]
    Overflowed,
}

async fn send_link(
    stream: TcpStream,
    link: &OutboundLink,
    outbox: &mut mpsc::Receiver<PriorityMessage>,
    batch: &mut Vec<PriorityMessage>,
) -> Result<(), LinkClosed> {
    let opening = async {
        let first = peer::encode(&link.hello)?;
        peer::connect(stream, PEER_HELLO, &link.key, first, MAX_FRAME).await
    };
    let mut frames = match tokio::time::timeout(link.timeout, opening).await {
        Ok(framed) => framed?,
        Err(_) => return Err(LinkClosed::WriteStalled),
    };
    // The peer writes an empty frame back now and then for what it reads:
    // a link that brings none for a failure timeout is stale.
    let mut heard = tokio::time::Instant::now();
    loop {
        tokio::select! {
            n = outbox.recv_many(batch, 64) => {
                if n == 0 {
                    return Ok(());
                }
                if link.overflowed.load(Ordering::Acquire) {
                    return Err(LinkClosed::Overflowed);
                }
                let write = async {
                    for frame in link_frames::pack(batch)? {
                        frames.feed(frame).await?;
                    }
                    SinkExt::<bytes::Bytes>::flush(&mut frames).await?;
                    Ok::<_, peer::PeerError>(())
                };
                match tokio::time::timeout(link.timeout, write).await {
                    Ok(result) => result?,
                    Err(_) => return Err(LinkClosed::WriteStalled),
                }
            }
            ack = frames.next() => match ack {
                Some(Ok(_)) => heard = tokio::time::Instant::now(),
                Some(Err(error)) => return Err(error.into()),
                None => return Ok(()),
            },
            () = tokio::time::sleep_until(heard + link.timeout) => {
                return Err(LinkClosed::Silent);
            }
        }
    }
}

/// Takes the links peers dial to this node.
struct Inbound(Arc<InboundLinks>);

/// What every inbound link of the node shares.
struct InboundLinks {
    locks: Shared,
    peers: Vec<String>,
    me: NodeIndex,
    keys: ClusterKeys,
    gate: PeerGate,
    /// A link that brings nothing for this long is closed (the peer
    /// heartbeats much more often, and dials again).
    link_timeout: Duration,
    /// How often at most the node writes an empty frame back on a link it
    /// reads.
    ack_every: Duration,
}

impl PeerAcceptor for Inbound {
    fn hello(&self) -> &'static [u8] {
        PEER_HELLO
    }

    fn accept(&self, stream: TcpStream, already_read: BytesMut) {
        let links = self.0.clone();
        let Some(permit) = links.gate.begin_handshake() else {
            // Too many handshakes at once: a flood. Closing is the answer.
            if let Ok(from) = stream.peer_addr() {
                links
                    .gate
                    .refused(from.ip(), &"too many peer handshakes at once");
            }
            return;
        };
        tokio::spawn(async move {
            let from = stream.peer_addr().ok();
            if let Err(error) = links.receive_link(stream, already_read, permit).await {
                match (&error, from) {
                    (LinkRefused::Refused(reason), Some(from)) => {
                        links.gate.refused(from.ip(), reason);
                    }
                    _ => tracing::debug!(%error, "inbound peer link closed"),
                }
            }
        });
    }
}

/// How an inbound link ended badly.
#[derive(Debug, thiserror::Error)]
enum LinkRefused {
    /// Before the peer showed it belongs to this cluster.
    #[error("{0}")]
    Refused(String),
    /// After: a broken or misbehaving link of a real peer.
    #[error(transparent)]
    Failed(#[from] peer::PeerError),
}

impl InboundLinks {
    async fn receive_link(
        &self,
        stream: TcpStream,
        already_read: BytesMut,
        permit: peer::HandshakePermit,
    ) -> Result<(), LinkRefused> {
        let _ = stream.set_nodelay(true);
        let refused = |error: peer::PeerError| LinkRefused::Refused(error.to_string());
        let (mut framed, first) = peer::accept(
            stream,
            already_read,
            PEER_HELLO,
            &self.keys,
            MAX_HELLO_FRAME,
        )
        .await
        .map_err(refused)?;
        let hello: LinkHello = peer::decode(&first).map_err(refused)?;
        if hello.peers != self.peers || hello.from == self.me || hello.from >= self.peers.len() {
            tracing::warn!(
                from = hello.from,
                their_peers = ?hello.peers,
                "refused a peer with another peer list; every node needs the same --peers"
            );
            return Ok(());
        }
        let link = self.gate.admit_link(permit, hello.from as u64);
        framed.codec_mut().set_max_frame(MAX_FRAME);
        let superseded = link.superseded();
        tokio::pin!(superseded);
        let mut acked: Option<tokio::time::Instant> = None;
        let result = loop {
            let frame = tokio::select! {
                next = tokio::time::timeout(self.link_timeout, framed.next()) => match next {
                    Ok(Some(frame)) => frame,
                    Ok(None) => break Ok(()),
                    Err(_) => {
                        tracing::debug!(from = hello.from, "peer link idle; closing");
                        break Ok(());
                    }
                },
                () = &mut superseded => {
                    tracing::debug!(from = hello.from, "peer dialled again; closing its old link");
                    break Ok(());
                }
            };
            let messages = match frame.and_then(|frame| link_frames::unpack(&frame)) {
                Ok(messages) => messages,
                Err(error) => break Err(error.into()),
            };
            // Tells the dialling side the link still carries. Never waits:
            // an ack that cannot leave now stays buffered for the next
            // one, and a link whose acks pile up is stalled, which the
            // dialler notices by the silence.
            if acked.is_none_or(|at| at.elapsed() >= self.ack_every) {
                if framed.write_buffer().len() > MAX_UNSENT_ACKS {
                    break Ok(());
                }
                let _ = framed.feed(bytes::Bytes::new()).now_or_never();
                let _ = SinkExt::<bytes::Bytes>::flush(&mut framed).now_or_never();
                acked = Some(tokio::time::Instant::now());
            }
            self.locks.with(|node, now, events| {
                for message in messages {
                    node.drive(events, |engine, ev| {
                        engine.on_message(hello.from, message, now, ev)
                    });
                }
            });
        };
        result
    }
}
