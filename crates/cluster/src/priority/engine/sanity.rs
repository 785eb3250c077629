//! Sanity bounds on what a peer reports, so that one bug or bad disk cannot
//! poison a cluster: a message with a token or term far beyond what any
//! node can have reached by now, or naming a node that is not a peer, is
//! refused whole (as if it never came: the sender is not even counted as
//! heard) and logged, at most once a minute per peer.
//!
//! The bound is `wall_floor(wall + 1 h + failure timeout)`, `wall` being
//! this node's wall clock: far above what a sound cluster reaches, far
//! below 2^64. docs/cluster.md ("Why the priority bound is never
//! reached") gives the arithmetic and what it costs.

use baton_core::{Millis, Token};

use super::super::messages::{NodeIndex, PriorityMessage, TablePart};
use super::pieces::highest_token;
use super::{wall_floor, PersistedState, PriorityNode};

/// How far past this node's wall clock (beyond the failure timeout) a
/// peer's tokens and terms may lie: the single node's bound on its saved
/// tokens too.
pub use baton_server::token_floor::CLOCK_ALLOWANCE_MS;

/// At most one log line per peer this often about its refused messages.
pub const REFUSAL_LOG_EVERY_MS: Millis = 60_000;

/// Why a peer's message (or a recovered state) was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Implausible {
    #[error(
        "{what} {value} is beyond {bound}, more than the cluster can have reached by this \
         node's clock (a bug or bad disk at the source, or this node's clock is over an hour \
         behind)"
    )]
    TooHigh {
        what: &'static str,
        value: u64,
        bound: u64,
    },
    #[error("{what} names node {index}, which is not a peer of the sender")]
    BadIndex {
        what: &'static str,
        index: NodeIndex,
    },
    #[error("commands numbered from {first_seq} run past the end of the sequence numbers")]
    SeqOverflow { first_seq: u64 },
}

impl<H> PriorityNode<H> {
    /// The highest token or term a peer may report at `now` (see the
    /// module comment).
    pub(super) fn token_bound(&self, now: Millis) -> Token {
        let wall = self
            .wall(now)
            .saturating_add(CLOCK_ALLOWANCE_MS)
            .saturating_add(self.config.failure_timeout_ms);
        wall_floor(wall)
    }

    fn check_value(&self, what: &'static str, value: u64, now: Millis) -> Result<(), Implausible> {
        let bound = self.token_bound(now);
        if value > bound {
            return Err(Implausible::TooHigh { what, value, bound });
        }
        Ok(())
    }

    fn check_part(&self, part: &TablePart, now: Millis) -> Result<(), Implausible> {
        self.check_value("a table's token", highest_token(part), now)
    }

    /// Whether `message` from `from` is within the sanity bounds.
    pub(super) fn check_message(
        &self,
        from: NodeIndex,
        message: &PriorityMessage,
        now: Millis,
    ) -> Result<(), Implausible> {
        match message {
            PriorityMessage::Heartbeat(beat) => {
                self.check_value("heartbeat term", beat.term, now)?;
                self.check_value("heartbeat token", beat.last_token, now)?;
                match beat.following {
                    Some(index) if index >= self.peers.len() || index == from => {
                        Err(Implausible::BadIndex {
                            what: "heartbeat",
                            index,
                        })
                    }
                    _ => Ok(()),
                }
            }
            PriorityMessage::SnapshotPart { term, part, .. } => {
                self.check_value("snapshot term", *term, now)?;
                self.check_part(part, now)
            }
            PriorityMessage::HandoffPart { part } => self.check_part(part, now),
            PriorityMessage::Commands {
                term,
                first_seq,
                commands,
            } => {
                self.check_value("commands term", *term, now)?;
                if first_seq.checked_add(commands.len() as u64).is_none() {
                    return Err(Implausible::SeqOverflow {
                        first_seq: *first_seq,
                    });
                }
                self.check_value("a command's token", commands.highest_token(), now)
            }
            PriorityMessage::SyncRequest
            | PriorityMessage::HandoffTaken
            | PriorityMessage::HandoffRefused => Ok(()),
        }
    }

    /// Whether a state read back from `--data-dir` is within the same
    /// bounds: a damaged file must not poison the node, nor through its
    /// heartbeats the cluster.
    pub fn check_recovered(&self, state: &PersistedState, now: Millis) -> Result<(), Implausible> {
        self.check_value("term", state.term, now)?;
        self.check_value("token", state.seen_token, now)?;
        let highest = state
            .table
            .locks
            .iter()
            .map(|l| l.token)
            .fold(state.table.last_token, Token::max);
        self.check_value("table token", highest, now)
    }

    /// Notes a refused message from `from`, and logs it unless this peer
    /// was logged less than a minute ago (then the next line counts it).
    pub(super) fn note_refusal(&mut self, from: NodeIndex, why: &Implausible, now: Millis) {
        let Some(peer) = self.peers.get_mut(from) else {
            debug_assert!(false, "a refusal from node {from}, not a peer");
            return;
        };
        peer.refused = peer.refused.saturating_add(1);
        peer.refused_total = peer.refused_total.saturating_add(1);
        self.warn_peer(from, now, &format_args!("refused a peer's message: {why}"));
    }

    /// Logs trouble with `from`'s messages, at most once a minute per
    /// peer whatever the trouble: a peer's frames never make a line each.
    pub(super) fn warn_peer(&mut self, from: NodeIndex, now: Millis, what: &dyn std::fmt::Display) {
        let Some(peer) = self.peers.get_mut(from) else {
            debug_assert!(false, "trouble with node {from}, not a peer");
            return;
        };
        if peer.refusal_log.note(now, REFUSAL_LOG_EVERY_MS).is_some() {
            tracing::warn!(
                peer = super::roles::addr_in(&self.config.peers, from),
                refused = peer.refused,
                "{what}"
            );
            peer.refusal_lines += 1;
            peer.refused = 0;
        }
    }

    /// How many messages of `peer` failed the sanity checks.
    pub fn refused_from(&self, peer: NodeIndex) -> u64 {
        self.peers.get(peer).map_or(0, |p| p.refused_total)
    }

    /// How many log lines the refusals of `peer` made.
    #[cfg(test)]
    pub(crate) fn refusal_log_lines(&self, peer: NodeIndex) -> u64 {
        self.peers.get(peer).map_or(0, |p| p.refusal_lines)
    }
}
