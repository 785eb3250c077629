//! The peer channel: how nodes of one cluster talk over their client port.
//!
//! A peer connection opens with [`PEER_HELLO`], a line no client request
//! can start with (client ops are single letters followed by a space or the
//! end of line), then carries length-delimited postcard frames, each one
//! message from the dialling node to the node it dialled.

use bytes::{Bytes, BytesMut};
use serde::{de::DeserializeOwned, Serialize};
use tokio_util::codec::LengthDelimitedCodec;

/// The first line of every peer connection.
pub const PEER_HELLO: &[u8] = b"BATON-PEER/1\n";

/// Largest peer frame. A full lock table travels in one frame; at under
/// 300 bytes a lock this allows well over a million held locks.
pub const MAX_FRAME: usize = 512 * 1024 * 1024;

/// Why a peer frame could not be read or written.
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
}

/// The frame codec of a peer connection.
pub fn frame_codec() -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .max_frame_length(MAX_FRAME)
        .new_codec()
}

pub fn encode<M: Serialize>(message: &M) -> Result<Bytes, PeerError> {
    postcard::to_allocvec(message)
        .map(Bytes::from)
        .map_err(PeerError::Encode)
}

pub fn decode<M: DeserializeOwned>(frame: &BytesMut) -> Result<M, PeerError> {
    postcard::from_bytes(frame).map_err(PeerError::Decode)
}
