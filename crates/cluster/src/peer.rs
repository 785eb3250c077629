//! The peer channel: how nodes of one cluster talk over their client port.
//!
//! A peer connection opens with [`PEER_HELLO`], a line no client request
//! can start with (client ops are single letters followed by a space or the
//! end of line), then carries length-delimited postcard frames, each one
//! message from the dialling node to the node it dialled. The priority
//! mode's dialled node writes back single zero bytes, a sign of life the
//! dialling node watches for.

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

/// The largest first frame of an incoming connection (the link hello).
/// Until the hello shows a peer of this cluster, anyone who sent the hello
/// line could otherwise make the node reserve `MAX_FRAME` bytes with a
/// four-byte length.
pub const MAX_HELLO_FRAME: usize = 64 * 1024;

/// The frame codec of a peer connection.
pub fn frame_codec() -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .max_frame_length(MAX_FRAME)
        .new_codec()
}

/// The frame codec of an incoming peer connection before its hello is
/// checked; raise its limit with `set_max_frame_length(MAX_FRAME)` then.
pub fn hello_frame_codec() -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .max_frame_length(MAX_HELLO_FRAME)
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
