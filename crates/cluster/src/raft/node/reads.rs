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

use std::sync::Arc;
use std::time::Duration;

use baton_core::{Key, KeyState};
use baton_proto::{Op, Response};
use baton_server::{Mailbox, NodeEvent, SharedLocks};
use tokio::sync::Notify;

use crate::raft::node::lock_node::RaftLockNode;
use crate::raft::types::Raft;

/// The longest a query waits for its confirmation: within the protocol's
/// 3 s answer time, with room for the answer.
pub const READ_WAIT: Duration = Duration::from_secs(2);

/// Queries at most waiting at once on one node (a flood of `Q` must not
/// grow the node without bound). Past it, `M Q <key> -`, as when the lead
/// cannot be confirmed: protocol 1.1 names `too many` refusals for
/// acquires only, and every client already asks again after `M ... -`.
pub const MAX_QUEUED_READS: usize = 100_000;

/// The queries waiting for the next confirmation.
#[derive(Debug, Default)]
pub struct PendingReads {
    queued: Vec<(Key, Mailbox)>,
    ready: Arc<Notify>,
}

impl PendingReads {
    /// Queues a query; `false` if too many wait already.
    pub fn push(&mut self, key: Key, reply_to: Mailbox) -> bool {
        if self.queued.len() >= MAX_QUEUED_READS {
            return false;
        }
        self.queued.push((key, reply_to));
        self.ready.notify_one();
        true
    }

    pub fn take(&mut self) -> Vec<(Key, Mailbox)> {
        std::mem::take(&mut self.queued)
    }

    /// Wakes the read task when a query is queued.
    pub fn ready(&self) -> Arc<Notify> {
        self.ready.clone()
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

/// Confirms and answers the queued queries, one round at a time, until
/// the node stops.
pub async fn serve_reads(raft: Raft, locks: Arc<SharedLocks<RaftLockNode>>, ready: Arc<Notify>) {
    loop {
        ready.notified().await;
        let reads = locks.with(|node, _, _| node.take_reads());
        if reads.is_empty() {
            continue;
        }
        let confirmed = tokio::time::timeout(
            READ_WAIT,
            raft.ensure_linearizable(openraft::ReadPolicy::ReadIndex),
        )
        .await;
        let confirmed = matches!(confirmed, Ok(Ok(_)));
        if !confirmed {
            tracing::debug!(
                queries = reads.len(),
                "a read was not confirmed; redirecting"
            );
        }
        locks.with(|node, now, events| node.answer_reads(reads, confirmed, now, events));
    }
}
