//! Baton's client protocol (docs/protocol.md, version 1.2): request and response
//! lines, parsed and formatted, the tokio-util codecs that frame them, and
//! the `host:port` syntax of node addresses.
//!
//! No I/O here: the server and the client plug [`ServerCodec`] and
//! [`ClientCodec`] into their own framed streams.

mod acquire_options;
mod codec;
mod duration;
mod error_reply;
mod flag_duration;
mod host_port;
mod limits;
mod line;
mod number;
mod op;
mod parse_request;
mod parse_response;
mod request;
mod request_error;
mod response;
mod response_error;
mod secret;
mod status;

pub use baton_core::{
    AcquireOptions, HolderState, HolderValue, KeyDetail, KeyState, LiveGrant, LockMode, StateTag,
    ValueError, MAX_LISTED_HOLDERS, MAX_PERMITS, MAX_VALUE_LEN,
};
pub use codec::{ClientCodec, ServerCodec};
pub use duration::{format_duration_ms, parse_duration_ms, DurationError};
pub use error_reply::{connection_refused_line, ErrorReply};
pub use flag_duration::{parse_flag_duration_ms, FlagDurationError};
pub use host_port::{host_port, MAX_ADDR_LEN};
pub use limits::{Limits, MAX_REQUEST_LINE, MAX_RESPONSE_LINE};
pub use op::Op;
pub use parse_request::parse_request;
pub use parse_response::parse_response;
pub use request::Request;
pub use request_error::{Field, RequestError, RequestErrorKind};
pub use response::Response;
pub use response_error::ResponseError;
pub use secret::{validate_secret, Secret, SecretError, MAX_SECRET_LEN};
pub use status::{Mode, Role, StatusReport, UnknownWord, PROTOCOL_VERSION};
