//! The `S` response: what a node is and what it holds.

use std::fmt;
use std::str::FromStr;

use baton_core::Token;
use bytes::{BufMut, BytesMut};

use crate::number::put_u64;

/// The protocol version a node speaks: its `S` answer's `protocol=`
/// field, written before `version=`.
pub const PROTOCOL_VERSION: &str = "1.2";

/// What a node does in its cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Single,
    Active,
    Standby,
    Leader,
    Follower,
    Candidate,
    /// A Raft node removed from the cluster's membership: it serves no
    /// more.
    Removed,
}

/// How a node's cluster replicates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Single,
    Priority,
    Raft,
}

/// A `role=` or `mode=` value that is not one of the protocol's words.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} {word:?}")]
pub struct UnknownWord {
    pub what: &'static str,
    pub word: String,
}

impl Role {
    pub const ALL: [Role; 7] = [
        Role::Single,
        Role::Active,
        Role::Standby,
        Role::Leader,
        Role::Follower,
        Role::Candidate,
        Role::Removed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Single => "single",
            Role::Active => "active",
            Role::Standby => "standby",
            Role::Leader => "leader",
            Role::Follower => "follower",
            Role::Candidate => "candidate",
            Role::Removed => "removed",
        }
    }
}

impl Mode {
    pub const ALL: [Mode; 3] = [Mode::Single, Mode::Priority, Mode::Raft];

    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Single => "single",
            Mode::Priority => "priority",
            Mode::Raft => "raft",
        }
    }
}

impl FromStr for Role {
    type Err = UnknownWord;
    fn from_str(s: &str) -> Result<Role, UnknownWord> {
        Role::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| UnknownWord {
                what: "role",
                word: s.to_owned(),
            })
    }
}

impl FromStr for Mode {
    type Err = UnknownWord;
    fn from_str(s: &str) -> Result<Mode, UnknownWord> {
        Mode::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| UnknownWord {
                what: "mode",
                word: s.to_owned(),
            })
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The fields of an `S` line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatusReport {
    pub role: Role,
    pub mode: Mode,
    /// `self=`: this node's client address.
    pub self_addr: String,
    /// `active=`: the active node's address; `None` is written `-`.
    pub active: Option<String>,
    /// `token=`: the last token issued or seen.
    pub token: Token,
    /// `locks=`: grants held.
    pub locks: u64,
    /// `waiters=`: queued acquires.
    pub waiters: u64,
    /// Any other `field=value`, kept in order so newer nodes can add fields
    /// older clients still read. Neither part may hold a space or LF.
    pub extra: Vec<(String, String)>,
}

impl StatusReport {
    /// Writes `S role=.. mode=.. self=.. active=.. token=.. locks=..
    /// waiters=..` and then the extra fields, LF included.
    pub(crate) fn encode(&self, dst: &mut BytesMut) {
        let extra_len: usize = self.extra.iter().map(|(k, v)| k.len() + v.len() + 2).sum();
        let active = self.active.as_deref().unwrap_or("-");
        dst.reserve(self.self_addr.len() + active.len() + extra_len + 150);
        dst.put_slice(b"S role=");
        dst.put_slice(self.role.as_str().as_bytes());
        dst.put_slice(b" mode=");
        dst.put_slice(self.mode.as_str().as_bytes());
        dst.put_slice(b" self=");
        dst.put_slice(self.self_addr.as_bytes());
        dst.put_slice(b" active=");
        dst.put_slice(active.as_bytes());
        dst.put_slice(b" token=");
        put_u64(dst, self.token);
        dst.put_slice(b" locks=");
        put_u64(dst, self.locks);
        dst.put_slice(b" waiters=");
        put_u64(dst, self.waiters);
        for (name, value) in &self.extra {
            dst.put_u8(b' ');
            dst.put_slice(name.as_bytes());
            dst.put_u8(b'=');
            dst.put_slice(value.as_bytes());
        }
        dst.put_u8(b'\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_round_trip() {
        for role in Role::ALL {
            assert_eq!(role.as_str().parse::<Role>(), Ok(role));
            assert_eq!(role.to_string(), role.as_str());
        }
        for mode in Mode::ALL {
            assert_eq!(mode.as_str().parse::<Mode>(), Ok(mode));
            assert_eq!(mode.to_string(), mode.as_str());
        }
        assert_eq!(
            "Single".parse::<Role>(),
            Err(UnknownWord {
                what: "role",
                word: "Single".into()
            })
        );
        assert!("".parse::<Mode>().is_err());
        assert!("paxos".parse::<Mode>().is_err());
    }

    #[test]
    fn writes_the_fields_in_a_fixed_order_then_the_extras() {
        let mut report = StatusReport {
            role: Role::Single,
            mode: Mode::Single,
            self_addr: "127.0.0.1:7411".into(),
            active: Some("127.0.0.1:7411".into()),
            token: 0,
            locks: 0,
            waiters: 0,
            extra: Vec::new(),
        };
        let mut dst = BytesMut::new();
        report.encode(&mut dst);
        assert_eq!(
            &dst[..],
            b"S role=single mode=single self=127.0.0.1:7411 active=127.0.0.1:7411 token=0 locks=0 waiters=0\n"
        );
        report.role = Role::Standby;
        report.mode = Mode::Priority;
        report.active = None;
        report.token = 1057;
        report.locks = 3;
        report.waiters = 12;
        report.extra = vec![("term".into(), "4".into()), ("x".into(), String::new())];
        dst.clear();
        report.encode(&mut dst);
        assert_eq!(
            &dst[..],
            b"S role=standby mode=priority self=127.0.0.1:7411 active=- token=1057 locks=3 waiters=12 term=4 x=\n"
        );
    }
}
