//! `Q <key>` on a Raft leader: a linearizable read. The leader's table may
//! be stale if another node has been elected meanwhile, so before it
//! answers, the leader confirms with a majority that it still leads and
//! waits until it has applied everything committed up to then (openraft's
//! read index, `ensure_linearizable`). Queries that arrive while one
//! confirmation runs wait for the next, so a burst of them costs one round.
//!
//! A confirmation that fails, or takes longer than [`READ_WAIT`] (a
//! leader cut off from its majority), answers `M` as the answer-time rule
//! asks.

use std::time::Duration;

use baton_core::{Key, KeyState};
use baton_proto::{Op, Response};
use baton_server::{Mailbox, NodeEvent};

/// The longest a query waits for its confirmation: within the protocol's
/// 3 s answer time, with room for the answer.
pub const READ_WAIT: Duration = Duration::from_secs(2);

/// Queries at most waiting at once on one node (a flood of `Q` must not
/// grow the node without bound). Past it, `M Q <key> -`, as when the lead
/// cannot be confirmed: protocol 1.1 names `too many` refusals for
/// acquires only, and every client already asks again after `M ... -`.
pub const MAX_QUEUED_READS: usize = 100_000;

/// The queries waiting for the next confirmation, and those of the round
/// under way (one at a time).
#[derive(Debug, Default)]
pub struct PendingReads {
    queued: Vec<(Key, Mailbox)>,
    confirming: Option<Vec<(Key, Mailbox)>>,
}

impl PendingReads {
    /// Queues a query; `false` if too many wait already.
    pub fn push(&mut self, key: Key, reply_to: Mailbox) -> bool {
        if self.queued.len() >= MAX_QUEUED_READS {
            return false;
        }
        self.queued.push((key, reply_to));
        true
    }

    /// The queries not yet in a round.
    pub fn take_queued(&mut self) -> Vec<(Key, Mailbox)> {
        std::mem::take(&mut self.queued)
    }

    /// Whether a round should start: queries wait and none is under way.
    pub fn round_due(&self) -> bool {
        self.confirming.is_none() && !self.queued.is_empty()
    }

    /// Starts a round with every query that waits.
    pub fn start_round(&mut self) {
        self.confirming = Some(self.take_queued());
    }

    /// Ends the round under way, with its queries.
    pub fn end_round(&mut self) -> Vec<(Key, Mailbox)> {
        self.confirming.take().unwrap_or_default()
    }
}

/// A query's answer as the server sends it: the key's state if the read
/// was confirmed, else `M` to `leader` (or `-`).
pub fn answer(key: Key, reply_to: Mailbox, state: Result<KeyState, Option<String>>) -> NodeEvent {
    let response = match state {
        Ok(state) => Response::Queried { key, state },
        Err(addr) => Response::Moved {
            op: Op::Query,
            key,
            addr,
        },
    };
    NodeEvent::Reply {
        mailbox: reply_to,
        response,
    }
}
