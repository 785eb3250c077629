//! Responses a node sends, and how a client matches them to requests.

use baton_core::{HolderValue, Key, KeyDetail, KeyState, Token};
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
    /// `N R <key>`, `N K <key>` or `N V <key>`: `op` is [`Op::Release`],
    /// [`Op::Renew`] or [`Op::SetValue`].
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
    /// while the key is free; a key that is not plain adds its permits,
    /// mode, holders and `state=<tag>`.
    Queried { key: Key, state: KeyState },
    /// `V <key>`: the holder's value is set (or cleared).
    ValueSet { key: Key },
    /// `W <key> <the fields of Q> state=<tag>`: the answer to a watch.
    Watched { key: Key, state: KeyState },
}

/// Seconds with always three decimals, as docs/protocol.md's example
/// writes a lease.
fn put_lease(dst: &mut BytesMut, lease_left_ms: u64) {
    put_u64(dst, lease_left_ms / 1000);
    dst.put_u8(b'.');
    let ms = lease_left_ms % 1000;
    dst.put_slice(&[
        b'0' + (ms / 100) as u8,
        b'0' + (ms / 10 % 10) as u8,
        b'0' + (ms % 10) as u8,
    ]);
}

/// ` permits=<n> mode=<m> holders=<c> holder=<t>,<s>,<v|-> ...`.
fn encode_detail(detail: &KeyDetail, dst: &mut BytesMut) {
    dst.reserve(48 + detail.holders.len() * (64 + baton_core::MAX_VALUE_LEN));
    dst.put_slice(b" permits=");
    put_u64(dst, u64::from(detail.permits));
    dst.put_slice(b" mode=");
    dst.put_slice(detail.mode.as_str().as_bytes());
    dst.put_slice(b" holders=");
    put_u64(dst, detail.holder_count);
    for holder in &detail.holders {
        dst.put_slice(b" holder=");
        put_u64(dst, holder.token);
        dst.put_u8(b',');
        put_lease(dst, holder.lease_left_ms);
        dst.put_u8(b',');
        dst.put_slice(
            holder
                .value
                .as_ref()
                .map_or(&b"-"[..], HolderValue::as_bytes),
        );
    }
}

/// ` token=<t> lease=<s> waiters=<n>` (`-` for token and lease while
/// free), then a key's detail if it is not plain, then ` state=<tag>` if
/// it is not plain or `always_tag` (a `W` answer).
fn encode_key_state(state: &KeyState, always_tag: bool, dst: &mut BytesMut) {
    dst.reserve(64);
    dst.put_slice(b" token=");
    match &state.grant {
        Some(grant) => {
            put_u64(dst, grant.token);
            dst.put_slice(b" lease=");
            put_lease(dst, grant.lease_left_ms);
        }
        None => dst.put_slice(b"- lease=-"),
    }
    dst.put_slice(b" waiters=");
    put_u64(dst, state.waiters);
    if let Some(detail) = &state.detail {
        encode_detail(detail, dst);
    }
    if always_tag || state.detail.is_some() {
        dst.put_slice(b" state=");
        dst.put_slice(state.tag().to_string().as_bytes());
    }
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
            Response::ValueSet { key } => (b'V', key),
            Response::Watched { key, .. } => (b'W', key),
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
            Response::Queried { state, .. } => encode_key_state(state, false, dst),
            Response::Watched { state, .. } => encode_key_state(state, true, dst),
            _ => {}
        }
        dst.put_u8(b'\n');
    }

    /// The op used to match this response to its request (docs/protocol.md,
    /// "Matching"): `A` and `T` answer acquires, `R` releases, `K` renewals;
    /// `N`, `M` and `E` name their op; `S` answers status, `U` authenticate,
    /// `Q` query, `V` set-value and `W` watch.
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
            Response::ValueSet { .. } => Some(Op::SetValue),
            Response::Watched { .. } => Some(Op::Watch),
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
            | Response::Queried { key, .. }
            | Response::ValueSet { key }
            | Response::Watched { key, .. } => Some(key.as_bytes()),
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
        let held = KeyState::plain(
            Some(LiveGrant {
                token: 1058,
                lease_left_ms: 59_870,
            }),
            0,
        );
        assert_eq!(
            line(&Response::Queried {
                key: key.clone(),
                state: held
            }),
            "Q orders/43 token=1058 lease=59.870 waiters=0\n"
        );
        let short = KeyState::plain(
            Some(LiveGrant {
                token: 7,
                lease_left_ms: 5,
            }),
            3,
        );
        assert_eq!(
            line(&Response::Queried {
                key: key.clone(),
                state: short
            }),
            "Q orders/43 token=7 lease=0.005 waiters=3\n"
        );
        let free = KeyState::plain(None, 2);
        assert_eq!(
            line(&Response::Queried {
                key: key.clone(),
                state: free.clone()
            }),
            "Q orders/43 token=- lease=- waiters=2\n"
        );
        assert_eq!(
            line(&Response::Watched { key, state: free }),
            "W orders/43 token=- lease=- waiters=2 state=-\n"
        );
    }

    #[test]
    fn a_key_that_is_not_plain_lists_its_holders_and_tag() {
        use baton_core::{HolderState, KeyDetail, LockMode, StateTag};
        let key = Key::try_from("pool").unwrap();
        let state = KeyState {
            grant: Some(LiveGrant {
                token: 12,
                lease_left_ms: 9_000,
            }),
            waiters: 1,
            detail: Some(Box::new(KeyDetail {
                permits: 4,
                mode: LockMode::Exclusive,
                holder_count: 2,
                holders: vec![
                    HolderState {
                        token: 10,
                        lease_left_ms: 1_500,
                        value: Some(HolderValue::try_from("a,b").unwrap()),
                    },
                    HolderState {
                        token: 12,
                        lease_left_ms: 9_000,
                        value: None,
                    },
                ],
                tag: StateTag::Holders {
                    newest: 12,
                    count: 2,
                    hash: 0xab,
                },
            })),
        };
        assert_eq!(
            line(&Response::Queried {
                key: key.clone(),
                state: state.clone()
            }),
            "Q pool token=12 lease=9.000 waiters=1 permits=4 mode=exclusive holders=2 \
             holder=10,1.500,a,b holder=12,9.000,- state=12.2.00000000000000ab\n"
        );
        assert_eq!(
            line(&Response::Watched { key, state }),
            "W pool token=12 lease=9.000 waiters=1 permits=4 mode=exclusive holders=2 \
             holder=10,1.500,a,b holder=12,9.000,- state=12.2.00000000000000ab\n"
        );
    }
}
