//! The operator's online membership changes (`baton member`): list the
//! members, add a node, remove one, each through openraft's joint
//! consensus and only on the leader.
//!
//! A node is added in two steps, so that it never votes before it holds
//! the log: first as a learner (it receives the log, or a snapshot, and
//! does not count in any majority), then, once it has caught up, as a
//! voter. A caller may ask in several steps, each waiting a while: the
//! learner is kept between them and promoted once caught up. At the
//! caller's last step ([`CatchUp::roll_back`]) a learner that has not
//! caught up is removed again, so that an address with no node behind
//! it (a typo, a node not started) does not stay a member for good.
//!
//! A change that leaves an even number of voters is logged as a warning:
//! it tolerates no more failures than one voter fewer.
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
    #[error("{addr} was added as a learner but has not caught up within {} (is batond running there with --join?); ask again to promote it once it has", seconds(*.waited))]
    NotCaughtUp { addr: String, waited: Duration },
    #[error("{addr} did not catch up within {} ({}); it was removed again, the membership is as before", seconds(*.waited), if *.answered { "it answered but was still behind: allow more time for a large table" } else { "nothing took the log there: is batond running there, started with --join?" })]
    RolledBack {
        addr: String,
        waited: Duration,
        /// Whether a node answered there at all.
        answered: bool,
    },
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

/// How long one ask to add a node waits for it to catch up, and whether
/// it is the caller's last.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CatchUp {
    pub wait: Duration,
    /// The caller waits no longer: a learner that has not caught up by
    /// then is removed again.
    pub roll_back: bool,
}

/// `d` in seconds to a tenth, as an operator reads it (`5 s`, `1.5 s`):
/// the time a caller asked for, less the moments its request took.
fn seconds(d: Duration) -> String {
    let tenths = (d.as_millis() + 50) / 100;
    match tenths % 10 {
        0 => format!("{} s", tenths / 10),
        tenth => format!("{}.{tenth} s", tenths / 10),
    }
}

/// Adds the node at `addr`: as a learner, then (once it is within
/// [`CAUGHT_UP_LAG`] entries, waiting at most `catch_up.wait`) as a
/// voter; or, if it has not caught up and `catch_up.roll_back`, removes
/// the learner again.
pub async fn add(
    raft: &Raft,
    addr: &str,
    catch_up: CatchUp,
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
    if let Err(answered) = wait_caught_up(raft, id, catch_up.wait).await {
        return Err(not_caught_up(raft, id, addr, catch_up, answered).await);
    }
    let voters = BTreeSet::from([id]);
    raft.change_membership(ChangeMembers::AddVoterIds(voters), false)
        .await
        .map_err(failed)?;
    tracing::info!(addr, "a learner became a voter");
    Ok(changed(raft))
}

/// A learner that has not caught up: kept for the caller's next ask, or
/// removed again at its last.
async fn not_caught_up(
    raft: &Raft,
    id: NodeId,
    addr: &str,
    catch_up: CatchUp,
    answered: bool,
) -> MembershipError {
    let addr = addr.to_string();
    let waited = catch_up.wait;
    if !catch_up.roll_back {
        return MembershipError::NotCaughtUp { addr, waited };
    }
    let removal = ChangeMembers::RemoveNodes(BTreeSet::from([id]));
    if let Err(error) = raft.change_membership(removal, false).await {
        return MembershipError::Failed(format!(
            "{addr} did not catch up in time, and removing it again failed: {error}"
        ));
    }
    tracing::warn!(
        addr,
        answered,
        "a node added as a learner did not catch up in time; removed it again"
    );
    MembershipError::RolledBack {
        addr,
        waited,
        answered,
    }
}

/// The members after a change, with a warning if the voters are even.
fn changed(raft: &Raft) -> Vec<MemberView> {
    let members = list(raft);
    let voters = members.iter().filter(|m| m.voter).count();
    if voters % 2 == 0 {
        tracing::warn!(
            voters,
            "{voters} voters: an even number tolerates no more failures than {} (a majority is {}); add or remove one",
            voters - 1,
            voters / 2 + 1
        );
    }
    members
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
    Ok(changed(raft))
}

/// Waits until node `id`'s replication is within [`CAUGHT_UP_LAG`] of
/// this leader's log, at most `limit`; else says whether it answered at
/// all (something of the log is known to be there).
async fn wait_caught_up(raft: &Raft, id: NodeId, limit: Duration) -> Result<(), bool> {
    let mut watch = raft.metrics();
    let caught_up = async {
        loop {
            let ready = progress_of(&watch.borrow_watched(), id)
                .is_some_and(|p| p.matched.is_some() && p.lag <= CAUGHT_UP_LAG);
            if ready || watch.changed().await.is_err() {
                return ready;
            }
        }
    };
    if tokio::time::timeout(limit, caught_up).await == Ok(true) {
        return Ok(());
    }
    let answered =
        progress_of(&raft.metrics().borrow_watched(), id).is_some_and(|p| p.matched.is_some());
    Err(answered)
}

/// Node `id`'s replication, as this leader sees it.
fn progress_of(metrics: &observe::Metrics, id: NodeId) -> Option<observe::PeerProgress> {
    observe::replication(metrics)
        .into_iter()
        .find(|p| p.node == id)
}

fn failed(error: impl std::fmt::Display) -> MembershipError {
    MembershipError::Failed(error.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_read_in_seconds_to_a_tenth() {
        assert_eq!(seconds(Duration::from_secs(5)), "5 s");
        assert_eq!(seconds(Duration::from_millis(2_987)), "3 s");
        assert_eq!(seconds(Duration::from_millis(1_462)), "1.5 s");
        assert_eq!(seconds(Duration::ZERO), "0 s");
    }
}
