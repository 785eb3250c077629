//! The outgoing side of the peer links: the pump that moves the engine's
//! messages onto one bounded queue per peer, and the task per peer that
//! dials it and writes its queue. Every task runs until the shell's
//! cancellation token fires, inside the shell's task tracker.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use super::super::engine::LinkRefused;
use super::super::link_frames::{self, MAX_FRAME};
use super::super::messages::{LinkHello, LinkRefusal, NodeIndex, PriorityMessage};
use super::{Shared, Tasks};
use crate::peer::reach_log::ReachLog;
use crate::peer::{self, ClusterKey, PEER_HELLO};

/// Pause between attempts to reach a peer that is down.
const REDIAL_PAUSE: Duration = Duration::from_millis(100);

/// How the links to the peers are set up.
pub(super) struct Outbound<'a> {
    pub(super) peers: &'a [String],
    pub(super) me: NodeIndex,
    pub(super) key: &'a ClusterKey,
    pub(super) timeout: Duration,
}

impl Outbound<'_> {
    /// Spawns a dialling task per peer and the pump that feeds them.
    pub(super) fn spawn(&self, locks: &Shared, tasks: &Tasks) {
        let mut links = Vec::with_capacity(self.peers.len());
        for (index, addr) in self.peers.iter().enumerate() {
            if index == self.me {
                links.push(None);
                continue;
            }
            let (tx, rx) = mpsc::channel(LINK_QUEUE);
            let overflowed = Arc::new(AtomicBool::new(false));
            let link = OutboundLink {
                index,
                addr: addr.clone(),
                hello: LinkHello {
                    from: self.me,
                    peers: self.peers.to_vec(),
                },
                key: self.key.clone(),
                timeout: self.timeout,
                overflowed: overflowed.clone(),
                reach: ReachLog::new(addr.clone()),
            };
            tasks.spawn(dial(link, rx, locks.clone()));
            links.push(Some(LinkQueue { tx, overflowed }));
        }
        tasks.spawn(pump(locks.clone(), links));
    }
}

/// Messages queued for one peer's link, at most. Past it the link is
/// behind for good: it is closed, and the standby resyncs once it is back.
/// Room for a whole table of `MAX_TABLE_LOCKS` in pieces, which the engine
/// queues at once; the queue drains or the link is torn down within a
/// failure timeout, which bounds what it holds in time as well.
const LINK_QUEUE: usize = 1 << 16;

/// One peer's outgoing queue (messages encoded for a frame, see
/// [`link_frames::encode`]), and whether it overflowed.
struct LinkQueue {
    tx: mpsc::Sender<Bytes>,
    overflowed: Arc<AtomicBool>,
}

/// Moves the engine's outbox onto the links, in order.
async fn pump(locks: Shared, links: Vec<Option<LinkQueue>>) {
    loop {
        locks.output_ready().await;
        // Let every task already woken (the connections' requests of this
        // turn of the runtime) change the table first: their commands then
        // leave in one message and one write per peer, instead of one each
        // (each write wakes a standby, and on a shared core that costs the
        // active a context switch).
        tokio::task::yield_now().await;
        let output = locks.with(|node, _, _| node.take_transmits());
        let mut encoder = OnceEncoder::default();
        for (to, message) in output {
            if let Some(Some(link)) = links.get(to) {
                let Some(encoded) = encoder.encode(message) else {
                    // Cannot happen with the engine's messages (each is
                    // within the cap); a message left out leaves a gap,
                    // so the link starts over as if it had overflowed.
                    link.overflowed.store(true, Ordering::Release);
                    continue;
                };
                // Full: the link is far behind (a stalled peer); dropping
                // one message leaves a gap, so the link is torn down and
                // the peer starts over from a snapshot. Closed: the
                // runtime is going down.
                if let Err(mpsc::error::TrySendError::Full(_)) = link.tx.try_send(encoded) {
                    link.overflowed.store(true, Ordering::Release);
                }
            }
        }
    }
}

/// Encodes the messages of one outbox for the links, each distinct
/// message once: the engine queues the same batch of commands (and the
/// same heartbeat) for every standby, and encoding each copy showed in
/// the active's profile. Only the last few messages are remembered, which
/// covers that pattern (one batch, or a few, per standby in turn).
#[derive(Default)]
struct OnceEncoder {
    recent: std::collections::VecDeque<(PriorityMessage, Bytes)>,
}

/// Encoded messages an [`OnceEncoder`] remembers.
const ENCODER_MEMORY: usize = 4;

impl OnceEncoder {
    /// `message` as it rides in a frame; None if it does not encode.
    fn encode(&mut self, message: PriorityMessage) -> Option<Bytes> {
        // Comparing is far cheaper than encoding: keys are shared
        // (`Arc`), so equal copies compare by pointer.
        if let Some((_, bytes)) = self.recent.iter().find(|(seen, _)| *seen == message) {
            return Some(bytes.clone());
        }
        let bytes = link_frames::encode(&message).ok()?;
        if self.recent.len() == ENCODER_MEMORY {
            self.recent.pop_front();
        }
        self.recent.push_back((message, bytes.clone()));
        Some(bytes)
    }
}

/// Keeps the outgoing link to one peer up and writes the engine's messages
/// to it. While the peer is unreachable its messages are dropped: they
/// would be stale by the time it came back, and heartbeats, sync requests
/// and snapshots are all repeated as needed.
async fn dial(link: OutboundLink, mut outbox: mpsc::Receiver<Bytes>, locks: Shared) {
    let mut batch = Vec::with_capacity(64);
    // The peer refused the link since it was last found gone.
    let mut refused = false;
    loop {
        // Short, so that the first attempt after a heal comes soon.
        // By name or address: a name is resolved at every dial, so a peer
        // restarted on a new IP is found.
        let connected = tokio::time::timeout(link.timeout, TcpStream::connect(&link.addr)).await;
        match &connected {
            Ok(Ok(_)) => {
                link.reach.reached();
            }
            Ok(Err(error)) => {
                link.reach.failed(error);
                // Only after a refusal: a dead peer is dialled ten times a
                // second, and each report takes the node's lock.
                if error.kind() == std::io::ErrorKind::ConnectionRefused && refused {
                    refused = false;
                    locks.with(|node, now, _| node.nobody_listening(link.index, now));
                }
            }
            Err(_) => {
                link.reach.failed(&"no connection within a failure timeout");
            }
        }
        if let Ok(Ok(stream)) = connected {
            let _ = stream.set_nodelay(true);
            // What queued while there was no link is stale.
            while outbox.try_recv().is_ok() {}
            link.overflowed.store(false, Ordering::Release);
            if let Err(error) = send_link(stream, &link, &mut outbox, &mut batch).await {
                tracing::debug!(peer = link.index, %error, "peer link down");
                // The engine logs refusals (once a minute per peer and
                // reason) and decides what they mean for the role.
                if let LinkClosed::Refused(why) = error {
                    refused = true;
                    locks.with(|node, now, _| node.link_refused(link.index, why, now));
                }
            }
            locks.with(|node, now, _| node.link_down(link.index, now));
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
    /// A peer that cannot be dialled is logged once, then summed up.
    reach: ReachLog,
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
    #[error("the peer answers but refuses the link: {0}")]
    Refused(LinkRefused),
}

/// A failed opening that shows the peer answered and refused: its
/// handshake reply said it holds another key, or was no handshake at all.
/// A hang-up or a timeout is no refusal: a node that is going down or
/// stopped gives those.
fn opening_refused(error: peer::PeerError) -> LinkClosed {
    match error {
        peer::PeerError::WrongKey => LinkClosed::Refused(LinkRefused::Key),
        peer::PeerError::Malformed => LinkClosed::Refused(LinkRefused::Handshake),
        other => LinkClosed::Peer(other),
    }
}

/// What a frame from the dialled node means: an empty one is a sign of
/// life; any other is its refusal of the link (see [`LinkRefusal`]).
fn read_back(frame: &bytes::BytesMut) -> Result<(), LinkClosed> {
    if frame.is_empty() {
        return Ok(());
    }
    match peer::decode::<LinkRefusal>(frame)? {
        LinkRefusal::PeerList { peers } => {
            tracing::debug!(?peers, "the peer's list");
            Err(LinkClosed::Refused(LinkRefused::PeerList))
        }
    }
}

async fn send_link(
    stream: TcpStream,
    link: &OutboundLink,
    outbox: &mut mpsc::Receiver<Bytes>,
    batch: &mut Vec<Bytes>,
) -> Result<(), LinkClosed> {
    let opening = async {
        let first = peer::encode(&link.hello)?;
        peer::connect(stream, PEER_HELLO, &link.key, first, MAX_FRAME).await
    };
    let mut frames = match tokio::time::timeout(link.timeout, opening).await {
        Ok(framed) => framed.map_err(opening_refused)?,
        Err(_) => return Err(LinkClosed::WriteStalled),
    };
    // The peer writes an empty frame back now and then for what it reads:
    // a link that brings none for a failure timeout is stale.
    let mut heard = tokio::time::Instant::now();
    let mut wrote = std::time::Instant::now();
    loop {
        tokio::select! {
            n = outbox.recv_many(batch, MAX_BATCH) => {
                if n == 0 {
                    return Ok(());
                }
                if wrote.elapsed() < BUSY_GAP {
                    coalesce(outbox, batch).await;
                }
                if link.overflowed.load(Ordering::Acquire) {
                    return Err(LinkClosed::Overflowed);
                }
                let write = async {
                    for frame in link_frames::pack(batch) {
                        frames.feed(frame).await?;
                    }
                    SinkExt::<bytes::Bytes>::flush(&mut frames).await?;
                    Ok::<_, peer::PeerError>(())
                };
                match tokio::time::timeout(link.timeout, write).await {
                    Ok(result) => result?,
                    Err(_) => return Err(LinkClosed::WriteStalled),
                }
                wrote = std::time::Instant::now();
            }
            ack = frames.next() => match ack {
                Some(Ok(frame)) => {
                    read_back(&frame)?;
                    heard = tokio::time::Instant::now();
                }
                Some(Err(error)) => return Err(error.into()),
                None => return Ok(()),
            },
            () = tokio::time::sleep_until(heard + link.timeout) => {
                return Err(LinkClosed::Silent);
            }
        }
    }
}

/// Messages one write of a link takes from its queue, at most.
const MAX_BATCH: usize = 64;
/// A link that wrote less than this long ago is busy: see [`coalesce`].
const BUSY_GAP: std::time::Duration = std::time::Duration::from_millis(1);
/// Turns of the runtime a busy link lets pass before it writes.
const COALESCE_TURNS: usize = 2;

/// On a busy link, lets a few turns of the runtime pass (each
/// `yield_now` waits for the runtime's next poll of its sockets, so the
/// connections' requests of that turn run, and the pump queues their
/// commands) and takes what they added: one write, one wake-up of the
/// standby, for several turns' commands: a write per turn woke a standby
/// that preempted the active, and those context switches were the
/// largest cost an active had beyond a single node's. An idle link writes at once: the delay is a
/// few turns of a busy runtime, never a timer.
async fn coalesce(outbox: &mut mpsc::Receiver<Bytes>, batch: &mut Vec<Bytes>) {
    for _ in 0..COALESCE_TURNS {
        tokio::task::yield_now().await;
    }
    while batch.len() < MAX_BATCH {
        match outbox.try_recv() {
            Ok(message) => batch.push(message),
            Err(_) => break,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(bytes: &[u8]) -> bytes::BytesMut {
        bytes::BytesMut::from(bytes)
    }

    #[test]
    fn an_empty_frame_is_a_sign_of_life_and_a_refusal_names_the_peer_list() {
        assert!(read_back(&frame(b"")).is_ok());
        let refusal = LinkRefusal::PeerList {
            peers: vec!["10.0.0.1:7411".into()],
        };
        let encoded = peer::encode(&refusal).expect("encodes");
        assert!(matches!(
            read_back(&frame(&encoded)),
            Err(LinkClosed::Refused(LinkRefused::PeerList))
        ));
        assert!(matches!(
            read_back(&frame(&[0xff; 8])),
            Err(LinkClosed::Peer(_))
        ));
    }

    #[test]
    fn only_an_answer_at_the_opening_is_a_refusal() {
        let refused = |e| matches!(opening_refused(e), LinkClosed::Refused(_));
        assert!(refused(peer::PeerError::WrongKey));
        assert!(refused(peer::PeerError::Malformed));
        // A hang-up or a reset: a node going down, or a flood's victim.
        let eof = std::io::Error::from(std::io::ErrorKind::UnexpectedEof);
        assert!(!refused(peer::PeerError::Io(eof)));
        assert!(!refused(peer::PeerError::HandshakeTimeout));
    }
}
