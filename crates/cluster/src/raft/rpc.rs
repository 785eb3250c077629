//! The wire format of Raft RPCs between nodes, on the client port.
//!
//! A Raft peer connection opens with [`RAFT_HELLO`], then carries
//! length-delimited postcard frames: first a [`LinkHello`] from the dialler,
//! then [`RpcRequest`]s one way and [`RpcReply`]s the other, matched by id,
//! so many RPCs share one connection and answers may come in any order.

use serde::{Deserialize, Serialize};

use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, TransferLeaderRequest,
    TransferLeaderResponse, VoteRequest, VoteResponse,
};

use super::types::{NodeId, SnapshotData, SnapshotMeta, TypeConfig, Vote};

/// The first line of every Raft peer connection. No client request starts
/// with it, and it differs from the priority mode's hello.
pub const RAFT_HELLO: &[u8] = b"BATON-RAFT/1\n";

/// Who dials, and the cluster it believes in: a node refuses a peer with
/// another peer list.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LinkHello {
    pub from: NodeId,
    pub peers: Vec<String>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct RpcRequest {
    pub id: u64,
    pub body: RequestBody,
}

#[derive(Debug, Serialize, Deserialize)]
pub enum RequestBody {
    Append(AppendEntriesRequest<TypeConfig>),
    Vote(VoteRequest<TypeConfig>),
    PreVote(VoteRequest<TypeConfig>),
    Snapshot {
        vote: Vote,
        meta: SnapshotMeta,
        data: SnapshotData,
    },
    TransferLeader(TransferLeaderRequest<TypeConfig>),
}

#[derive(Debug, Serialize, Deserialize)]
pub struct RpcReply {
    pub id: u64,
    pub body: ReplyBody,
}

#[derive(Debug, Serialize, Deserialize)]
pub enum ReplyBody {
    Append(AppendEntriesResponse<TypeConfig>),
    Vote(VoteResponse<TypeConfig>),
    Snapshot(SnapshotResponse<TypeConfig>),
    TransferLeader(TransferLeaderResponse<TypeConfig>),
    /// The receiving node could not handle the request (it is shutting
    /// down, say); the caller treats it as unreachable.
    Failed(String),
}
