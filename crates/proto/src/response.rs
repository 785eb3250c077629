//! Responses a node sends, and how a client matches them to requests.

use baton_core::{Key, KeyState, Token};
use bytes::{BufMut, BytesMut};

use crate::error_reply::ErrorReply;
use crate::number::put_u64;
use crate::op::Op;
use crate::status::StatusReport;

/// One response line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Response {
    /// `A <key> <token>`.
    Granted { key: Key, token: Token },
    /// `T <key>`: the wait ran out, nothing was granted.
    TimedOut { key: Key },
    /// `R <key>`.
    Released { key: Key },
    /// `K <key>`.
    Renewed { key: Key },
    /// `N R <key>` or `N K <key>`: `op` is [`Op::Release`] or [`Op::Renew`].
    NotHeld { op: Op, key: Key },
    /// `M <op> <key> <addr>`: ask the active node; `None` (written `-`)
    /// when none is known yet.
    Moved {
        op: Op,
        key: Key,
        addr: Option<String>,
    },
    /// `E <op|?> <key|?> <reason>`.
    Error(ErrorReply),
    /// `S field=value ...`.
    Status(StatusReport),
    /// `U <user>`: the connection is now authenticated as `user`.
    Authenticated { user: Key },
    /// `Q <key> token=<t> lease=<s> waiters=<n>`, or `token=- lease=-`
    /// while the key is free.
    Queried { key: Key, state: KeyState },
}

/// ` token=<t> lease=<s> waiters=<n>` (`-` for token and lease while free).
fn encode_key_state(state: &KeyState, dst: &mut BytesMut) {
    dst.reserve(64);
    dst.put_slice(b" token=");
    match &state.grant {
        Some(grant) => {
            put_u64(dst, grant.token);
            // Always three decimals, as docs/protocol.md's example writes it.
            dst.put_slice(b" lease=");
            put_u64(dst, grant.lease_left_ms / 1000);
            dst.put_u8(b'.');
            let ms = grant.lease_left_ms % 1000;
            dst.put_slice(&[
                b'0' + (ms / 100) as u8,
                b'0' + (ms / 10 % 10) as u8,
                b'0' + (ms % 10) as u8,
            ]);
        }
        None => dst.put_slice(b"- lease=-"),
    }
    dst.put_slice(b" waiters=");
    put_u64(dst, state.waiters);
}

impl Response {
    /// Writes the response as one line, LF included.
    pub fn encode(&self, dst: &mut BytesMut) {
        let (letter, key) = match self {
            Response::Granted { key, .. } => (b'A', key),
            Response::TimedOut { key } => (b'T', key),
            Response::Released { key } => (b'R', key),
            Response::Renewed { key } => (b'K', key),
            Response::NotHeld { key, .. } => (b'N', key),
            Response::Moved { key, .. } => (b'M', key),
            Response::Authenticated { user } => (b'U', user),
            Response::Queried { key, .. } => (b'Q', key),
            Response::Error(reply) => return reply.encode(dst),
            Response::Status(report) => return report.encode(dst),
        };
        let addr_len = match self {
            Response::Moved { addr, .. } => addr.as_ref().map_or(1, String::len),
            _ => 0,
        };
        // Letter, op, key, token or address, spaces and LF.
        dst.reserve(key.len() + addr_len + 28);
        dst.put_u8(letter);
        dst.put_u8(b' ');
        if let Response::NotHeld { op, .. } | Response::Moved { op, .. } = self {
            dst.put_u8(op.as_byte());
            dst.put_u8(b' ');
        }
        dst.put_slice(key.as_bytes());
        match self {
            Response::Granted { token, .. } => {
                dst.put_u8(b' ');
                put_u64(dst, *token);
            }
            Response::Moved { addr, .. } => {
                dst.put_u8(b' ');
                dst.put_slice(addr.as_deref().unwrap_or("-").as_bytes());
            }
            Response::Queried { state, .. } => encode_key_state(state, dst),
            _ => {}
        }
        dst.put_u8(b'\n');
    }

    /// The op used to match this response to its request (docs/protocol.md,
    /// "Matching"): `A` and `T` answer acquires, `R` releases, `K` renewals;
    /// `N`, `M` and `E` name their op; `S` answers status, `U` authenticate.
    pub fn op(&self) -> Option<Op> {
        match self {
            Response::Granted { .. } | Response::TimedOut { .. } => Some(Op::Acquire),
            Response::Released { .. } => Some(Op::Release),
            Response::Renewed { .. } => Some(Op::Renew),
            Response::NotHeld { op, .. } | Response::Moved { op, .. } => Some(*op),
            Response::Error(reply) => reply.op,
            Response::Status(_) => Some(Op::Status),
            Response::Authenticated { .. } => Some(Op::Auth),
            Response::Queried { .. } => Some(Op::Query),
        }
    }

    /// The key used to match this response to its request, if it has one.
    pub fn key(&self) -> Option<&[u8]> {
        match self {
            Response::Granted { key, .. }
            | Response::TimedOut { key }
            | Response::Released { key }
            | Response::Renewed { key }
            | Response::NotHeld { key, .. }
            | Response::Moved { key, .. }
            | Response::Authenticated { user: key }
            | Response::Queried { key, .. } => Some(key.as_bytes()),
            Response::Error(reply) => reply.key.as_deref(),
            Response::Status(_) => None,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test
mod query_tests {
    use super::*;
    use baton_core::LiveGrant;

    fn line(response: &Response) -> String {
        let mut dst = BytesMut::new();
        response.encode(&mut dst);
        String::from_utf8(dst.to_vec()).unwrap()
    }

    #[test]
    fn q_lines_are_written_as_the_protocol_shows_them() {
        let key = Key::try_from("orders/43").unwrap();
        let held = KeyState {
            grant: Some(LiveGrant {
                token: 1058,
                lease_left_ms: 59_870,
            }),
            waiters: 0,
        };
        assert_eq!(
            line(&Response::Queried {
                key: key.clone(),
                state: held
            }),
            "Q orders/43 token=1058 lease=59.870 waiters=0\n"
        );
        let short = KeyState {
            grant: Some(LiveGrant {
                token: 7,
                lease_left_ms: 5,
            }),
            waiters: 3,
        };
        assert_eq!(
            line(&Response::Queried {
                key: key.clone(),
                state: short
            }),
            "Q orders/43 token=7 lease=0.005 waiters=3\n"
        );
        let free = KeyState {
            grant: None,
            waiters: 2,
        };
        assert_eq!(
            line(&Response::Queried { key, state: free }),
            "Q orders/43 token=- lease=- waiters=2\n"
        );
    }
}
