//! openraft's view of the network: one [`Link`] per peer, shared by the
//! replication, heartbeat and snapshot clients openraft makes for it.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use openraft::errors::{
    NetworkError, RPCError, ReplicationClosed, StreamingError, Timeout, Unreachable,
};
use openraft::network::{RPCOption, RaftNetworkFactory, RaftNetworkV2};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, TransferLeaderRequest,
    TransferLeaderResponse, VoteRequest, VoteResponse,
};
use openraft::{BasicNode, OptionalSend};

use super::link::{CallError, Dialer, Link};
use super::rpc::{LinkHello, ReplyBody, RequestBody};
use super::types::{NodeId, Snapshot, SnapshotData, TypeConfig, Vote};

/// The shortest time an RPC is given. openraft asks replication to time
/// out after 3/4 of a heartbeat (37.5 ms by default), which a busy follower
/// fsyncing a batch on a shared core overshoots: every such timeout
/// restarted replication and stalled commits under load. A dead peer is
/// still found by its refused connection or by elections.
const MIN_RPC_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(250);

/// Makes (and keeps) the links to peers.
pub struct Network {
    me: NodeId,
    peers: Vec<String>,
    dialer: Arc<dyn Dialer>,
    links: HashMap<NodeId, Arc<Link>>,
}

impl std::fmt::Debug for Network {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Network")
            .field("me", &self.me)
            .finish_non_exhaustive()
    }
}

impl Network {
    pub fn new(me: NodeId, peers: Vec<String>, dialer: Arc<dyn Dialer>) -> Network {
        Network {
            me,
            peers,
            dialer,
            links: HashMap::new(),
        }
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
                    peers: self.peers.clone(),
                };
                Arc::new(Link::new(node.addr.clone(), hello, self.dialer.clone()))
            })
            .clone();
        PeerClient { target, link }
    }
}

/// An openraft client of one peer.
#[derive(Debug)]
pub struct PeerClient {
    target: NodeId,
    link: Arc<Link>,
}

impl PeerClient {
    async fn call(
        &self,
        body: RequestBody,
        option: &RPCOption,
    ) -> Result<ReplyBody, RPCError<TypeConfig>> {
        let ttl = option.soft_ttl().max(MIN_RPC_TIMEOUT);
        self.link
            .call(body, ttl)
            .await
            .map_err(|error| match error {
                CallError::Timeout(_) => RPCError::Timeout(Timeout {
                    action: openraft::RPCTypes::AppendEntries,
                    id: self.target,
                    target: self.target,
                    timeout: ttl,
                }),
                CallError::Broken => RPCError::Network(NetworkError::new(&error)),
                CallError::Unreachable(_) | CallError::Refused(_) => {
                    RPCError::Unreachable(Unreachable::new(&error))
                }
            })
    }
}

fn unexpected(reply: &ReplyBody) -> RPCError<TypeConfig> {
    RPCError::Network(NetworkError::from_string(format!(
        "unexpected reply {reply:?}"
    )))
}

impl RaftNetworkV2<TypeConfig> for PeerClient {
    type SnapshotData = SnapshotData;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        match self.call(RequestBody::Append(rpc), &option).await? {
            ReplyBody::Append(response) => Ok(response),
            other => Err(unexpected(&other)),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        match self.call(RequestBody::Vote(rpc), &option).await? {
            ReplyBody::Vote(response) => Ok(response),
            other => Err(unexpected(&other)),
        }
    }

    async fn pre_vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        match self.call(RequestBody::PreVote(rpc), &option).await? {
            ReplyBody::Vote(response) => Ok(response),
            other => Err(unexpected(&other)),
        }
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: Snapshot,
        cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        let body = RequestBody::Snapshot {
            vote,
            meta: snapshot.meta,
            data: snapshot.snapshot,
        };
        tokio::select! {
            closed = cancel => Err(StreamingError::Closed(closed)),
            reply = self.call(body, &option) => match reply? {
                ReplyBody::Snapshot(response) => Ok(response),
                other => Err(unexpected(&other).into()),
            },
        }
    }

    async fn transfer_leader(
        &mut self,
        req: TransferLeaderRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<TransferLeaderResponse<TypeConfig>, RPCError<TypeConfig>> {
        match self.call(RequestBody::TransferLeader(req), &option).await? {
            ReplyBody::TransferLeader(response) => Ok(response),
            other => Err(unexpected(&other)),
        }
    }
}
