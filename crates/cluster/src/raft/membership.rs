//! The operator's online membership changes (`baton member`): list the
//! members, add a node, remove one, each through openraft's joint
//! consensus and only on a leader that a majority of the voters answers.
//!
//! A node is added in two steps, so that it never votes before it holds
//! the log: first as a learner (it receives the log, or a snapshot, and
//! does not count in any majority), then, once it has caught up, as a
//! voter. The leader carries an addition through to its end whatever the
//! request that asked for it does (the `addition` module): the learner becomes a
//! voter once caught up, or is removed again at the addition's deadline
//! ([`ADD_DEADLINE`] after it began, unless the caller says how long it
//! waits), so that an address with no node behind it (a typo, a node not
//! started) does not stay a member for good. A leader that finds a
//! learner nobody is adding (its adder lost the lead) adopts it.
//!
//! One change at a time: a second addition while one is under way, or a
//! change while the one before it is still being committed, is refused
//! with the reason. A change is refused too when a majority of the voters
//! would not answer before or after it: a joint consensus with a silent
//! majority on one side commits nothing, and the cluster would stop
//! serving until those nodes came back. A change once proposed runs to its
//! end (both steps of a joint consensus) even if its caller goes away.
//!
//! A change that leaves an even number of voters is logged as a warning:
//! it tolerates no more failures than one voter fewer.
//! A member's address is taken once: a node whose disk was replaced is
//! removed first and added again, under the same address and id, as a
//! fresh learner (see docs/operations.md).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use openraft::async_runtime::WatchReceiver;
use openraft::error::{ChangeMembershipError, ClientWriteError, RaftError};
use openraft::Instant as _;
use openraft::{BasicNode, ChangeMembers, ServerState, TokioInstant};

use baton_server::Tasks;

use super::members::{joined_id, plausible_addr, Members};
use super::node::observe::{self, Metrics};
use super::types::{NodeId, Raft, TypeConfig};

mod addition;

pub use addition::{AddAsk, ADD_DEADLINE, MAX_ADD_WAIT, ROLLBACK_GRACE};

/// A learner within this many entries of the leader's log has caught up.
pub const CAUGHT_UP_LAG: u64 = 64;
/// A change waits at most this long for the one before it to be committed.
const CHANGE_QUEUE_WAIT: Duration = Duration::from_secs(2);
/// A change not committed within this long is answered as such: it stays
/// proposed, and takes effect once a majority stores it. With
/// [`CHANGE_QUEUE_WAIT`], well within an HTTP request's deadline.
const COMMIT_WAIT: Duration = Duration::from_secs(5);

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
    #[error("only {answering} of the {voters} voters answer the leader, fewer than a majority ({}): no membership change can commit; bring voters back first", voters / 2 + 1)]
    NoMajority { answering: usize, voters: usize },
    #[error("removing {addr} would leave {voters} voters of which only {answering} answer, fewer than their majority ({}): the cluster would stop serving until more came back; bring a voter back first, or remove one that is down", voters / 2 + 1)]
    WouldLoseMajority {
        addr: String,
        voters: usize,
        answering: usize,
    },
    #[error("{addr} is being added (a voter once it has caught up, or removed again within {}); one node is added at a time: wait for it, or remove {addr}", seconds(*.left))]
    AddingAnother { addr: String, left: Duration },
    #[error("another membership change is still being committed; try again in a moment")]
    Busy,
    #[error("{addr} was added as a learner {} ago and has not caught up yet (is batond running there with --join?); it becomes a voter once it has, or is removed again within {}: ask again to wait for it", seconds(*.waited), seconds(*.left))]
    NotCaughtUp {
        addr: String,
        waited: Duration,
        left: Duration,
    },
    #[error("{addr} did not catch up within {} ({}); it was removed again, the membership is as before", seconds(*.waited), if *.answered { "it answered but was still behind: allow more time for a large table" } else { "nothing took the log there: is batond running there, started with --join?" })]
    RolledBack {
        addr: String,
        waited: Duration,
        /// Whether a node answered there at all.
        answered: bool,
    },
    #[error("{0} was removed before it caught up")]
    RemovedMeanwhile(String),
    #[error("the change was proposed but not committed within {} (a majority of the voters must store it); it takes effect once they do: see the members listed again", seconds(COMMIT_WAIT))]
    NotCommitted,
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

/// `d` in seconds to a tenth, as an operator reads it (`5 s`, `1.5 s`):
/// the time a caller asked for, less the moments its request took.
fn seconds(d: Duration) -> String {
    let tenths = (d.as_millis() + 50) / 100;
    match tenths % 10 {
        0 => format!("{} s", tenths / 10),
        tenth => format!("{}.{tenth} s", tenths / 10),
    }
}

/// The membership changes of one node; a clone shares them. Changes are
/// made while this node leads; [`MembershipChanges::keep`] runs beside
/// the node for the additions it finds left over.
#[derive(Clone)]
pub struct MembershipChanges {
    shared: Arc<Shared>,
}

struct Shared {
    raft: Raft,
    /// The node's tasks: an addition's and a change's run among them.
    tasks: Tasks,
    /// A voter that acknowledged no heartbeat for this long does not
    /// answer.
    silent_after: Duration,
    /// Held from a change's proposal to its commit: one at a time.
    change: Arc<tokio::sync::Mutex<()>>,
    /// The addition under way on this node.
    addition: Mutex<Option<addition::Addition>>,
}

impl std::fmt::Debug for MembershipChanges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MembershipChanges")
            .field("silent_after", &self.shared.silent_after)
            .finish_non_exhaustive()
    }
}

impl MembershipChanges {
    /// The changes of `raft`'s node, run among its `tasks`; a voter silent
    /// for `silent_after` counts as not answering.
    pub fn new(raft: Raft, silent_after: Duration, tasks: Tasks) -> MembershipChanges {
        let shared = Shared {
            raft,
            tasks,
            silent_after,
            change: Arc::new(tokio::sync::Mutex::new(())),
            addition: Mutex::new(None),
        };
        MembershipChanges {
            shared: Arc::new(shared),
        }
    }

    /// The members as this node's log holds them.
    pub fn list(&self) -> Vec<MemberView> {
        list(&self.shared.raft)
    }

    fn raft(&self) -> &Raft {
        &self.shared.raft
    }

    fn metrics(&self) -> Metrics {
        self.raft().metrics().borrow_watched().clone()
    }

    fn addition(&self) -> std::sync::MutexGuard<'_, Option<addition::Addition>> {
        self.shared
            .addition
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The members, if this node leads and a majority of the voters
    /// answers it; else where the leader is, or how few answer.
    fn leading(&self) -> Result<(Members, Metrics), MembershipError> {
        let metrics = self.metrics();
        let members = Members::of(metrics.membership_config.membership());
        if metrics.state != ServerState::Leader || metrics.current_leader != Some(metrics.id) {
            let leader = metrics
                .current_leader
                .and_then(|id| members.addr_of(id).map(str::to_string));
            return Err(MembershipError::NotLeader { leader });
        }
        let answering = self.answering(&metrics, &members.voters);
        if answering <= members.voters.len() / 2 {
            let voters = members.voters.len();
            return Err(MembershipError::NoMajority { answering, voters });
        }
        Ok((members, metrics))
    }

    /// How many of `voters` answer this leader (itself among them).
    fn answering(&self, metrics: &Metrics, voters: &BTreeSet<NodeId>) -> usize {
        let now = TokioInstant::now();
        voters
            .iter()
            .filter(|&&v| {
                v == metrics.id || observe::answers(metrics, v, now, self.shared.silent_after)
            })
            .count()
    }

    /// Removes the node at `addr` from the membership (a voter through
    /// joint consensus; a learner at once).
    pub async fn remove(&self, addr: &str) -> Result<Vec<MemberView>, MembershipError> {
        let (members, metrics) = self.leading()?;
        let Some(id) = members.id_at(addr) else {
            return Err(MembershipError::NotMember(addr.to_string()));
        };
        let change = if members.is_voter(id) {
            let mut after = members.voters.clone();
            after.remove(&id);
            if after.is_empty() {
                return Err(MembershipError::LastVoter(addr.to_string()));
            }
            let answering = self.answering(&metrics, &after);
            if answering <= after.len() / 2 {
                return Err(MembershipError::WouldLoseMajority {
                    addr: addr.to_string(),
                    voters: after.len(),
                    answering,
                });
            }
            ChangeMembers::RemoveVoters(BTreeSet::from([id]))
        } else {
            ChangeMembers::RemoveNodes(BTreeSet::from([id]))
        };
        self.commit(change).await?;
        tracing::info!(addr, "removed a member");
        warn_if_even(&self.list());
        Ok(self.list())
    }

    /// Proposes `change` once the change before it is committed, and waits
    /// (at most [`COMMIT_WAIT`]) until it is. The change runs on a task of
    /// its own, so that both steps of a joint consensus are made even if
    /// the caller goes away.
    async fn commit(
        &self,
        change: ChangeMembers<NodeId, BasicNode>,
    ) -> Result<(), MembershipError> {
        let queued = self.shared.change.clone().lock_owned();
        let turn = tokio::time::timeout(CHANGE_QUEUE_WAIT, queued)
            .await
            .map_err(|_| MembershipError::Busy)?;
        let raft = self.raft().clone();
        let (tell, committed) = tokio::sync::oneshot::channel();
        self.shared.tasks.spawn(async move {
            let _turn = turn;
            let _ = tell.send(raft.change_membership(change, false).await);
        });
        match tokio::time::timeout(COMMIT_WAIT, committed).await {
            Err(_) => Err(MembershipError::NotCommitted),
            Ok(Err(_)) => Err(MembershipError::Failed("the node is stopping".into())),
            Ok(Ok(result)) => result.map(|_| ()).map_err(|e| write_error(&e)),
        }
    }
}

/// openraft's refusal of a change, in an operator's words.
fn write_error(error: &RaftError<TypeConfig, ClientWriteError<TypeConfig>>) -> MembershipError {
    match error {
        RaftError::APIError(
            ClientWriteError::ForwardToLeader(to) | ClientWriteError::LogEntryDiscarded(to),
        ) => MembershipError::NotLeader {
            leader: to.leader_node.as_ref().map(|n| n.addr.clone()),
        },
        RaftError::APIError(ClientWriteError::ChangeMembershipError(
            ChangeMembershipError::InProgress(_),
        )) => MembershipError::Busy,
        other => MembershipError::Failed(other.to_string()),
    }
}

/// A warning when `members` has an even number of voters.
fn warn_if_even(members: &[MemberView]) {
    let voters = members.iter().filter(|m| m.voter).count();
    if voters > 0 && voters % 2 == 0 {
        let tolerated = voters / 2 - 1;
        tracing::warn!(
            voters,
            "{voters} voters tolerate {tolerated} {}, as {} would (a majority is {}): an even number adds no safety; add or remove one",
            if tolerated == 1 { "failure" } else { "failures" },
            voters - 1,
            voters / 2 + 1
        );
    }
}

/// The node to add at `addr`: its id, and whether it is a member already.
fn joining(members: &Members, addr: &str) -> Result<(NodeId, bool), MembershipError> {
    if !plausible_addr(addr) {
        return Err(MembershipError::BadAddress(addr.to_string()));
    }
    match members.id_at(addr) {
        Some(id) if members.is_voter(id) => Err(MembershipError::AlreadyMember(addr.to_string())),
        Some(id) => Ok((id, true)),
        None => {
            let id = joined_id(addr);
            if let Some(other) = members.addr_of(id) {
                // Two addresses with one 62-bit id: never seen, refused.
                return Err(MembershipError::Failed(format!(
                    "{addr} would take the id of {other}"
                )));
            }
            Ok((id, false))
        }
    }
}

/// The change that adds the node at `addr` as a learner.
fn learner(id: NodeId, addr: &str) -> ChangeMembers<NodeId, BasicNode> {
    let node = BasicNode {
        addr: addr.to_string(),
    };
    ChangeMembers::AddNodes(BTreeMap::from([(id, node)]))
}

/// Node `id`'s replication, as this leader sees it.
fn progress_of(metrics: &Metrics, id: NodeId) -> Option<observe::PeerProgress> {
    observe::replication(metrics)
        .into_iter()
        .find(|p| p.node == id)
}

/// Whether node `id` is within [`CAUGHT_UP_LAG`] of this leader's log.
fn caught_up(metrics: &Metrics, id: NodeId) -> bool {
    progress_of(metrics, id).is_some_and(|p| p.matched.is_some() && p.lag <= CAUGHT_UP_LAG)
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

    #[test]
    fn a_node_joins_under_its_own_id_once() {
        let mut members = Members::seeded(&["a:1".into(), "b:2".into()]);
        assert_eq!(
            joining(&members, "a:1"),
            Err(MembershipError::AlreadyMember("a:1".into()))
        );
        assert_eq!(joining(&members, "c:3"), Ok((joined_id("c:3"), false)));
        members.nodes.insert(joined_id("c:3"), "c:3".into());
        assert_eq!(joining(&members, "c:3"), Ok((joined_id("c:3"), true)));
        assert!(matches!(
            joining(&members, "no port"),
            Err(MembershipError::BadAddress(_))
        ));
    }
}
