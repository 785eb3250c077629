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
//!
//! Watches (`W`) read the same way where they report a state the log has
//! not just brought: one whose client saw another state than the
//! leader's table holds is answered after a round (the table may be
//! stale), and so is one whose wait ran out (its answer says the key did
//! not change, which only a confirmed leader knows). A watch answered on
//! a committed change needs no round: the state is the log's.

use std::time::Duration;

use baton_core::{Key, KeyState, Watch};
use baton_proto::{Op, Response};
use baton_server::{watch_answer, Mailbox, NodeEvent};

/// The longest a query waits for its confirmation: within the protocol's
/// 3 s answer time, with room for the answer.
pub const READ_WAIT: Duration = Duration::from_secs(2);

/// Queries at most waiting at once on one node (a flood of `Q` must not
/// grow the node without bound). Past it, `M Q <key> -`, as when the lead
/// cannot be confirmed: protocol 1.1 names `too many` refusals for
/// acquires only, and every client already asks again after `M ... -`.
pub const MAX_QUEUED_READS: usize = 100_000;

/// A request answered from the table once the lead is confirmed.
#[derive(Debug)]
pub enum Read {
    /// `Q <key>`.
    Query { key: Key, reply_to: Mailbox },
    /// A `W` whose client saw another state than the table's: answered
    /// with the key's state at the confirmation (the same as the client
    /// saw, if it changed back meanwhile: a `W` may always report the
    /// state unchanged).
    Watch { key: Key, reply_to: Mailbox },
    /// A pending watch whose wait ran out, taken out of the registry.
    WatchDue(Watch<Mailbox>),
}

impl Read {
    pub fn key(&self) -> &Key {
        match self {
            Read::Query { key, .. } | Read::Watch { key, .. } => key,
            Read::WatchDue(watch) => &watch.key,
        }
    }
}

/// The reads waiting for the next confirmation, and those of the round
/// under way (one at a time).
#[derive(Debug, Default)]
pub struct PendingReads {
    queued: Vec<Read>,
    confirming: Option<Vec<Read>>,
}

impl PendingReads {
    /// Queues a read; given back if too many wait already.
    pub fn push(&mut self, read: Read) -> Result<(), Read> {
        if self.queued.len() >= MAX_QUEUED_READS {
            return Err(read);
        }
        self.queued.push(read);
        Ok(())
    }

    /// The reads not yet in a round.
    pub fn take_queued(&mut self) -> Vec<Read> {
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

    /// Ends the round under way, with its reads.
    pub fn end_round(&mut self) -> Vec<Read> {
        self.confirming.take().unwrap_or_default()
    }
}

/// A read's answer as the server sends it: the key's state if the read
/// was confirmed, else `M` to `leader` (or `-`).
pub fn answer(read: Read, state: Result<KeyState, Option<String>>) -> NodeEvent {
    let (op, key, reply_to) = match read {
        Read::WatchDue(watch) => return watch_answer(watch, state),
        Read::Query { key, reply_to } => (Op::Query, key, reply_to),
        Read::Watch { key, reply_to } => (Op::Watch, key, reply_to),
    };
    let response = match state {
        Ok(state) if op == Op::Query => Response::Queried { key, state },
        Ok(state) => Response::Watched { key, state },
        Err(addr) => Response::Moved { op, key, addr },
    };
    NodeEvent::Reply {
        mailbox: reply_to,
        response,
    }
}
