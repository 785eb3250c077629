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
//! A read also sees every write its connection sent before it, as on a
//! single node (read-your-writes): it carries the engine's next tag when
//! it arrived, its mark, and a confirmed read waits until no client
//! request with a lower tag is still in the log's hands (applied, or
//! answered otherwise). Tags are not per connection, so it waits for the
//! writes of other connections that came before it too: at most the
//! entries already proposed or queued, each answered within the engine's
//! answer budget. Reads leave in arrival order: marks never decrease.
//!
//! Watches (`W`) read the same way where they report a state the log has
//! not just brought: one whose client saw another state than the
//! leader's table holds is answered after a round (the table may be
//! stale), and so is one whose wait ran out (its answer says the key did
//! not change, which only a confirmed leader knows). A watch answered on
//! a committed change needs no round: the state is the log's.

use std::collections::VecDeque;
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

/// A read with its mark: the engine's next tag when it arrived (0: it
/// waits for no write).
pub type Marked = (u64, Read);

/// The reads waiting for the next confirmation, those of the round under
/// way (one at a time), and those confirmed that wait for the writes
/// before them to apply.
#[derive(Debug, Default)]
pub struct PendingReads {
    queued: Vec<Marked>,
    confirming: Option<Vec<Marked>>,
    applying: VecDeque<Marked>,
}

impl PendingReads {
    /// Queues a read taken at `mark`; given back if too many wait already.
    pub fn push(&mut self, mark: u64, read: Read) -> Result<(), Read> {
        if self.queued.len() + self.applying.len() >= MAX_QUEUED_READS {
            return Err(read);
        }
        self.queued.push((mark, read));
        Ok(())
    }

    /// The reads not yet in a round, and those confirmed that wait for
    /// writes: what a node that stops serving redirects.
    pub fn take_unanswered(&mut self) -> Vec<Read> {
        let applying = std::mem::take(&mut self.applying).into_iter();
        let queued = std::mem::take(&mut self.queued).into_iter();
        applying.chain(queued).map(|(_, read)| read).collect()
    }

    /// Keeps a confirmed read until the writes before its mark apply.
    pub fn wait_for_writes(&mut self, marked: Marked) {
        self.applying.push_back(marked);
    }

    /// The confirmed reads, oldest first, while `settled` says the writes
    /// before their marks are all done.
    pub fn take_settled(&mut self, settled: impl Fn(u64) -> bool) -> Vec<Read> {
        let mut ready = Vec::new();
        while let Some((mark, _)) = self.applying.front() {
            if !settled(*mark) {
                break;
            }
            if let Some((_, read)) = self.applying.pop_front() {
                ready.push(read);
            }
        }
        ready
    }

    /// Whether a round should start: queries wait and none is under way.
    pub fn round_due(&self) -> bool {
        self.confirming.is_none() && !self.queued.is_empty()
    }

    /// Starts a round with every query that waits.
    pub fn start_round(&mut self) {
        self.confirming = Some(std::mem::take(&mut self.queued));
    }

    /// Ends the round under way, with its reads.
    pub fn end_round(&mut self) -> Vec<Marked> {
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
