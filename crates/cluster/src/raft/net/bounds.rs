//! Sanity bounds on what a Raft peer reports, checked before openraft sees
//! it: even an authenticated peer may be buggy or read a damaged disk, and
//! one implausible number must not poison the cluster.
//!
//! - **Terms.** At most [`MAX_TERM_LEAP`] (2^32) beyond this node's own,
//!   never at or over [`TERM_CEILING`]: a term near 2^64 made openraft's
//!   next election overflow and panic on every node, while a node away for
//!   long (or wiped, at term 0) must still be let back.
//! - **Log ids.** None of a later term than its sender's; indexes under
//!   [`INDEX_CEILING`]; entries one by one.
//! - **Payload.** At most [`MAX_PAYLOAD_ENTRIES`] entries of at most
//!   [`MAX_BATCH`] commands (see [`crate::raft::net::limits`]).
//! - **Tokens.** A token floor at most this node's wall-clock floor plus
//!   [`CLOCK_ALLOWANCE_MS`](crate::priority::CLOCK_ALLOWANCE_MS) ([`max_floor_at`]); a snapshot's tokens at most
//!   that plus what a log of its length can have granted
//!   ([`max_token_at`]).
//! - **Membership.** See [`crate::raft::members`].
//!
//! Why each bound is safe, and what it costs, is in docs/cluster.md
//! ("Sanity bounds on what peers report"). Refusals are logged at most
//! once per peer per [`COMPLAINT_INTERVAL`] ([`Complaints`]).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use baton_core::{Command, LogGate, TableSnapshot, Token};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, TransferLeaderRequest, TransferLeaderResponse,
    VoteRequest, VoteResponse,
};
use openraft::EntryPayload;
use tokio::time::Instant;

use crate::raft::engine::MAX_BATCH;
use crate::raft::net::limits::MAX_PAYLOAD_ENTRIES;
use crate::raft::types::{LogId, NodeId, SnapshotMeta, StoredMembership, TypeConfig, Vote};

/// How far beyond this node's term a peer's term may be.
pub const MAX_TERM_LEAP: u64 = 1 << 32;
/// No term at or over this is taken: openraft must always have room to
/// add one.
pub const TERM_CEILING: u64 = 1 << 63;
/// No log index at or over this is taken: 2^62 entries is 146,000 years
/// at a million entries a second.
pub const INDEX_CEILING: u64 = 1 << 62;
/// One log line per peer per this.
pub const COMPLAINT_INTERVAL: Duration = Duration::from_secs(60);

/// Why a peer's message was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Implausible {
    #[error("term {term} is far beyond this node's term {current}")]
    Term { term: u64, current: u64 },
    #[error("log index {0} is beyond any log a cluster can have written")]
    Index(u64),
    #[error("node id {0} is not one a node can have")]
    Node(u64),
    #[error("a log id of term {term} from the leader of term {leader}")]
    LaterThanLeader { term: u64, leader: u64 },
    #[error("entry {got} does not follow {after:?}")]
    NotConsecutive { after: Option<u64>, got: u64 },
    #[error("{0} entries in one append, more than {MAX_PAYLOAD_ENTRIES}")]
    TooManyEntries(usize),
    #[error("an entry of {0} commands, more than {MAX_BATCH}")]
    TooManyCommands(usize),
    #[error("token {token} at log index {index:?}, beyond any token that log can have granted")]
    Token { token: Token, index: Option<u64> },
    #[error("a membership no cluster can have: {0}")]
    Membership(#[from] crate::raft::members::BadMembership),
    #[error("snapshot data does not decode: {0}")]
    SnapshotData(String),
    #[error("a reply that matches nothing sent")]
    Reply,
}

/// How many tokens a table can have granted above its highest floor once
/// the log entry at `index` is applied (`None`: nothing applied, none).
pub fn max_token_at(index: Option<u64>) -> Token {
    index.map_or(0, |i| i.saturating_add(1).saturating_mul(MAX_BATCH as u64))
}

/// The highest token floor a leader can have proposed by `wall_ms` (ms
/// since 1970) on this node's clock.
pub fn max_floor_at(wall_ms: u64) -> Token {
    baton_server::token_floor::credible_token_bound(wall_ms)
}

/// What a message is checked against: this node's view.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// This node's current term.
    pub term: u64,
    /// This node's wall clock, ms since 1970.
    pub wall_ms: u64,
}

impl Bounds {
    fn term(&self, term: u64) -> Result<(), Implausible> {
        term_within(self.term, term)
    }

    fn node(&self, node: NodeId) -> Result<(), Implausible> {
        if !crate::raft::members::plausible_id(node) {
            return Err(Implausible::Node(node));
        }
        Ok(())
    }

    /// A vote: a plausible term, of a node of the cluster.
    fn vote(&self, vote: &Vote) -> Result<u64, Implausible> {
        self.term(vote.leader_id.term)?;
        self.node(vote.leader_id.node_id)?;
        Ok(vote.leader_id.term)
    }

    fn membership(&self, membership: &StoredMembership) -> Result<(), Implausible> {
        let membership = membership.membership();
        crate::raft::members::check(
            membership
                .nodes()
                .map(|(id, node)| (*id, node.addr.as_str())),
            membership.get_joint_config().iter(),
        )?;
        Ok(())
    }

    pub fn check_vote(&self, rpc: &VoteRequest<TypeConfig>) -> Result<(), Implausible> {
        let term = self.vote(&rpc.vote)?;
        log_id_within(rpc.last_log_id.as_ref(), term)
    }

    pub fn check_append(&self, rpc: &AppendEntriesRequest<TypeConfig>) -> Result<(), Implausible> {
        let term = self.vote(&rpc.vote)?;
        log_id_within(rpc.prev_log_id.as_ref(), term)?;
        log_id_within(rpc.leader_commit.as_ref(), term)?;
        if rpc.entries.len() as u64 > MAX_PAYLOAD_ENTRIES {
            return Err(Implausible::TooManyEntries(rpc.entries.len()));
        }
        let mut after = rpc.prev_log_id.as_ref().map(|l| l.index);
        for entry in &rpc.entries {
            log_id_within(Some(&entry.log_id), term)?;
            let index = entry.log_id.index;
            if index != after.map_or(0, |a| a + 1) {
                return Err(Implausible::NotConsecutive { after, got: index });
            }
            after = Some(index);
            match &entry.payload {
                EntryPayload::Normal(proposal) => {
                    if proposal.commands.len() > MAX_BATCH {
                        return Err(Implausible::TooManyCommands(proposal.commands.len()));
                    }
                    for tagged in &proposal.commands {
                        if let Command::RaiseTokenFloor { floor } = tagged.command {
                            if floor > max_floor_at(self.wall_ms) {
                                return Err(Implausible::Token {
                                    token: floor,
                                    index: Some(index),
                                });
                            }
                        }
                    }
                }
                EntryPayload::Membership(membership) => {
                    let stored = StoredMembership::new(Some(entry.log_id), membership.clone());
                    self.membership(&stored)?;
                }
                EntryPayload::Blank => {}
            }
        }
        Ok(())
    }

    /// A snapshot's head, before its data comes.
    pub fn check_snapshot_head(&self, vote: &Vote, meta: &SnapshotMeta) -> Result<(), Implausible> {
        let term = self.vote(vote)?;
        log_id_within(meta.last_log_id.as_ref(), term)?;
        log_id_within(meta.last_membership.log_id().as_ref(), term)?;
        self.membership(&meta.last_membership)
    }

    pub fn check_transfer(
        &self,
        rpc: &TransferLeaderRequest<TypeConfig>,
    ) -> Result<(), Implausible> {
        let term = self.vote(rpc.from_leader())?;
        self.node(*rpc.to_node_id())?;
        log_id_within(rpc.last_log_id(), term)
    }
}

/// A log id no later than the leader's term `term`, its index in range.
fn log_id_within(log_id: Option<&LogId>, term: u64) -> Result<(), Implausible> {
    let Some(log_id) = log_id else {
        return Ok(());
    };
    if log_id.leader_id.term > term {
        return Err(Implausible::LaterThanLeader {
            term: log_id.leader_id.term,
            leader: term,
        });
    }
    if log_id.index >= INDEX_CEILING {
        return Err(Implausible::Index(log_id.index));
    }
    Ok(())
}

/// A snapshot's table: no token beyond what its log can have granted
/// above a floor proposed by `wall_ms` on this node's clock.
pub fn check_table(
    meta: &SnapshotMeta,
    table: &TableSnapshot,
    wall_ms: u64,
) -> Result<(), Implausible> {
    let index = meta.last_log_id.as_ref().map(|l| l.index);
    let highest = table
        .locks
        .iter()
        .map(|l| l.token)
        .max()
        .unwrap_or(0)
        .max(table.last_token);
    if highest > max_floor_at(wall_ms).saturating_add(max_token_at(index)) {
        return Err(Implausible::Token {
            token: highest,
            index,
        });
    }
    Ok(())
}

/// A reply's term against the term of the request it answers: a peer
/// may be ahead (then this node steps down), never implausibly far.
pub fn check_reply_term(sent: u64, got: u64) -> Result<(), Implausible> {
    term_within(sent, got)
}

/// A term a node at term `current` can take.
fn term_within(current: u64, term: u64) -> Result<(), Implausible> {
    if term >= TERM_CEILING || term > current.saturating_add(MAX_TERM_LEAP) {
        return Err(Implausible::Term { term, current });
    }
    Ok(())
}

pub fn check_vote_reply(sent: u64, reply: &VoteResponse<TypeConfig>) -> Result<(), Implausible> {
    let term = reply.vote.leader_id.term;
    check_reply_term(sent, term)?;
    log_id_within(reply.last_log_id.as_ref(), term)
}

/// An append's reply: a higher vote within bounds, a match no further
/// than what was sent (`sent_last`, the request's last log index).
pub fn check_append_reply(
    sent: u64,
    sent_last: Option<u64>,
    reply: &AppendEntriesResponse<TypeConfig>,
) -> Result<(), Implausible> {
    match reply {
        AppendEntriesResponse::HigherVote(vote) => check_reply_term(sent, vote.leader_id.term),
        AppendEntriesResponse::PartialSuccess(Some(matched)) => {
            if sent_last.is_none_or(|last| matched.index > last) || matched.leader_id.term > sent {
                return Err(Implausible::Reply);
            }
            Ok(())
        }
        AppendEntriesResponse::Success
        | AppendEntriesResponse::PartialSuccess(None)
        | AppendEntriesResponse::Conflict => Ok(()),
    }
}

pub fn check_transfer_reply(
    sent: u64,
    reply: &TransferLeaderResponse<TypeConfig>,
) -> Result<(), Implausible> {
    use openraft::raft::TransferLeaderError;
    match reply {
        Ok(()) => Ok(()),
        Err(TransferLeaderError::VoteChanged { actual, .. }) => {
            check_reply_term(sent, actual.leader_id.term)
        }
        Err(TransferLeaderError::LogNotFlushed { actual, .. }) => actual
            .as_ref()
            .map_or(Ok(()), |a| log_id_within(Some(a), a.leader_id.term)),
    }
}

/// Logs refusals once per peer per [`COMPLAINT_INTERVAL`], with how many
/// went unlogged since.
#[derive(Debug, Default)]
pub struct Complaints {
    /// Per peer id (ids come from the peer list: bounded).
    by_peer: Mutex<HashMap<NodeId, LogGate<std::time::Instant>>>,
}

impl Complaints {
    /// Notes that a message `what` of `peer` (at address `addr`, if it is
    /// a member) was refused; returns whether it logged.
    pub fn refused(&self, peer: NodeId, addr: &str, what: &str, why: &Implausible) -> bool {
        let now = Instant::now().into_std();
        let mut by_peer = self.by_peer.lock().unwrap_or_else(PoisonError::into_inner);
        let gate = by_peer.entry(peer).or_default();
        let Some(quiet) = gate.note(now, COMPLAINT_INTERVAL) else {
            return false;
        };
        tracing::warn!(
            peer = addr,
            what,
            reason = %why,
            refused_quietly = quiet,
            "refused an implausible raft message"
        );
        true
    }
}

#[cfg(test)]
#[path = "bounds_tests.rs"]
mod tests;
