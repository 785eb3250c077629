//! The wire format of Raft RPCs between nodes, on the client port.
//!
//! A Raft peer connection opens with [`RAFT_HELLO`] and the authenticated
//! handshake of [`crate::peer::secure`], then carries encrypted postcard
//! frames: first a [`LinkHello`] from the dialler, then [`RpcRequest`]s one
//! way and [`RpcReply`]s the other, matched by id, so many RPCs share one
//! connection and answers may come in any order. Snapshots travel in
//! [`SnapshotPart`]s (see [`crate::raft::net::snapshot_transfer`]), so no frame is
//! larger than [`crate::raft::net::limits::FrameCaps`] allows.

use serde::{Deserialize, Serialize};

use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, TransferLeaderRequest,
    TransferLeaderResponse, VoteRequest, VoteResponse,
};

use crate::raft::net::snapshot_transfer::SnapshotPart;
use crate::raft::types::{LogId, NodeId, TypeConfig};

/// The first line of every Raft peer connection. No client request starts
/// with it, and it differs from the priority mode's hello. Version 2 is the
/// authenticated channel; a version 1 node's hello is an unknown client
/// request to this node.
pub const RAFT_HELLO: &[u8] = b"BATON-RAFT/2\n";

/// Who dials, and whom it believes it dials: a node refuses a link meant
/// for another node id (a node added with `baton member add` but started
/// without `--join`, say).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LinkHello {
    pub from: NodeId,
    pub to: NodeId,
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
    /// One piece of a snapshot; the last one is answered with
    /// [`ReplyBody::Snapshot`], the others with [`ReplyBody::PartReceived`].
    SnapshotPart(SnapshotPart),
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
    /// A snapshot part other than the last was stored.
    PartReceived,
    /// The receiving node could not handle the request (it is shutting
    /// down, say, or refused it as implausible); the caller treats it as
    /// unreachable. At most [`MAX_FAILED_REASON`] bytes.
    Failed(String),
    /// To a vote request: the caller is not in this node's membership,
    /// committed at this log id (see [`crate::raft::removal`]).
    NotMember(LogId),
}

/// The longest reason a [`ReplyBody::Failed`] carries.
pub const MAX_FAILED_REASON: usize = 512;

impl ReplyBody {
    /// A failure reply, its reason cut to [`MAX_FAILED_REASON`] bytes.
    pub fn failed(reason: &dyn std::fmt::Display) -> ReplyBody {
        let mut text = reason.to_string();
        if text.len() > MAX_FAILED_REASON {
            let mut end = MAX_FAILED_REASON;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            text.truncate(end);
        }
        ReplyBody::Failed(text)
    }
}
