//! A client's request as a node's lock logic sees it, and the node's
//! answer: the one input [`LockNode::handle`](crate::LockNode::handle)
//! takes and the one output it gives, whatever the request.
//!
//! A request is a value, as in mini-redis's `Command`: the connection
//! makes it from the decoded line, [`SharedLocks`](crate::SharedLocks)
//! counts it by its [`Op`], and each node answers it in one `match`. A new
//! request is a new variant here, its line in the codec, its rule in
//! `baton_core` and its arm in each node's `handle`.

use baton_core::{
    Acquire, AcquireOptions, AcquireOutcome, HolderValue, Key, KeyState, Millis, Outcome, StateTag,
    Token, WatchId,
};
use baton_proto::{Op, Request, Response};

use crate::delivery::Mailbox;

/// A request to the lock logic. The key is borrowed from the decoded
/// line, which the connection keeps for its answer: making the request
/// copies nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockRequest<'a> {
    Acquire(AcquireRef<'a>),
    Release {
        key: &'a Key,
        token: Token,
    },
    Renew {
        key: &'a Key,
        token: Token,
        lease_ms: u64,
    },
    /// `Q`: the key's live grant and waiters; changes nothing.
    Query {
        key: &'a Key,
    },
    /// `V`: sets (`None`: clears) the value of the key's grant with `token`.
    SetValue {
        key: &'a Key,
        token: Token,
        value: Option<&'a HolderValue>,
    },
    /// `W`: answered once the key's state tag differs from `seen`, or when
    /// the wait runs out. `wait_ms` is never 0 here, as for an acquire.
    Watch {
        key: &'a Key,
        wait_ms: u64,
        seen: StateTag,
    },
}

/// A request as it reaches a node: what is asked, the node's time, and
/// the asking connection's mailbox, which hears a late answer and how a
/// queued acquire or a pending watch ends.
#[derive(Debug, Clone, Copy)]
pub struct Incoming<'a> {
    pub request: LockRequest<'a>,
    pub now: Millis,
    pub reply_to: &'a Mailbox,
}

/// An acquire's terms borrowed from the decoded line. `wait_ms` is never
/// 0 here: the connection has turned a `wait 0` into the node's maximum
/// wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AcquireRef<'a> {
    pub key: &'a Key,
    pub wait_ms: u64,
    pub lease_ms: u64,
    pub options: &'a AcquireOptions,
}

impl AcquireRef<'_> {
    /// The terms as the engines keep them (a waiter holds its key and
    /// options).
    pub fn to_acquire(self) -> Acquire {
        let options = self.options.clone();
        Acquire::new(self.key.clone(), self.wait_ms, self.lease_ms, options)
    }
}

impl<'a> LockRequest<'a> {
    /// The lock request a decoded line makes (`None` for `S` and `U`,
    /// which the connection answers itself).
    pub fn from_line(request: &'a Request) -> Option<LockRequest<'a>> {
        Some(match request {
            Request::Acquire {
                key,
                wait_ms,
                lease_ms,
                options,
            } => LockRequest::Acquire(AcquireRef {
                key,
                wait_ms: *wait_ms,
                lease_ms: *lease_ms,
                options,
            }),
            Request::SetValue { key, token, value } => LockRequest::SetValue {
                key,
                token: *token,
                value: value.as_ref(),
            },
            Request::Watch { key, wait_ms, seen } => LockRequest::Watch {
                key,
                wait_ms: *wait_ms,
                seen: *seen,
            },
            Request::Release { key, token } => LockRequest::Release { key, token: *token },
            Request::Renew {
                key,
                token,
                lease_ms,
            } => LockRequest::Renew {
                key,
                token: *token,
                lease_ms: *lease_ms,
            },
            Request::Query { key } => LockRequest::Query { key },
            Request::Status | Request::Auth { .. } => return None,
        })
    }

    /// The request's kind, as the wire and the metrics name it.
    pub fn op(&self) -> Op {
        match self {
            LockRequest::Acquire(_) => Op::Acquire,
            LockRequest::Release { .. } => Op::Release,
            LockRequest::Renew { .. } => Op::Renew,
            LockRequest::Query { .. } => Op::Query,
            LockRequest::SetValue { .. } => Op::SetValue,
            LockRequest::Watch { .. } => Op::Watch,
        }
    }

    pub fn key(&self) -> &'a Key {
        match *self {
            LockRequest::Acquire(AcquireRef { key, .. })
            | LockRequest::Release { key, .. }
            | LockRequest::Renew { key, .. }
            | LockRequest::Query { key }
            | LockRequest::SetValue { key, .. }
            | LockRequest::Watch { key, .. } => key,
        }
    }
}

/// A node's answer to a [`LockRequest`], of the request's kind.
#[derive(Debug, PartialEq, Eq)]
pub enum Answer {
    /// To an acquire.
    Acquired(AcquireOutcome),
    /// To a release, a renewal or a set-value.
    Changed(Outcome),
    /// To a query.
    Queried(KeyState),
    /// To a watch whose client saw another state: answered now.
    Watched(KeyState),
    /// To a watch that waits for a change: its answer comes as a
    /// [`crate::NodeEvent::WatchAnswered`] with this id.
    Watching(WatchId),
    /// Refused with `E <op> <key> <reason>`, changing nothing: a watch past
    /// the node's cap, a request this mode does not serve.
    Refused(String),
}

/// The wire answer to a release or renewal (`op`) of `key`, now or late.
pub(crate) fn change_response(op: Op, key: Key, outcome: Outcome) -> Response {
    match outcome {
        Outcome::Released if op == Op::Release => Response::Released { key },
        Outcome::Renewed if op == Op::Renew => Response::Renewed { key },
        Outcome::ValueSet if op == Op::SetValue => Response::ValueSet { key },
        _ => Response::NotHeld { op, key },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::key;

    #[test]
    fn a_lock_request_keeps_the_lines_op_key_and_numbers() {
        let k = key("k");
        let lines = [
            Request::Acquire {
                key: k.clone(),
                wait_ms: 5,
                lease_ms: 7,
                options: baton_proto::AcquireOptions::default(),
            },
            Request::Release {
                key: k.clone(),
                token: 9,
            },
            Request::Renew {
                key: k.clone(),
                token: 9,
                lease_ms: 7,
            },
            Request::Query { key: k.clone() },
            Request::SetValue {
                key: k.clone(),
                token: 9,
                value: None,
            },
            Request::Watch {
                key: k.clone(),
                wait_ms: 5,
                seen: StateTag::Plain(9),
            },
        ];
        for line in &lines {
            let request = LockRequest::from_line(line)
                .unwrap_or_else(|| panic!("{line:?} is a lock request"));
            assert_eq!((request.op(), request.key()), (line.op(), &k));
        }
        assert_eq!(
            LockRequest::from_line(&lines[0]),
            Some(LockRequest::Acquire(AcquireRef {
                key: &k,
                wait_ms: 5,
                lease_ms: 7,
                options: &baton_proto::AcquireOptions::default(),
            }))
        );
        assert_eq!(
            LockRequest::from_line(&lines[2]),
            Some(LockRequest::Renew {
                key: &k,
                token: 9,
                lease_ms: 7
            })
        );
        assert_eq!(LockRequest::from_line(&Request::Status), None);
    }
}
