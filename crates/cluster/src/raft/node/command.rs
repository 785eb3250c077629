//! What the Raft node asks its shell to do ([`RaftCommand`]), and the
//! times its decisions run on ([`NodeTimes`]).

use std::time::Duration;

use super::observe::PeerProgress;
use crate::raft::settings::RaftSettings;
use crate::raft::types::{NodeId, Proposal};

/// One thing for the shell to do against openraft; each one's outcome
/// comes back as the named input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RaftCommand {
    /// Propose these commands as one log entry (one is in flight at a
    /// time); then `handle_proposal_done`.
    Propose { proposal: Proposal, tags: Vec<u64> },
    /// Hold the next proposal for the clients the last entry answered, at
    /// most this long (on a timer finer than tokio's); then
    /// `handle_hold_over`, unless a `Propose` comes first.
    HoldProposal { at_most: Duration },
    /// Confirm with a majority that this node still leads (openraft's
    /// read index), for the queries waiting; then `handle_read_confirmed`.
    ConfirmLead,
    /// Hand the lead to `to`: the replication to `stuck` is stuck, and the
    /// next leader builds every stream afresh.
    TransferLead { to: NodeId, stuck: PeerProgress },
    /// Ask the core when the leader last reached this node; then
    /// `handle_leader_heard`.
    AskLeaderContact,
}

/// The times the node's decisions run on, from the settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeTimes {
    /// A leader without a majority for this long steps down.
    pub step_down_after: Duration,
    /// A live follower whose replication has not moved for this long while
    /// it lags is stuck.
    pub stuck_after: Duration,
    /// How often the node re-reads openraft's metrics (a leader's quorum).
    pub check_every: Duration,
    /// A follower that has not heard its leader for this long is unhealthy.
    pub contact_stale_after: Duration,
    /// A follower that acknowledged no heartbeat for this long is shown
    /// unreachable (`/v1/cluster`, `baton_peer_up`).
    pub silent_after: Duration,
}

impl NodeTimes {
    pub fn of(settings: &RaftSettings) -> NodeTimes {
        NodeTimes {
            step_down_after: settings.step_down_after(),
            stuck_after: settings.stuck_after(),
            check_every: settings.quorum_check_every(),
            // Two election timeouts (or more: the step-down time is at
            // least one).
            contact_stale_after: settings.step_down_after() * 2,
            silent_after: settings.silent_after(),
        }
    }
}
