//! What a Raft node tells an operator beyond `S` (the HTTP endpoint): the
//! members with their roles and, on a leader, each follower's replication.

use baton_server::inspect::Member;
use baton_server::Mailbox;

use crate::raft::engine::{RaftEngine, RaftRole};
use crate::raft::node::observe::PeerProgress;
use crate::raft::types::NodeId;

/// Every node of the membership: `leader` for the one this node knows
/// leads, `follower` for the others (`unknown` while no leader is known),
/// `candidate` for this node while it runs for the lead; followers carry
/// their matched index and lag on a leader, and a follower the leader has
/// not heard for a while (`silent`) is `down`.
pub(crate) fn members(
    engine: &RaftEngine<Mailbox>,
    progress: &[PeerProgress],
    silent: &[NodeId],
) -> Vec<Member> {
    let me = engine.me();
    let leader = match engine.role() {
        RaftRole::Leader { .. } => Some(me),
        RaftRole::Follower { leader } => leader,
        RaftRole::Candidate => None,
    };
    let members = engine.members();
    members
        .nodes
        .iter()
        .map(|(&id, addr)| {
            let state = match (leader, engine.role()) {
                (Some(l), _) if l == id => "leader",
                (_, RaftRole::Candidate) if id == me => "candidate",
                (Some(l), _) if l == me && silent.contains(&id) => "down",
                (Some(_), _) => "follower",
                (None, _) if id == me => "follower",
                (None, _) => "unknown",
            };
            let seen = progress.iter().find(|p| p.node == id);
            Member {
                addr: addr.clone(),
                is_self: id == me,
                state,
                voter: members.is_voter(id),
                matched: seen.and_then(|p| p.matched),
                lag: seen.map(|p| p.lag),
            }
        })
        .collect()
}
