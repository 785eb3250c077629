//! The serving side of Raft peer connections: reads RPCs, hands each to
//! the local Raft node in its own task, and writes the replies back in
//! whatever order they finish.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::{SinkExt, StreamExt};
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;
use tokio_util::codec::{FramedRead, FramedWrite};

use openraft::Snapshot;

use super::link::PeerStream;
use super::rpc::{LinkHello, ReplyBody, RequestBody, RpcReply, RpcRequest, RAFT_HELLO};
use super::shell::RaftOf;
use super::state_machine::TableHost;
use crate::peer::{self, PeerError};

/// A peer that says nothing for this long is dropped; openraft's
/// heartbeats keep a live link far busier.
const IDLE_LIMIT: Duration = Duration::from_secs(30);

/// Serves one peer connection until it closes. `already_read` holds what
/// was read while telling peers from clients, hello line included.
pub async fn serve<S: PeerStream, H: TableHost>(
    stream: S,
    mut already_read: BytesMut,
    raft: RaftOf<H>,
    peers: Vec<String>,
) -> Result<(), PeerError> {
    let _ = already_read.split_to(RAFT_HELLO.len().min(already_read.len()));
    let (reader, writer) = tokio::io::split(stream);
    let reader = std::io::Cursor::new(already_read).chain(reader);
    let mut frames = FramedRead::new(reader, peer::hello_frame_codec());
    let first = match tokio::time::timeout(IDLE_LIMIT, frames.next()).await {
        Ok(Some(frame)) => frame?,
        _ => return Err(PeerError::NoHello),
    };
    let hello: LinkHello = peer::decode(&first)?;
    if hello.peers != peers || hello.from as usize >= peers.len() {
        tracing::warn!(
            from = hello.from,
            their_peers = ?hello.peers,
            "refused a raft peer with another peer list; every node needs the same --peers"
        );
        return Ok(());
    }
    frames.decoder_mut().set_max_frame_length(peer::MAX_FRAME);
    let (tx, mut rx) = mpsc::unbounded_channel::<Bytes>();
    let writing = tokio::spawn(async move {
        let mut out = FramedWrite::new(writer, peer::frame_codec());
        let mut batch = Vec::with_capacity(64);
        while rx.recv_many(&mut batch, 64).await > 0 {
            for frame in batch.drain(..) {
                out.feed(frame).await?;
            }
            SinkExt::<Bytes>::flush(&mut out).await?;
        }
        Ok::<(), std::io::Error>(())
    });
    let result = loop {
        let frame = match tokio::time::timeout(IDLE_LIMIT, frames.next()).await {
            Ok(Some(Ok(frame))) => frame,
            Ok(Some(Err(error))) => break Err(PeerError::Io(error)),
            Ok(None) | Err(_) => break Ok(()),
        };
        let request: RpcRequest = match peer::decode(&frame) {
            Ok(request) => request,
            Err(error) => break Err(error),
        };
        let raft = raft.clone();
        let tx = tx.clone();
        tokio::spawn(async move {
            let body = handle(&raft, request.body).await;
            if let Ok(frame) = peer::encode(&RpcReply {
                id: request.id,
                body,
            }) {
                // A closed writer means the link is gone; the caller times out.
                let _ = tx.send(frame);
            }
        });
    };
    drop(tx);
    writing.abort();
    result
}

async fn handle<H: TableHost>(raft: &RaftOf<H>, body: RequestBody) -> ReplyBody {
    let failed = |e: &dyn std::fmt::Display| ReplyBody::Failed(e.to_string());
    match body {
        RequestBody::Append(rpc) => match raft.append_entries(rpc).await {
            Ok(response) => ReplyBody::Append(response),
            Err(e) => failed(&e),
        },
        RequestBody::Vote(rpc) => match raft.vote(rpc).await {
            Ok(response) => ReplyBody::Vote(response),
            Err(e) => failed(&e),
        },
        RequestBody::PreVote(rpc) => match raft.pre_vote(rpc).await {
            Ok(response) => ReplyBody::Vote(response),
            Err(e) => failed(&e),
        },
        RequestBody::Snapshot { vote, meta, data } => {
            let snapshot = Snapshot {
                meta,
                snapshot: data,
            };
            match raft.install_full_snapshot(vote, snapshot).await {
                Ok(response) => ReplyBody::Snapshot(response),
                Err(e) => failed(&e),
            }
        }
        RequestBody::TransferLeader(rpc) => match raft.handle_transfer_leader(rpc).await {
            Ok(response) => ReplyBody::TransferLeader(response),
            Err(e) => failed(&e),
        },
    }
}
