//! Requests a client sends: acquire, release, renew, status, authenticate,
//! query, set a value and watch.

use baton_core::{AcquireOptions, HolderValue, Key, StateTag, Token};
use bytes::{BufMut, BytesMut};

use crate::acquire_options::encode_options;
use crate::duration::format_duration_ms;
use crate::number::put_u64;
use crate::op::Op;
use crate::secret::Secret;

/// One request line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// `A <key> <wait> <lease>[ <option>...]`. `wait_ms` 0 waits as long
    /// as the node allows (the server turns it into its maximum wait);
    /// `lease_ms` is greater than 0 in any request a node accepts. The
    /// default options are a 1.1 acquire's, written without options.
    Acquire {
        key: Key,
        wait_ms: u64,
        lease_ms: u64,
        options: AcquireOptions,
    },
    /// `R <key> <token>`.
    Release { key: Key, token: Token },
    /// `K <key> <token> <lease>`.
    Renew {
        key: Key,
        token: Token,
        lease_ms: u64,
    },
    /// `S`.
    Status,
    /// `U <user> <secret>`: the user name follows the key rules and stands
    /// where a key stands when responses are matched. `Debug` redacts the
    /// secret.
    Auth { user: Key, secret: Secret },
    /// `Q <key>`: the key's live grant and waiters; changes nothing.
    Query { key: Key },
    /// `V <key> <token> <value|->`: sets (or, for `None`, clears) the
    /// value of the grant of `key` with this token.
    SetValue {
        key: Key,
        token: Token,
        value: Option<HolderValue>,
    },
    /// `W <key> <wait> <seen>`: answered once the key's state tag differs
    /// from `seen`, or when the wait runs out (0: the node's maximum).
    Watch {
        key: Key,
        wait_ms: u64,
        seen: StateTag,
    },
}

impl Request {
    pub fn op(&self) -> Op {
        match self {
            Request::Acquire { .. } => Op::Acquire,
            Request::Release { .. } => Op::Release,
            Request::Renew { .. } => Op::Renew,
            Request::Status => Op::Status,
            Request::Auth { .. } => Op::Auth,
            Request::Query { .. } => Op::Query,
            Request::SetValue { .. } => Op::SetValue,
            Request::Watch { .. } => Op::Watch,
        }
    }

    pub fn key(&self) -> Option<&Key> {
        match self {
            Request::Acquire { key, .. }
            | Request::Release { key, .. }
            | Request::Renew { key, .. }
            | Request::Query { key }
            | Request::SetValue { key, .. }
            | Request::Watch { key, .. } => Some(key),
            Request::Auth { user, .. } => Some(user),
            Request::Status => None,
        }
    }

    /// [`Self::key`], taken out of the request.
    /// Cloning a key is a reference count, so this costs no copy.
    pub fn into_key(self) -> Option<Key> {
        self.key().cloned()
    }

    /// Writes the request as one line, LF included, durations in seconds.
    pub fn encode(&self, dst: &mut BytesMut) {
        // Op, key, two numbers of at most 21 bytes each (or a secret, or
        // a token and a value), options, spaces and LF.
        let text_len = match self {
            Request::Auth { secret, .. } => secret.len(),
            Request::SetValue { value, .. } => value.as_ref().map_or(1, HolderValue::len),
            Request::Acquire { options, .. } => options.value.as_ref().map_or(0, HolderValue::len),
            _ => 0,
        };
        dst.reserve(self.key().map_or(0, Key::len) + text_len + 120);
        dst.put_u8(self.op().as_byte());
        if let Some(key) = self.key() {
            dst.put_u8(b' ');
            dst.put_slice(key.as_bytes());
        }
        match self {
            Request::Acquire {
                wait_ms,
                lease_ms,
                options,
                ..
            } => {
                dst.put_u8(b' ');
                format_duration_ms(*wait_ms, dst);
                dst.put_u8(b' ');
                format_duration_ms(*lease_ms, dst);
                encode_options(options, dst);
            }
            Request::SetValue { token, value, .. } => {
                dst.put_u8(b' ');
                put_u64(dst, *token);
                dst.put_u8(b' ');
                dst.put_slice(value.as_ref().map_or(&b"-"[..], HolderValue::as_bytes));
            }
            Request::Watch { wait_ms, seen, .. } => {
                dst.put_u8(b' ');
                format_duration_ms(*wait_ms, dst);
                dst.put_u8(b' ');
                dst.put_slice(seen.to_string().as_bytes());
            }
            Request::Release { token, .. } => {
                dst.put_u8(b' ');
                put_u64(dst, *token);
            }
            Request::Renew {
                token, lease_ms, ..
            } => {
                dst.put_u8(b' ');
                put_u64(dst, *token);
                dst.put_u8(b' ');
                format_duration_ms(*lease_ms, dst);
            }
            Request::Auth { secret, .. } => {
                dst.put_u8(b' ');
                dst.put_slice(secret.as_bytes());
            }
            Request::Status | Request::Query { .. } => {}
        }
        dst.put_u8(b'\n');
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test
mod tests {
    use super::*;

    fn line(req: &Request) -> Vec<u8> {
        let mut dst = BytesMut::new();
        req.encode(&mut dst);
        dst.to_vec()
    }

    fn key(k: &str) -> Key {
        Key::try_from(k).unwrap()
    }

    fn acquire(k: &str, wait_ms: u64, lease_ms: u64, options: AcquireOptions) -> Request {
        Request::Acquire {
            key: key(k),
            wait_ms,
            lease_ms,
            options,
        }
    }

    #[test]
    fn writes_the_protocol_lines() {
        let plain = AcquireOptions::default;
        assert_eq!(
            line(&acquire("orders/42", 5000, 30000, plain())),
            b"A orders/42 5 30\n"
        );
        assert_eq!(line(&acquire("k", 0, 1, plain())), b"A k 0 0.001\n");
        let permits = AcquireOptions {
            permits: 4,
            mode: baton_core::LockMode::Exclusive,
            value: Some(HolderValue::try_from("10.0.0.7:80").unwrap()),
        };
        assert_eq!(
            line(&acquire("k", 0, 1000, permits)),
            b"A k 0 1 permits=4 value=10.0.0.7:80\n"
        );
        assert_eq!(
            line(&acquire("k", 0, 1000, AcquireOptions::shared())),
            b"A k 0 1 mode=shared\n"
        );
        assert_eq!(
            line(&Request::SetValue {
                key: key("k"),
                token: 9,
                value: None,
            }),
            b"V k 9 -\n"
        );
        assert_eq!(
            line(&Request::Watch {
                key: key("k"),
                wait_ms: 30_000,
                seen: StateTag::Plain(9),
            }),
            b"W k 30 9\n"
        );
        assert_eq!(
            line(&Request::Release {
                key: key("orders/42"),
                token: 1057
            }),
            b"R orders/42 1057\n"
        );
        assert_eq!(
            line(&Request::Renew {
                key: key("orders/43"),
                token: 1058,
                lease_ms: 60000
            }),
            b"K orders/43 1058 60\n"
        );
        assert_eq!(line(&Request::Status), b"S\n");
        assert_eq!(
            line(&Request::Auth {
                user: key("billing"),
                secret: Secret::new(b"s3cr3t-value").unwrap()
            }),
            b"U billing s3cr3t-value\n"
        );
    }

    #[test]
    fn debug_hides_the_secret() {
        let auth = Request::Auth {
            user: key("billing"),
            secret: Secret::new(b"s3cr3t-value").unwrap(),
        };
        let shown = format!("{auth:?}");
        assert!(shown.contains("billing"), "{shown}");
        assert!(!shown.contains("s3cr3t"), "{shown}");
        assert_eq!(auth.op(), Op::Auth);
        assert_eq!(auth.key(), Some(&key("billing")));
    }

    #[test]
    fn names_its_op_and_key() {
        let release = Request::Release {
            key: key("k"),
            token: 1,
        };
        assert_eq!(release.op(), Op::Release);
        assert_eq!(release.key(), Some(&key("k")));
        assert_eq!(Request::Status.op(), Op::Status);
        assert_eq!(Request::Status.key(), None);
    }
}
