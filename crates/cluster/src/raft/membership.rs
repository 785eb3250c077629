//! The operator's online membership changes (`baton member`): list the
//! members, add a node, remove one, each through openraft's joint
//! consensus and only on the leader.
//!
//! A node is added in two steps, so that it never votes before it holds
//! the log: first as a learner (it receives the log, or a snapshot, and
//! does not count in any majority), then, once it has caught up, as a
//! voter. A caller that gave up between the two (the learner was not
//! running yet, say) just asks again: the learner is kept and promoted.
//! A member's address is taken once: a node whose disk was replaced is
//! removed first and added again, under the same address and id, as a
//! fresh learner (see docs/operations.md).

use std::collections::BTreeSet;
use std::time::Duration;

use openraft::async_runtime::WatchReceiver;
use openraft::{BasicNode, ChangeMembers, ServerState};

use super::members::{joined_id, plausible_addr, Members};
use super::node::observe;
use super::types::NodeId;
use super::types::Raft;

/// A learner within this many entries of the leader's log has caught up.
pub const CAUGHT_UP_LAG: u64 = 64;

/// One member as an operator sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberView {
    pub id: NodeId,
    pub addr: String,
    pub voter: bool,
}

/// Why a membership change was not made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MembershipError {
    #[error("this node is not the leader")]
    NotLeader { leader: Option<String> },
    #[error("{0:?} is not a member address (host:port)")]
    BadAddress(String),
    #[error(
        "{0} is already a voting member; to replace its disk, remove it first, then add it again"
    )]
    AlreadyMember(String),
    #[error("{0} is not a member")]
    NotMember(String),
    #[error("{0} is the only voter; a cluster cannot remove its last voter")]
    LastVoter(String),
    #[error("{addr} was added as a learner but has not caught up within {seconds} s (is batond running there with --join?); ask again to promote it once it has")]
    NotCaughtUp { addr: String, seconds: u64 },
    #[error("the membership change failed: {0}")]
    Failed(String),
}

/// The members as this node's log holds them.
pub fn list(raft: &Raft) -> Vec<MemberView> {
    let metrics = raft.metrics().borrow_watched().clone();
    views(&Members::of(metrics.membership_config.membership()))
}

fn views(members: &Members) -> Vec<MemberView> {
    members
        .nodes
        .iter()
        .map(|(&id, addr)| MemberView {
            id,
            addr: addr.clone(),
            voter: members.is_voter(id),
        })
        .collect()
}

/// The members, if this node leads; else where the leader is.
fn leading(raft: &Raft) -> Result<Members, MembershipError> {
    let metrics = raft.metrics().borrow_watched().clone();
    let members = Members::of(metrics.membership_config.membership());
    if metrics.state == ServerState::Leader && metrics.current_leader == Some(metrics.id) {
        return Ok(members);
    }
    let leader = metrics
        .current_leader
        .and_then(|id| members.addr_of(id).map(str::to_string));
    Err(MembershipError::NotLeader { leader })
}

/// Adds the node at `addr`: as a learner, then (once it is within
/// [`CAUGHT_UP_LAG`] entries, waiting at most `catch_up`) as a voter.
pub async fn add(
    raft: &Raft,
    addr: &str,
    catch_up: Duration,
) -> Result<Vec<MemberView>, MembershipError> {
    if !plausible_addr(addr) {
        return Err(MembershipError::BadAddress(addr.to_string()));
    }
    let members = leading(raft)?;
    let id = match members.id_at(addr) {
        Some(id) if members.is_voter(id) => {
            return Err(MembershipError::AlreadyMember(addr.to_string()))
        }
        Some(id) => id,
        None => {
            let id = joined_id(addr);
            if let Some(other) = members.addr_of(id) {
                // Two addresses with one 62-bit id: never seen, refused.
                return Err(MembershipError::Failed(format!(
                    "{addr} would take the id of {other}"
                )));
            }
            let node = BasicNode {
                addr: addr.to_string(),
            };
            raft.add_learner(id, node, false).await.map_err(failed)?;
            tracing::info!(addr, "added a learner");
            id
        }
    };
    wait_caught_up(raft, id, catch_up)
        .await
        .map_err(|()| MembershipError::NotCaughtUp {
            addr: addr.to_string(),
            seconds: catch_up.as_secs(),
        })?;
    let voters = BTreeSet::from([id]);
    raft.change_membership(ChangeMembers::AddVoterIds(voters), false)
        .await
        .map_err(failed)?;
    tracing::info!(addr, "a learner became a voter");
    Ok(list(raft))
}

/// Removes the node at `addr` from the membership (a voter through joint
/// consensus; a learner at once).
pub async fn remove(raft: &Raft, addr: &str) -> Result<Vec<MemberView>, MembershipError> {
    let members = leading(raft)?;
    let Some(id) = members.id_at(addr) else {
        return Err(MembershipError::NotMember(addr.to_string()));
    };
    let change = if members.is_voter(id) {
        if members.voters.len() == 1 {
            return Err(MembershipError::LastVoter(addr.to_string()));
        }
        ChangeMembers::RemoveVoters(BTreeSet::from([id]))
    } else {
        ChangeMembers::RemoveNodes(BTreeSet::from([id]))
    };
    raft.change_membership(change, false)
        .await
        .map_err(failed)?;
    tracing::info!(addr, "removed a member");
    Ok(list(raft))
}

/// Waits until node `id`'s replication is within [`CAUGHT_UP_LAG`] of
/// this leader's log, at most `limit`.
async fn wait_caught_up(raft: &Raft, id: NodeId, limit: Duration) -> Result<(), ()> {
    let mut watch = raft.metrics();
    let caught_up = async {
        loop {
            let ready = {
                let metrics = watch.borrow_watched();
                observe::replication(&metrics)
                    .iter()
                    .any(|p| p.node == id && p.matched.is_some() && p.lag <= CAUGHT_UP_LAG)
            };
            if ready {
                return Ok(());
            }
            if watch.changed().await.is_err() {
                return Err(());
            }
        }
    };
    tokio::time::timeout(limit, caught_up)
        .await
        .unwrap_or(Err(()))
}

fn failed(error: impl std::fmt::Display) -> MembershipError {
    MembershipError::Failed(error.to_string())
}
