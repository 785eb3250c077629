//! The incoming side of the peer links: a peer's connection on the client
//! port is authenticated, its hello checked against this node's peer list,
//! and its frames fed to the engine in order, with an empty frame written
//! back now and then as a sign of life.

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use futures_util::{FutureExt, SinkExt, StreamExt};
use tokio::net::TcpStream;

use baton_server::PeerAcceptor;

use super::super::link_frames::{self, MAX_FRAME};
use super::super::messages::{LinkHello, LinkRefusal, NodeIndex};
use super::counted::Counted;
use super::{Shared, Tasks};
use crate::peer::refusals::RefusalLog;
use crate::peer::{self, ClusterKeys, PeerGate, PEER_HELLO};

/// Bytes of acks an inbound link may have waiting to be written; past it
/// the dialler is not reading, and the link is closed.
const MAX_UNSENT_ACKS: usize = 4096;
/// The largest first frame of an incoming link (its `LinkHello`: a peer
/// list of addresses).
const MAX_HELLO_FRAME: usize = 64 * 1024;
/// The longest address of a refused peer the log shows.
const MAX_SHOWN_ADDR: usize = 256;

/// Takes the links peers dial to this node.
pub(super) struct Inbound {
    pub(super) links: Arc<InboundLinks>,
    /// Each link's reader runs in the shell's tracker, until its token.
    pub(super) tasks: Tasks,
}

/// What every inbound link of the node shares.
pub(super) struct InboundLinks {
    pub(super) locks: Shared,
    pub(super) peers: Vec<String>,
    pub(super) me: NodeIndex,
    pub(super) keys: ClusterKeys,
    pub(super) gate: PeerGate,
    /// A link that brings nothing for this long is closed (the peer
    /// heartbeats much more often, and dials again).
    pub(super) link_timeout: Duration,
    /// How often at most the node writes an empty frame back on a link it
    /// reads.
    pub(super) ack_every: Duration,
    /// Peers refused for another peer list, by the address they give
    /// themselves: one log line per peer per interval.
    pub(super) peer_lists: RefusalLog<String>,
}

impl PeerAcceptor for Inbound {
    fn hello(&self) -> &'static [u8] {
        PEER_HELLO
    }

    fn accept(&self, stream: TcpStream, already_read: BytesMut) {
        let links = self.links.clone();
        // Without its address a connection cannot be counted against its
        // source's budget; such a socket is already gone.
        let Ok(from) = stream.peer_addr() else {
            return;
        };
        let permit = links.gate.begin_handshake(from.ip());
        self.tasks.spawn(async move {
            if let Err(error) = links.receive_link(stream, already_read, permit).await {
                match &error {
                    LinkRefused::Refused(reason) => links.gate.refused(from.ip(), reason),
                    LinkRefused::Failed(_) => tracing::debug!(%error, "inbound peer link closed"),
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

/// An authenticated link's framing.
type Framed = peer::SecureFramed<Counted<TcpStream>>;

impl InboundLinks {
    async fn receive_link(
        &self,
        stream: TcpStream,
        already_read: BytesMut,
        permit: peer::HandshakePermit,
    ) -> Result<(), LinkRefused> {
        let _ = stream.set_nodelay(true);
        let refused = |error: peer::PeerError| LinkRefused::Refused(error.to_string());
        let handshake = peer::accept_telling(
            Counted::new(stream),
            already_read,
            PEER_HELLO,
            &self.keys,
            MAX_HELLO_FRAME,
            || permit.key_shown(),
        );
        let (mut framed, first) = tokio::select! {
            accepted = handshake => accepted.map_err(refused)?,
            () = permit.evicted() => return Err(LinkRefused::Refused(peer::EVICTED.to_string())),
        };
        let hello: LinkHello = peer::decode(&first).map_err(refused)?;
        if hello.peers != self.peers || hello.from == self.me || hello.from >= self.peers.len() {
            self.refuse_peer_list(&mut framed, &hello).await;
            return Ok(());
        }
        let link = self.gate.admit_link(permit, hello.from as u64);
        framed.codec_mut().set_max_frame(MAX_FRAME);
        let superseded = link.superseded();
        self.read_link(framed, hello.from, superseded).await
    }

    /// Tells a peer with another peer list (or another place in it) why
    /// its link is refused, so that it knows this node answers, and logs
    /// it once a minute per peer.
    async fn refuse_peer_list(&self, framed: &mut Framed, hello: &LinkHello) {
        let theirs = hello.peers.get(hello.from).map_or("?", String::as_str);
        let shown: String = theirs.chars().take(MAX_SHOWN_ADDR).collect();
        self.peer_lists
            .refused(shown, &format_args!("their peers: {:?}", hello.peers));
        let refusal = LinkRefusal::PeerList {
            peers: self.peers.clone(),
        };
        let Ok(frame) = peer::encode(&refusal) else {
            return;
        };
        // Sent, then the write side closed, then what the dialler sent
        // meanwhile read and dropped until it hangs up: closing with its
        // frames unread would reset the connection, and a reset can
        // destroy the refusal before the dialler reads it. All bounded:
        // a dialler that neither reads nor hangs up gets nothing more.
        let linger = async {
            framed.send(frame).await?;
            SinkExt::<bytes::Bytes>::close(framed).await?;
            while let Some(Ok(_)) = framed.next().await {}
            Ok::<_, peer::PeerError>(())
        };
        let _ = tokio::time::timeout(self.link_timeout, linger).await;
    }

    /// Feeds the engine the frames of peer `from`'s link until it ends, goes
    /// idle, or the peer dials again (`superseded`). Bytes that came in
    /// since the last whole frame count as a sign of life, checked every
    /// `ack_every`: a large frame, or a queue of them behind a busy
    /// sender, is no silence.
    async fn read_link(
        &self,
        mut framed: Framed,
        from: NodeIndex,
        superseded: impl std::future::Future<Output = ()>,
    ) -> Result<(), LinkRefused> {
        tokio::pin!(superseded);
        let mut acked: Option<tokio::time::Instant> = None;
        let mut progress = tokio::time::interval(self.ack_every.max(Duration::from_millis(1)));
        progress.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut counted = framed.get_ref().read();
        let mut idle_at = tokio::time::Instant::now() + self.link_timeout;
        loop {
            let frame = tokio::select! {
                next = framed.next() => match next {
                    Some(frame) => frame,
                    None => return Ok(()),
                },
                _ = progress.tick() => {
                    let read = framed.get_ref().read();
                    if read != counted {
                        counted = read;
                        idle_at = tokio::time::Instant::now() + self.link_timeout;
                        if !ack(&mut framed, &mut acked, self.ack_every) {
                            return Ok(());
                        }
                        self.locks
                            .with(|node, now, events| node.link_progress(from, now, events));
                    }
                    continue;
                }
                () = tokio::time::sleep_until(idle_at) => {
                    tracing::debug!(from, "peer link idle; closing");
                    return Ok(());
                }
                () = &mut superseded => {
                    tracing::debug!(from, "peer dialled again; closing its old link");
                    return Ok(());
                }
            };
            counted = framed.get_ref().read();
            idle_at = tokio::time::Instant::now() + self.link_timeout;
            let messages = frame.and_then(|frame| link_frames::unpack(&frame))?;
            if !ack(&mut framed, &mut acked, self.ack_every) {
                return Ok(());
            }
            self.locks
                .with(|node, now, events| node.receive(from, messages, now, events));
        }
    }
}

/// Tells the dialling side the link still carries, at most once per
/// `every`. Never waits: an ack that cannot leave now stays buffered for
/// the next one, and a link whose acks pile up is stalled, which the
/// dialler notices by the silence. False if they piled up: the link is
/// then closed.
fn ack(framed: &mut Framed, acked: &mut Option<tokio::time::Instant>, every: Duration) -> bool {
    if acked.is_some_and(|at| at.elapsed() < every) {
        return true;
    }
    if framed.write_buffer().len() > MAX_UNSENT_ACKS {
        return false;
    }
    let _ = framed.feed(bytes::Bytes::new()).now_or_never();
    let _ = SinkExt::<bytes::Bytes>::flush(framed).now_or_never();
    *acked = Some(tokio::time::Instant::now());
    true
}
