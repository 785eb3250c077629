//! Raft RPCs between nodes on the client port, over the authenticated peer
//! channel: the messages ([`rpc`]), the links that carry them ([`link`],
//! [`network`], [`inbound`]; [`redial`] spaces the dials of a dead peer),
//! the caps on their frames and queues ([`limits`]), snapshots sent in parts ([`snapshot_transfer`]), and the
//! refusal of what no sound peer can report ([`bounds`]).

mod append_stream;
pub mod bounds;
pub mod inbound;
pub mod limits;
pub mod link;
pub mod network;
pub mod redial;
pub mod rpc;
pub mod snapshot_transfer;
