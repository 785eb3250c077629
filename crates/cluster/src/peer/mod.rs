//! The peer channel: how nodes of one cluster talk over their client port.
//!
//! A peer connection opens with a hello line no client request can start
//! with (client ops are single letters followed by a space or the end of
//! line). Then both ends prove they hold the cluster key with a Noise
//! handshake ([`secure`]), and everything after travels as encrypted,
//! authenticated frames, each one postcard-encoded message. [`gate`] caps
//! what peer connections may take from a node, authenticated or not, and
//! logs refusals without letting a flood of them fill the log.

pub mod frames;
pub mod gate;
pub mod handshakes;
pub mod keys;
pub mod known_ips;
pub mod reach_log;
pub mod refusals;
pub mod secure;

pub use frames::{decode, encode, PeerError, PEER_HELLO};
pub use gate::{GateLimits, HandshakePermit, LinkPermit, PeerGate, EVICTED};
pub use keys::{generate_key_text, ClusterKey, ClusterKeys, KeyError};
pub use secure::{accept, accept_telling, connect, SecureCodec, SecureFramed, HANDSHAKE_TIMEOUT};
