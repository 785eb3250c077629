//! Why a client could not read a server's response. Always fatal for the
//! connection: once a line is not understood, matching is lost.

use baton_core::KeyError;

/// A response line that does not parse, or an I/O error under the client
/// codec.
#[derive(Debug, thiserror::Error)]
pub enum ResponseError {
    #[error("response line longer than {max} bytes")]
    LineTooLong { max: usize },
    #[error("empty response line")]
    EmptyLine,
    #[error("unknown response kind")]
    UnknownKind,
    #[error("malformed response: {0}")]
    Malformed(&'static str),
    #[error("status response without {0}=")]
    MissingStatusField(&'static str),
    #[error("bad key in response: {0}")]
    BadKey(#[from] KeyError),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}
