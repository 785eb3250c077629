//! Peer messages as frames: postcard encoding, and the errors of a peer
//! connection.

use bytes::{Bytes, BytesMut};
use serde::{de::DeserializeOwned, Serialize};

/// The first line of every priority peer connection. Version 2 is the
/// authenticated channel; a version 1 node's hello is a client request
/// (and an unknown one) to this node.
pub const PEER_HELLO: &[u8] = b"BATON-PEER/2\n";

/// Why a peer connection failed or was refused.
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    #[error("peer frame does not decode: {0}")]
    Decode(postcard::Error),
    #[error("peer frame does not encode: {0}")]
    Encode(postcard::Error),
    #[error("peer connection failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("peer connection did not start with the peer hello")]
    NoHello,
    #[error("peer handshake failed: the other end does not hold this cluster's key (is its --cluster-key-file this cluster's key?)")]
    WrongKey,
    #[error("peer handshake failed: {0}")]
    Handshake(String),
    #[error("peer handshake did not finish in time")]
    HandshakeTimeout,
    #[error("peer frame failed authentication (forged, replayed or corrupted)")]
    Forged,
    #[error("peer frame of {len} bytes is over the limit of {max}")]
    TooLarge { len: usize, max: usize },
    #[error("peer record is malformed")]
    Malformed,
}

pub fn encode<M: Serialize>(message: &M) -> Result<Bytes, PeerError> {
    postcard::to_allocvec(message)
        .map(Bytes::from)
        .map_err(PeerError::Encode)
}

pub fn decode<M: DeserializeOwned>(frame: &BytesMut) -> Result<M, PeerError> {
    postcard::from_bytes(frame).map_err(PeerError::Decode)
}
