//! The `E <op> <key> <reason>` response, and the line a node at its
//! connection limit writes before it closes.

use bytes::{BufMut, BytesMut};

use crate::op::Op;

/// A refusal of a malformed or out-of-limits request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ErrorReply {
    /// `None` is written `?`: the op could not be read.
    pub op: Option<Op>,
    /// `None` is written `?`: the key could not be read or echoed.
    pub key: Option<Vec<u8>>,
    /// Text to the end of the line.
    pub reason: String,
}

/// Whether a key field can go back on the wire as one field: anything a
/// space or a control byte would cut or garble is replaced by `?`.
pub(crate) fn echoable(field: &[u8]) -> bool {
    !field.is_empty() && field.iter().all(|&b| b > b' ' && b != 0x7f)
}

/// Why a node refuses a connection (README, `--max-connections`).
const TOO_MANY_CONNECTIONS: &str = "too many connections";

impl ErrorReply {
    /// `E ? ? too many connections`: the answer of a node at its connection
    /// limit, before any request was read.
    pub fn too_many_connections() -> Self {
        ErrorReply {
            op: None,
            key: None,
            reason: TOO_MANY_CONNECTIONS.into(),
        }
    }

    /// Writes the line, LF included. A key that cannot be echoed is written
    /// `?`, and CR or LF in the reason become spaces: the line must stay one
    /// line whatever the fields hold.
    pub(crate) fn encode(&self, dst: &mut BytesMut) {
        dst.reserve(6 + self.key.as_ref().map_or(1, Vec::len) + self.reason.len());
        dst.put_slice(b"E ");
        dst.put_u8(self.op.map_or(b'?', Op::as_byte));
        dst.put_u8(b' ');
        match &self.key {
            Some(key) if echoable(key) => dst.put_slice(key),
            _ => dst.put_u8(b'?'),
        }
        dst.put_u8(b' ');
        let reason = self.reason.as_bytes();
        if reason.iter().any(|&b| b == b'\n' || b == b'\r') {
            for &b in reason {
                dst.put_u8(if b == b'\n' || b == b'\r' { b' ' } else { b });
            }
        } else {
            dst.put_slice(reason);
        }
        dst.put_u8(b'\n');
    }
}

/// The whole line, LF included, that a node at its connection limit
/// writes to a connection it will not serve, then closes it.
pub fn connection_refused_line() -> BytesMut {
    let mut dst = BytesMut::with_capacity(32);
    ErrorReply::too_many_connections().encode(&mut dst);
    dst
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refused_line_is_the_documented_one() {
        assert_eq!(
            &connection_refused_line()[..],
            b"E ? ? too many connections\n"
        );
        let parsed = crate::parse_response(b"E ? ? too many connections");
        assert!(
            matches!(&parsed, Ok(crate::Response::Error(reply)) if *reply == ErrorReply::too_many_connections()),
            "{parsed:?}"
        );
    }

    fn line(reply: ErrorReply) -> Vec<u8> {
        let mut dst = BytesMut::new();
        reply.encode(&mut dst);
        dst.to_vec()
    }

    #[test]
    fn writes_question_marks_for_what_is_unknown() {
        assert_eq!(
            line(ErrorReply {
                op: None,
                key: None,
                reason: "line too long".into()
            }),
            b"E ? ? line too long\n"
        );
        assert_eq!(
            line(ErrorReply {
                op: Some(Op::Status),
                key: None,
                reason: "too many fields".into()
            }),
            b"E S ? too many fields\n"
        );
    }

    #[test]
    fn never_breaks_the_line() {
        assert_eq!(
            line(ErrorReply {
                op: Some(Op::Acquire),
                key: Some(b"a\x01 b".to_vec()),
                reason: "two\r\nlines".into()
            }),
            b"E A ? two  lines\n"
        );
        assert_eq!(
            line(ErrorReply {
                op: Some(Op::Acquire),
                key: Some(Vec::new()),
                reason: "r".into()
            }),
            b"E A ? r\n"
        );
    }

    #[test]
    fn echoable_keys_are_printable_and_not_empty() {
        assert!(echoable(b"orders/42"));
        assert!(echoable("é".as_bytes()));
        assert!(!echoable(b""));
        assert!(!echoable(b"a\x01"));
        assert!(!echoable(b"a\x7f"));
        assert!(!echoable(b"a b"));
    }
}
