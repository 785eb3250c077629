//! openraft's view of the network: one [`Link`] per peer, shared by the
//! replication, heartbeat and snapshot clients openraft makes for it.
//! Snapshots go out in parts ([`crate::raft::net::snapshot_transfer`]); replies
//! whose terms are implausible are refused ([`crate::raft::net::bounds`]).

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::Stream;
use openraft::base::{BoxFuture, BoxStream};
use openraft::errors::{
    NetworkError, RPCError, ReplicationClosed, StreamingError, Timeout, Unreachable,
};
use openraft::network::{RPCOption, RaftNetworkFactory, RaftNetworkV2};
use openraft::raft::StreamAppendResult;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, TransferLeaderRequest,
    TransferLeaderResponse, VoteRequest, VoteResponse,
};
use openraft::{BasicNode, OptionalSend};

use crate::peer::reach_log::ReachLog;
use crate::peer::ClusterKey;
use crate::raft::net::append_stream;
use crate::raft::net::bounds::{self, Complaints, Implausible};
use crate::raft::net::link::{CallError, Dialer, Link};
use crate::raft::net::rpc::{LinkHello, ReplyBody, RequestBody};
use crate::raft::net::snapshot_transfer::{self, SnapshotHead, MAX_SNAPSHOT_BYTES};
use crate::raft::removal::RemovalNotice;
use crate::raft::types::{NodeId, Snapshot, SnapshotData, TypeConfig, Vote};
use baton_server::Tasks;

/// The shortest time an RPC is given. openraft asks replication to time
/// out after 3/4 of a heartbeat (37.5 ms by default), which a busy follower
/// fsyncing a batch on a shared core overshoots: every such timeout
/// restarted replication and stalled commits under load. A dead peer is
/// still found by its refused connection or by elections.
const MIN_RPC_TIMEOUT: Duration = Duration::from_millis(250);

/// The shortest time one snapshot part is given: a megabyte to send, and
/// with the last part the follower's install and fsync.
const MIN_PART_TIMEOUT: Duration = Duration::from_secs(1);

/// Names snapshot transfers; a transfer id need only differ from the
/// previous one on the same link.
static NEXT_TRANSFER: AtomicU64 = AtomicU64::new(1);

/// Per peer: whether it can be reached, as one log ([`ReachLog`]) shared
/// by the clients openraft makes for it and by the inbound side, where a
/// link the peer dials says it is back (a follower seldom dials anyone:
/// without that, a peer back since would still count as out of reach).
#[derive(Debug, Clone, Default)]
pub struct PeerReach(Arc<Mutex<HashMap<NodeId, Arc<ReachLog>>>>);

impl PeerReach {
    /// The log of node `id`, at `addr`.
    fn of(&self, id: NodeId, addr: &str) -> Arc<ReachLog> {
        let mut logs = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        logs.entry(id)
            .or_insert_with(|| Arc::new(ReachLog::new(addr)))
            .clone()
    }

    /// Node `id` opened a link to this node: it is there. Returns whether
    /// that was logged (it had been out of reach).
    pub fn heard_from(&self, id: NodeId) -> bool {
        let logs = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        logs.get(&id).is_some_and(|log| log.reached())
    }
}

/// Makes (and keeps) the links to peers.
pub struct Network {
    me: NodeId,
    key: ClusterKey,
    dialer: Arc<dyn Dialer>,
    links: HashMap<NodeId, Arc<Link>>,
    /// Per peer: whether its calls get through, so a change is logged
    /// once, not per call.
    reachable: PeerReach,
    complaints: Arc<Complaints>,
    tasks: Tasks,
    /// Where a member's word that this node is not one goes.
    removal: RemovalNotice,
}

impl std::fmt::Debug for Network {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Network")
            .field("me", &self.me)
            .finish_non_exhaustive()
    }
}

impl Network {
    /// Dials peers (at the addresses of the membership) as node `me`,
    /// proving to hold `key`.
    pub fn new(me: NodeId, key: ClusterKey, dialer: Arc<dyn Dialer>) -> Network {
        Network {
            me,
            key,
            dialer,
            links: HashMap::new(),
            reachable: PeerReach::default(),
            complaints: Arc::new(Complaints::default()),
            tasks: Tasks::new(),
            removal: RemovalNotice::default(),
        }
    }

    /// The same, telling `removal` when a member says this node is none.
    pub fn with_removal(mut self, removal: RemovalNotice) -> Network {
        self.removal = removal;
        self
    }

    /// The same, sharing `reach` with the inbound side.
    pub fn with_reach(mut self, reach: PeerReach) -> Network {
        self.reachable = reach;
        self
    }

    /// The same, with the links' tasks among the node's `tasks`, so that
    /// they stop with its server.
    pub fn in_tasks(mut self, tasks: Tasks) -> Network {
        self.tasks = tasks;
        self
    }
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> PeerClient {
        let link = self
            .links
            .entry(target)
            .or_insert_with(|| {
                let hello = LinkHello {
                    from: self.me,
                    to: target,
                };
                Arc::new(Link::new(
                    node.addr.clone(),
                    hello,
                    self.key.clone(),
                    self.dialer.clone(),
                    self.tasks.clone(),
                ))
            })
            .clone();
        let reachable = self.reachable.of(target, &node.addr);
        PeerClient {
            target,
            link,
            reachable,
            complaints: self.complaints.clone(),
            removal: self.removal.clone(),
        }
    }
}

/// An openraft client of one peer.
#[derive(Debug)]
pub struct PeerClient {
    target: NodeId,
    link: Arc<Link>,
    reachable: Arc<ReachLog>,
    complaints: Arc<Complaints>,
    removal: RemovalNotice,
}

impl PeerClient {
    /// The answer to a vote request; a member's word that this node is
    /// none is passed on, and to openraft the peer is unreachable.
    fn vote_reply(
        &self,
        sent: u64,
        what: &str,
        reply: ReplyBody,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        match reply {
            ReplyBody::Vote(response) => {
                bounds::check_vote_reply(sent, &response)
                    .map_err(|why| self.implausible(what, why))?;
                Ok(response)
            }
            ReplyBody::NotMember(at) => {
                self.removal.heard(at);
                Err(RPCError::Unreachable(Unreachable::from_string(format!(
                    "{} says this node is not a member (membership of {at})",
                    self.link.addr()
                ))))
            }
            other => Err(unexpected(&other)),
        }
    }

    async fn call(
        &self,
        body: RequestBody,
        option: &RPCOption,
    ) -> Result<ReplyBody, RPCError<TypeConfig>> {
        self.call_within(body, option.soft_ttl().max(MIN_RPC_TIMEOUT))
            .await
    }

    async fn call_within(
        &self,
        body: RequestBody,
        ttl: Duration,
    ) -> Result<ReplyBody, RPCError<TypeConfig>> {
        let called = self.link.call(body, ttl).await;
        self.note_reachability(&called);
        called.map_err(|error| match error {
            CallError::Timeout(_) => RPCError::Timeout(Timeout {
                action: openraft::RPCTypes::AppendEntries,
                id: self.target,
                target: self.target,
                timeout: ttl,
            }),
            CallError::Broken => RPCError::Network(NetworkError::new(&error)),
            CallError::Unreachable(_)
            | CallError::Refused(_)
            | CallError::Overloaded
            | CallError::Waiting(_)
            | CallError::Dialling => RPCError::Unreachable(Unreachable::new(&error)),
        })
    }

    /// Logs a peer going out of reach once, then a summary per interval
    /// while it stays out, and its coming back: openraft calls a dead peer
    /// at every heartbeat, and only the dials those calls make are counted
    /// (a call while the next dial is not due fails without one).
    fn note_reachability<T>(&self, called: &Result<T, CallError>) {
        match called {
            Ok(_) => {
                self.reachable.reached();
            }
            Err(
                error @ (CallError::Unreachable(_) | CallError::Refused(_) | CallError::Broken),
            ) => {
                self.reachable.failed(error);
            }
            // Slow or busy: still there.
            Err(CallError::Timeout(_) | CallError::Overloaded) => {}
            // No dial of its own: the one under way, or the last, counts.
            Err(CallError::Waiting(_) | CallError::Dialling) => {}
        }
    }

    /// Refuses an implausible reply: logged (rate limited), and to
    /// openraft the peer is unreachable.
    pub(crate) fn implausible(&self, what: &str, why: Implausible) -> RPCError<TypeConfig> {
        self.complaints
            .refused(self.target, self.link.addr(), what, &why);
        RPCError::Unreachable(Unreachable::new(&why))
    }

    /// Sends a snapshot part by part, each acknowledged before the next.
    async fn send_snapshot(
        &self,
        vote: Vote,
        snapshot: Snapshot,
        option: &RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, RPCError<TypeConfig>> {
        let data = snapshot.snapshot;
        if data.len() > MAX_SNAPSHOT_BYTES {
            let why = format!(
                "a snapshot of {} bytes is over the limit of {MAX_SNAPSHOT_BYTES}; the follower cannot be restored",
                data.len()
            );
            tracing::error!(follower = self.link.addr(), "{why}");
            return Err(RPCError::Unreachable(Unreachable::from_string(why)));
        }
        let sent = vote.leader_id.term;
        let head = SnapshotHead {
            vote,
            meta: snapshot.meta,
        };
        let transfer = NEXT_TRANSFER.fetch_add(1, Ordering::Relaxed);
        let ttl = option.soft_ttl().max(MIN_PART_TIMEOUT);
        let parts = snapshot_transfer::parts(transfer, head, &data);
        drop(data);
        let count = parts.len();
        for (i, part) in parts.into_iter().enumerate() {
            let last = i + 1 == count;
            match self
                .call_within(RequestBody::SnapshotPart(part), ttl)
                .await?
            {
                ReplyBody::PartReceived if !last => {}
                ReplyBody::Snapshot(response) if last => {
                    bounds::check_reply_term(sent, response.vote.leader_id.term)
                        .map_err(|why| self.implausible("snapshot reply", why))?;
                    return Ok(response);
                }
                other => return Err(unexpected(&other)),
            }
        }
        // `parts` always yields a last part, answered above.
        Err(RPCError::Network(NetworkError::from_string(
            "snapshot sent without a last part".to_string(),
        )))
    }
}

fn unexpected(reply: &ReplyBody) -> RPCError<TypeConfig> {
    RPCError::Network(NetworkError::from_string(format!(
        "unexpected reply {reply:?}"
    )))
}

impl RaftNetworkV2<TypeConfig> for PeerClient {
    type SnapshotData = SnapshotData;

    /// One request at a time, an entry-less one held a little for the
    /// next to carry it (`raft/append_stream.rs`).
    fn stream_append<'s, S>(
        &'s mut self,
        input: S,
        option: RPCOption,
    ) -> BoxFuture<
        's,
        Result<
            BoxStream<'s, Result<StreamAppendResult<TypeConfig>, RPCError<TypeConfig>>>,
            RPCError<TypeConfig>,
        >,
    >
    where
        S: Stream<Item = AppendEntriesRequest<TypeConfig>> + OptionalSend + Unpin + 'static,
    {
        append_stream::send_all(self, input, option)
    }

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        let sent = rpc.vote.leader_id.term;
        let sent_last = rpc
            .entries
            .last()
            .map(|e| e.log_id.index)
            .or(rpc.prev_log_id.as_ref().map(|l| l.index));
        match self.call(RequestBody::Append(rpc), &option).await? {
            ReplyBody::Append(response) => {
                bounds::check_append_reply(sent, sent_last, &response)
                    .map_err(|why| self.implausible("append reply", why))?;
                Ok(response)
            }
            other => Err(unexpected(&other)),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        let sent = rpc.vote.leader_id.term;
        let reply = self.call(RequestBody::Vote(rpc), &option).await?;
        self.vote_reply(sent, "vote reply", reply)
    }

    async fn pre_vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        let sent = rpc.vote.leader_id.term;
        let reply = self.call(RequestBody::PreVote(rpc), &option).await?;
        self.vote_reply(sent, "pre-vote reply", reply)
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: Snapshot,
        cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        tokio::select! {
            closed = cancel => Err(StreamingError::Closed(closed)),
            reply = self.send_snapshot(vote, snapshot, &option) => Ok(reply?),
        }
    }

    async fn transfer_leader(
        &mut self,
        req: TransferLeaderRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<TransferLeaderResponse<TypeConfig>, RPCError<TypeConfig>> {
        let sent = req.from_leader().leader_id.term;
        match self.call(RequestBody::TransferLeader(req), &option).await? {
            ReplyBody::TransferLeader(response) => {
                bounds::check_transfer_reply(sent, &response)
                    .map_err(|why| self.implausible("transfer reply", why))?;
                Ok(response)
            }
            other => Err(unexpected(&other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_a_peer_opens_brings_it_back_in_reach() {
        let reach = PeerReach::default();
        assert!(!reach.heard_from(2), "a peer never dialled");
        let log = reach.of(2, "10.0.0.3:7411");
        log.failed(&"connection refused");
        assert!(reach.heard_from(2), "out of reach until its link came");
        assert!(!reach.heard_from(2), "logged once");
        // Its next outage is a new one, not the old one going on.
        assert!(reach.of(2, "10.0.0.3:7411").failed(&"connection refused"));
    }
}
