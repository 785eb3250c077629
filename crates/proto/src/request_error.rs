//! Why a request line was refused. Each refusal becomes one `E` line.

use std::fmt;

use baton_core::{KeyError, ValueError};

use crate::duration::Seconds;
use crate::error_reply::ErrorReply;
use crate::op::Op;
use crate::secret::SecretError;

/// A field of a request line, named in error reasons.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    Key,
    Wait,
    Lease,
    Token,
    User,
    Secret,
    Value,
    Seen,
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Field::Key => "key",
            Field::Wait => "wait",
            Field::Lease => "lease",
            Field::Token => "token",
            Field::User => "user",
            Field::Secret => "secret",
            Field::Value => "value",
            Field::Seen => "seen",
        })
    }
}

/// A request line that is malformed or beyond a limit. Maps to exactly one
/// `E <op> <key> <reason>` line.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{kind}")]
pub struct RequestError {
    /// The request's op when its first field names one.
    pub op: Option<Op>,
    /// The key field as received, when it exists and can be echoed.
    pub key: Option<Vec<u8>>,
    pub kind: RequestErrorKind,
}

impl RequestError {
    /// The reply a node sends for this error.
    pub fn to_reply(&self) -> ErrorReply {
        ErrorReply {
            op: self.op,
            key: self.key.clone(),
            reason: self.kind.to_string(),
        }
    }

    /// The error for a line whose op and key could not be read.
    pub(crate) fn unread(kind: RequestErrorKind) -> RequestError {
        RequestError {
            op: None,
            key: None,
            kind,
        }
    }
}

/// What is wrong with a request. The text is the `<reason>` of the `E` line.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RequestErrorKind {
    #[error("line too long")]
    LineTooLong,
    #[error("empty line")]
    EmptyLine,
    #[error("unknown op")]
    UnknownOp,
    #[error("missing {0}")]
    MissingField(Field),
    #[error("too many fields")]
    TooManyFields,
    /// Two spaces in a row, or a space at the start or end of the line.
    #[error("empty field")]
    EmptyField,
    #[error("{0}")]
    BadKey(#[from] KeyError),
    #[error("{0} is not a decimal number of seconds with at most 3 decimals")]
    BadDuration(Field),
    #[error("{field} exceeds the maximum of {} seconds", Seconds(*.max_ms))]
    ExceedsMax { field: Field, max_ms: u64 },
    #[error("lease must be greater than 0")]
    LeaseZero,
    #[error("token must be a decimal integer greater than 0")]
    BadToken,
    /// A `U` request's user name breaks the key rules.
    #[error("user {}", user_reason(.0))]
    BadUser(KeyError),
    #[error("{0}")]
    BadSecret(SecretError),
    /// An acquire option this protocol does not know (`?` if unprintable).
    #[error("unknown option {0}")]
    UnknownOption(String),
    #[error("repeated option {0}")]
    RepeatedOption(String),
    #[error(
        "permits must be a decimal integer from 1 to {}",
        baton_core::MAX_PERMITS
    )]
    BadPermits,
    #[error("mode must be shared or exclusive")]
    BadMode,
    #[error("shared locks take no permits")]
    SharedPermits,
    #[error("{0}")]
    BadValue(ValueError),
    #[error("seen must be - or a state tag from a Q or W answer")]
    BadSeen,
}

/// A key error's text with "key" turned into what it is about: "user is
/// empty", not "user key is empty".
fn user_reason(error: &KeyError) -> String {
    let text = error.to_string();
    text.strip_prefix("key ").map(str::to_owned).unwrap_or(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_read_as_the_protocol_wants() {
        use RequestErrorKind::*;
        for (kind, text) in [
            (LineTooLong, "line too long"),
            (EmptyLine, "empty line"),
            (UnknownOp, "unknown op"),
            (MissingField(Field::Key), "missing key"),
            (MissingField(Field::Wait), "missing wait"),
            (MissingField(Field::Lease), "missing lease"),
            (MissingField(Field::Token), "missing token"),
            (TooManyFields, "too many fields"),
            (EmptyField, "empty field"),
            (BadKey(KeyError::Empty), "key is empty"),
            (
                BadDuration(Field::Wait),
                "wait is not a decimal number of seconds with at most 3 decimals",
            ),
            (
                ExceedsMax {
                    field: Field::Wait,
                    max_ms: 86_400_000,
                },
                "wait exceeds the maximum of 86400 seconds",
            ),
            (
                ExceedsMax {
                    field: Field::Lease,
                    max_ms: 1500,
                },
                "lease exceeds the maximum of 1.5 seconds",
            ),
            (LeaseZero, "lease must be greater than 0"),
            (BadToken, "token must be a decimal integer greater than 0"),
            (MissingField(Field::User), "missing user"),
            (MissingField(Field::Secret), "missing secret"),
            (BadUser(KeyError::Empty), "user is empty"),
            (
                BadUser(KeyError::ForbiddenByte { byte: 1 }),
                "user has a forbidden byte 0x01",
            ),
            (BadSecret(SecretError::Empty), "secret is empty"),
            (UnknownOption("x".into()), "unknown option x"),
            (RepeatedOption("mode".into()), "repeated option mode"),
            (
                BadPermits,
                "permits must be a decimal integer from 1 to 10000",
            ),
            (BadMode, "mode must be shared or exclusive"),
            (SharedPermits, "shared locks take no permits"),
            (BadValue(ValueError::Empty), "value is empty"),
            (
                BadSeen,
                "seen must be - or a state tag from a Q or W answer",
            ),
            (
                BadSecret(SecretError::ForbiddenByte),
                "secret has a space, a control character or DEL",
            ),
        ] {
            assert_eq!(kind.to_string(), text);
        }
    }

    #[test]
    fn the_reply_carries_op_key_and_reason() {
        let err = RequestError {
            op: Some(Op::Acquire),
            key: Some(b"k".to_vec()),
            kind: RequestErrorKind::LeaseZero,
        };
        assert_eq!(err.to_string(), "lease must be greater than 0");
        assert_eq!(
            err.to_reply(),
            ErrorReply {
                op: Some(Op::Acquire),
                key: Some(b"k".to_vec()),
                reason: "lease must be greater than 0".to_owned(),
            }
        );
    }
}
