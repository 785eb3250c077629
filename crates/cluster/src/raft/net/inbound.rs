//! The serving side of Raft peer connections: takes them through the
//! node's [`PeerGate`] and the authenticated handshake, checks the
//! dialler's hello, then reads RPCs, hands each to the local Raft node in
//! its own task, and writes the replies back in whatever order they finish.
//!
//! What one link may take is bounded: frames by [`FrameCaps`], RPCs in
//! handling by [`MAX_IN_FLIGHT`] and [`MAX_BYTES_IN_FLIGHT`] (past them
//! the link stops reading, which holds the peer back), replies queued by
//! [`REPLY_QUEUE`] (a reply that finds it full is dropped; its caller
//! times out). Every request passes [`crate::raft::net::bounds`] first; snapshot
//! parts are assembled here, in order, on the link they came on.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use baton_server::Tasks;
use bytes::{Bytes, BytesMut};
use futures_util::stream::SplitSink;
use futures_util::{SinkExt, StreamExt};
use openraft::async_runtime::WatchReceiver;
use openraft::Snapshot;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::peer::{
    self, ClusterKeys, GateLimits, HandshakePermit, LinkPermit, PeerError, PeerGate,
};
use crate::raft::members::Members;
use crate::raft::net::bounds::{self, Bounds, Complaints, Implausible};
use crate::raft::net::limits::{FrameCaps, MAX_BYTES_IN_FLIGHT, MAX_IN_FLIGHT, REPLY_QUEUE};
use crate::raft::net::link::PeerStream;
use crate::raft::net::network::PeerReach;
use crate::raft::net::rpc::{LinkHello, ReplyBody, RequestBody, RpcReply, RpcRequest, RAFT_HELLO};
use crate::raft::net::snapshot_transfer::{Assembly, AssemblyBudget, SnapshotHead};
use crate::raft::removal;
use crate::raft::storage::snapshot_store;
use crate::raft::storage::state_machine::TableHost;
use crate::raft::types::NodeId;
use crate::raft::types::RaftOf;

/// A peer that says nothing for this long is dropped; openraft's
/// heartbeats keep a live link far busier.
const IDLE_LIMIT: Duration = Duration::from_secs(30);

/// How long a refused link's dialler is given to take the reason.
const REFUSAL_SEND_WAIT: Duration = Duration::from_millis(500);

/// How a link ended badly.
#[derive(Debug, thiserror::Error)]
enum LinkEnd {
    /// Refused before it became a link: logged as a refusal.
    #[error("{0}")]
    Refused(String),
    #[error(transparent)]
    Broke(#[from] PeerError),
}

fn refused(error: impl std::fmt::Display) -> LinkEnd {
    LinkEnd::Refused(error.to_string())
}

/// Takes a node's Raft peer connections.
pub struct RaftAcceptor<H: TableHost> {
    raft: RaftOf<H>,
    me: NodeId,
    keys: ClusterKeys,
    caps: FrameCaps,
    gate: PeerGate,
    budget: AssemblyBudget,
    complaints: Complaints,
    /// Whether each peer can be reached: a link it opens says it can.
    reach: PeerReach,
    /// The node's tasks: each peer connection's handler, its reply writer
    /// and its calls into openraft stop with the node's server.
    tasks: Tasks,
}

impl<H: TableHost> std::fmt::Debug for RaftAcceptor<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RaftAcceptor")
            .field("me", &self.me)
            .field("caps", &self.caps)
            .finish_non_exhaustive()
    }
}

impl<H: TableHost> RaftAcceptor<H> {
    /// The acceptor of node `me` of a cluster seeded with `peers` (which
    /// size its handshake limit), taking peers that hold one of `keys`.
    pub fn new(raft: RaftOf<H>, me: NodeId, peers: Vec<String>, keys: ClusterKeys) -> Arc<Self> {
        RaftAcceptor::new_in(raft, me, peers, keys, Tasks::new(), PeerReach::default())
    }

    /// The same, with its tasks among the node's `tasks`, telling `reach`
    /// of each peer that opens a link.
    pub fn new_in(
        raft: RaftOf<H>,
        me: NodeId,
        peers: Vec<String>,
        keys: ClusterKeys,
        tasks: Tasks,
        reach: PeerReach,
    ) -> Arc<Self> {
        let acceptor = Arc::new(RaftAcceptor {
            raft,
            me,
            caps: FrameCaps::for_cluster(),
            gate: PeerGate::new(GateLimits::for_cluster(peers.len())),
            keys,
            budget: AssemblyBudget::default(),
            complaints: Complaints::default(),
            reach,
            tasks,
        });
        acceptor.keep_peer_ips(peers);
        acceptor
    }

    /// Gives the gate the addresses of the seeds and of the membership's
    /// nodes: IPs at once, names as they resolve, read again now and then.
    fn keep_peer_ips(self: &Arc<Self>, seeds: Vec<String>) {
        let this = self.clone();
        let peers = move || {
            let membership = this
                .raft
                .metrics()
                .borrow_watched()
                .membership_config
                .clone();
            let mut peers = seeds.clone();
            peers.extend(Members::of(membership.membership()).nodes.into_values());
            peers.sort_unstable();
            peers.dedup();
            peers
        };
        self.gate.set_peer_ips(peer::known_ips::literal_ips(
            peers().iter().map(String::as_str),
        ));
        let this = self.clone();
        self.tasks.spawn(async move {
            peer::known_ips::keep_current(&this.gate, peers).await;
        });
    }

    pub fn gate(&self) -> &PeerGate {
        &self.gate
    }

    /// Takes a connection from `from` whose first bytes, `already_read`,
    /// start with [`RAFT_HELLO`], in its source's handshake budget.
    pub fn take<S: PeerStream>(self: &Arc<Self>, stream: S, already_read: BytesMut, from: IpAddr) {
        let permit = self.gate.begin_handshake(from);
        let this = self.clone();
        self.tasks.spawn(async move {
            match this.serve(stream, already_read, permit).await {
                Ok(()) => {}
                Err(LinkEnd::Refused(reason)) => this.gate.refused(from, &reason),
                Err(LinkEnd::Broke(error)) => tracing::debug!(%error, "raft peer link closed"),
            }
        });
    }

    async fn serve<S: PeerStream>(
        &self,
        stream: S,
        already_read: BytesMut,
        permit: HandshakePermit,
    ) -> Result<(), LinkEnd> {
        let handshake = peer::accept_telling(
            stream,
            already_read,
            RAFT_HELLO,
            &self.keys,
            self.caps.hello,
            || permit.key_shown(),
        );
        let (mut framed, first) = tokio::select! {
            accepted = handshake => accepted.map_err(refused)?,
            () = permit.evicted() => return Err(refused(peer::EVICTED)),
        };
        let hello: LinkHello = peer::decode(&first).map_err(refused)?;
        if let Some(reason) = self.refusal_of(&hello) {
            tell_refusal(&mut framed, &reason).await;
            return Err(LinkEnd::Refused(reason));
        }
        let link = self.gate.admit_link(permit, hello.from);
        self.reach.heard_from(hello.from);
        framed.codec_mut().set_max_frame(self.caps.request);
        self.run(framed, hello.from, &link).await
    }

    /// Why a link with `hello` is refused, if it is. The peer list is not
    /// compared: it seeds a fresh cluster only, and a node that joined
    /// later may have been given another one.
    fn refusal_of(&self, hello: &LinkHello) -> Option<String> {
        if hello.to != self.me {
            return Some(format!(
                "a wrong node id, not a wrong key: a raft peer dials this node as node {}, but it is node {} (a node added with `baton member add` must run with --join, on an empty data directory)",
                hello.to, self.me
            ));
        }
        if hello.from == self.me || !crate::raft::members::plausible_id(hello.from) {
            return Some(format!("a raft peer that says it is node {}", hello.from));
        }
        None
    }

    /// Serves an admitted link until it closes, idles out or is superseded.
    async fn run<S: PeerStream>(
        &self,
        framed: peer::SecureFramed<S>,
        from: NodeId,
        link: &LinkPermit,
    ) -> Result<(), LinkEnd> {
        let (sink, mut frames) = framed.split();
        let (tx, rx) = mpsc::channel::<Bytes>(REPLY_QUEUE);
        let writer = self.tasks.spawn(async move {
            let _ = write_replies(sink, rx).await;
        });
        let in_flight = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
        let bytes_in_flight = Arc::new(Semaphore::new(MAX_BYTES_IN_FLIGHT));
        let mut assembly = Assembly::new(self.budget.clone());
        let superseded = link.superseded();
        tokio::pin!(superseded);
        let result = loop {
            // Backpressure: no slot, no reading.
            let slot = tokio::select! {
                () = &mut superseded => break Ok(()),
                slot = in_flight.clone().acquire_owned() => match slot {
                    Ok(slot) => slot,
                    Err(_) => break Ok(()),
                },
            };
            let stalls_at = assembly.stalls_at();
            let frame = tokio::select! {
                () = &mut superseded => break Ok(()),
                () = tokio::time::sleep_until(stalls_at.unwrap_or_else(Instant::now)),
                    if stalls_at.is_some() =>
                {
                    tracing::debug!(from, "gave up a stalled snapshot transfer");
                    assembly.give_up();
                    continue;
                }
                next = tokio::time::timeout(IDLE_LIMIT, frames.next()) => match next {
                    Ok(Some(Ok(frame))) => frame,
                    Ok(Some(Err(error))) => break Err(LinkEnd::Broke(error)),
                    Ok(None) | Err(_) => break Ok(()),
                },
            };
            let weight = u32::try_from(frame.len().clamp(1, MAX_BYTES_IN_FLIGHT)).unwrap_or(1);
            let Ok(held) = bytes_in_flight.clone().acquire_many_owned(weight).await else {
                break Ok(());
            };
            let request: RpcRequest = match peer::decode(&frame) {
                Ok(request) => request,
                Err(error) => break Err(LinkEnd::Broke(error)),
            };
            drop(frame);
            let slots = (slot, held);
            self.dispatch(request, from, &mut assembly, &tx, slots);
        };
        drop(tx);
        writer.abort();
        result
    }

    /// Peer `id` by its address in the membership, for a log line.
    fn name_of(&self, id: NodeId) -> String {
        let membership = self
            .raft
            .metrics()
            .borrow_watched()
            .membership_config
            .clone();
        Members::of(membership.membership()).name_of(id)
    }

    /// Checks one request and starts its handling.
    fn dispatch(
        &self,
        request: RpcRequest,
        from: NodeId,
        assembly: &mut Assembly,
        tx: &mpsc::Sender<Bytes>,
        slots: (OwnedSemaphorePermit, OwnedSemaphorePermit),
    ) {
        let term = self.raft.metrics().borrow_watched().current_term;
        let wall_ms = baton_server::token_floor::wall_clock_ms();
        let bounds = Bounds { term, wall_ms };
        let id = request.id;
        let refuse = |what: &str, why: Implausible| {
            let peer = self.name_of(from);
            self.complaints.refused(from, &peer, what, &why);
            reply(tx, id, ReplyBody::failed(&why));
        };
        let body = match request.body {
            RequestBody::SnapshotPart(part) => {
                if let Some(head) = &part.head {
                    if let Err(why) = bounds.check_snapshot_head(&head.vote, &head.meta) {
                        assembly.give_up();
                        return refuse("snapshot", why);
                    }
                }
                match assembly.receive(part, Instant::now()) {
                    Ok(None) => return reply(tx, id, ReplyBody::PartReceived),
                    Ok(Some((head, data))) => {
                        let raft = self.raft.clone();
                        let tx = tx.clone();
                        self.tasks.spawn(async move {
                            let body = install(&raft, head, data).await;
                            reply(&tx, id, body);
                            drop(slots);
                        });
                        return;
                    }
                    Err(error) => return reply(tx, id, ReplyBody::failed(&error)),
                }
            }
            body => body,
        };
        let checked = match &body {
            RequestBody::Append(rpc) => bounds.check_append(rpc).map_err(|w| ("append", w)),
            RequestBody::Vote(rpc) => bounds.check_vote(rpc).map_err(|w| ("vote", w)),
            RequestBody::PreVote(rpc) => bounds.check_vote(rpc).map_err(|w| ("pre-vote", w)),
            RequestBody::TransferLeader(rpc) => {
                bounds.check_transfer(rpc).map_err(|w| ("transfer", w))
            }
            RequestBody::SnapshotPart(_) => Ok(()),
        };
        if let Err((what, why)) = checked {
            return refuse(what, why);
        }
        if let RequestBody::Vote(rpc) | RequestBody::PreVote(rpc) = &body {
            let committed = self
                .raft
                .server_metrics()
                .borrow_watched()
                .committed_membership_config
                .clone();
            if let Some(at) = removal::refuses_vote(&committed, from, rpc.last_log_id) {
                return reply(tx, id, ReplyBody::NotMember(at));
            }
        }
        let raft = self.raft.clone();
        let tx = tx.clone();
        self.tasks.spawn(async move {
            let body = handle(&raft, body).await;
            reply(&tx, id, body);
            drop(slots);
        });
    }
}

/// Tells the dialler why its link is refused (a reply to no call: id 0),
/// so that its log says it too. Best effort, and brief.
async fn tell_refusal<S: PeerStream>(framed: &mut peer::SecureFramed<S>, reason: &str) {
    if let Ok(frame) = peer::encode(&RpcReply {
        id: 0,
        body: ReplyBody::failed(&reason),
    }) {
        let _ = tokio::time::timeout(REFUSAL_SEND_WAIT, framed.send(frame)).await;
    }
}

/// Queues a reply; a full queue or a closed link drops it (the caller
/// times out).
fn reply(tx: &mpsc::Sender<Bytes>, id: u64, body: ReplyBody) {
    match peer::encode(&RpcReply { id, body }) {
        Ok(frame) => {
            if tx.try_send(frame).is_err() {
                tracing::debug!(id, "raft reply dropped: the link's queue is full or closed");
            }
        }
        Err(error) => tracing::debug!(%error, "raft reply does not encode"),
    }
}

async fn write_replies<S: PeerStream>(
    mut sink: SplitSink<peer::SecureFramed<S>, Bytes>,
    mut rx: mpsc::Receiver<Bytes>,
) -> Result<(), PeerError> {
    let mut batch = Vec::with_capacity(REPLY_QUEUE);
    while rx.recv_many(&mut batch, REPLY_QUEUE).await > 0 {
        for frame in batch.drain(..) {
            sink.feed(frame).await?;
        }
        sink.flush().await?;
    }
    Ok(())
}

/// Installs an assembled snapshot once its table passes the bounds.
async fn install<H: TableHost>(raft: &RaftOf<H>, head: SnapshotHead, data: Vec<u8>) -> ReplyBody {
    let checked = snapshot_store::decode_table(&data)
        .map_err(|e| Implausible::SnapshotData(e.to_string()))
        .and_then(|table| {
            let wall_ms = baton_server::token_floor::wall_clock_ms();
            bounds::check_table(&head.meta, &table, wall_ms)
        });
    if let Err(why) = checked {
        tracing::warn!(reason = %why, "refused a snapshot from the leader");
        return ReplyBody::failed(&why);
    }
    let snapshot = Snapshot {
        meta: head.meta,
        snapshot: data,
    };
    match raft.install_full_snapshot(head.vote, snapshot).await {
        Ok(response) => ReplyBody::Snapshot(response),
        Err(e) => ReplyBody::failed(&e),
    }
}

async fn handle<H: TableHost>(raft: &RaftOf<H>, body: RequestBody) -> ReplyBody {
    match body {
        RequestBody::Append(rpc) => match raft.append_entries(rpc).await {
            Ok(response) => ReplyBody::Append(response),
            Err(e) => ReplyBody::failed(&e),
        },
        RequestBody::Vote(rpc) => match raft.vote(rpc).await {
            Ok(response) => ReplyBody::Vote(response),
            Err(e) => ReplyBody::failed(&e),
        },
        RequestBody::PreVote(rpc) => match raft.pre_vote(rpc).await {
            Ok(response) => ReplyBody::Vote(response),
            Err(e) => ReplyBody::failed(&e),
        },
        RequestBody::TransferLeader(rpc) => match raft.handle_transfer_leader(rpc).await {
            Ok(response) => ReplyBody::TransferLeader(response),
            Err(e) => ReplyBody::failed(&e),
        },
        // Assembled on the link, never handled alone.
        RequestBody::SnapshotPart(_) => ReplyBody::failed(&"a snapshot part out of place"),
    }
}

#[cfg(test)]
#[path = "inbound_tests.rs"]
mod tests;
