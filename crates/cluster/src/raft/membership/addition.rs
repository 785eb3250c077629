//! An addition, carried out by the leader: the learner is proposed, then
//! made a voter once it has caught up, or removed again at the addition's
//! deadline, on a task of its own. The requests that ask for it only wait
//! a while for its outcome; each may set the deadline anew (the caller's
//! wait in all, as `baton member add --timeout` sends it), and one that
//! says nothing leaves it at [`ADD_DEADLINE`] after the addition began.
//! So a raw `POST /v1/members` that is never asked again, a caller that
//! goes away, or a leader that loses the lead midway never leave a learner
//! for good: the next leader adopts a learner nobody is adding
//! ([`MembershipChanges::keep`]), with a fresh [`ADD_DEADLINE`].

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use openraft::async_runtime::WatchReceiver;
use openraft::{ChangeMembers, ServerState};
use tokio::sync::watch;
use tokio::time::Instant;

use super::{
    caught_up, joining, learner, progress_of, seconds, warn_if_even, MemberView, MembershipChanges,
    MembershipError,
};
use crate::raft::members::Members;
use crate::raft::types::NodeId;

/// How long an addition waits for its learner to catch up when its caller
/// does not say: `baton member add`'s default `--timeout`.
pub const ADD_DEADLINE: Duration = Duration::from_secs(60);
/// The longest deadline an ask sets: a longer wait counts as this (a
/// caller that waits longer asks again meanwhile, as the CLI does).
pub const MAX_ADD_WAIT: Duration = Duration::from_secs(24 * 3600);
/// An ask whose wait reaches the deadline, or ends while the learner's
/// promotion or removal is being committed, waits up to this much longer
/// for the commit: it answers with the outcome, and an ask just after it
/// does not find a voter where it left a learner.
pub const ROLLBACK_GRACE: Duration = Duration::from_secs(2);
/// How often a leader looks for a learner nobody is adding, and for a
/// joint consensus left half-made.
const KEEP_EVERY: Duration = Duration::from_secs(1);

/// How an addition ended (`Ok`: the node votes), once it has.
type Outcome = Option<Result<(), MembershipError>>;

/// One ask to add a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddAsk {
    /// This ask waits at most this long for the outcome (a little more if
    /// the deadline falls within it, see [`ROLLBACK_GRACE`]).
    pub wait: Duration,
    /// How long the caller still waits in all: the addition's deadline,
    /// from now. `None`: the deadline stands as it is.
    pub within: Option<Duration>,
}

/// The addition under way on this node, or the last one.
pub(super) struct Addition {
    addr: String,
    started: Instant,
    deadline: Arc<watch::Sender<Instant>>,
    /// Set once the promotion or the removal is proposed.
    settling: Arc<AtomicBool>,
    outcome: watch::Receiver<Outcome>,
}

/// What an ask follows of an addition.
struct Followed {
    outcome: watch::Receiver<Outcome>,
    settling: Arc<AtomicBool>,
    started: Instant,
    deadline: Instant,
}

impl Addition {
    fn running(&self) -> bool {
        self.outcome.borrow().is_none()
    }

    fn followed(&self) -> Followed {
        Followed {
            outcome: self.outcome.clone(),
            settling: self.settling.clone(),
            started: self.started,
            deadline: *self.deadline.borrow(),
        }
    }
}

/// What the task that carries out an addition is given.
struct Carried {
    addr: String,
    id: NodeId,
    /// A learner already (adopted, or asked again after a lost lead).
    member: bool,
    started: Instant,
    deadline: Arc<watch::Sender<Instant>>,
    settling: Arc<AtomicBool>,
}

/// The outcome, if it comes by `until`.
async fn outcome_by(
    outcome: &mut watch::Receiver<Outcome>,
    until: Instant,
) -> Option<Result<(), MembershipError>> {
    let ended = tokio::time::timeout_at(until, outcome.wait_for(Option::is_some)).await;
    match ended {
        Ok(Ok(ended)) => ended.clone(),
        _ => None,
    }
}

/// What a learner's wait came to.
enum Waited {
    CaughtUp,
    /// A voter already (another leader promoted it).
    Votes,
    /// No longer a member (removed meanwhile).
    Gone,
    LostLead(Option<String>),
    /// The deadline came; whether anything of the log is there.
    Deadline {
        answered: bool,
    },
}

impl MembershipChanges {
    /// Adds the node at `addr`: as a learner, then, once it has caught up
    /// (within [`super::CAUGHT_UP_LAG`] entries), as a voter. Waits at
    /// most as `ask` says: the members once it votes, or why not yet.
    pub async fn add(&self, addr: &str, ask: AddAsk) -> Result<Vec<MemberView>, MembershipError> {
        let (members, _) = self.leading()?;
        let mut followed = match joining(&members, addr) {
            Ok((id, member)) => self.join_addition(addr, id, member, ask.within)?,
            // Promoted by the addition still running here (its commit seen
            // before its outcome): that addition's answer.
            Err(MembershipError::AlreadyMember(voter)) => self
                .running_addition_of(addr)
                .ok_or(MembershipError::AlreadyMember(voter))?,
            Err(error) => return Err(error),
        };
        let now = Instant::now();
        let left = followed.deadline.saturating_duration_since(now);
        let first = now + ask.wait.min(left + ROLLBACK_GRACE);
        if let Some(result) = outcome_by(&mut followed.outcome, first).await {
            return result.map(|()| self.list());
        }
        if followed.settling.load(Ordering::Acquire) {
            let last = now + ask.wait + ROLLBACK_GRACE;
            if let Some(result) = outcome_by(&mut followed.outcome, last).await {
                return result.map(|()| self.list());
            }
        }
        Err(MembershipError::NotCaughtUp {
            addr: addr.to_string(),
            waited: followed.started.elapsed(),
            left: followed.deadline.saturating_duration_since(Instant::now()),
        })
    }

    /// The addition of `addr`, if it is still running.
    fn running_addition_of(&self, addr: &str) -> Option<Followed> {
        let slot = self.addition();
        let running = slot.as_ref().filter(|a| a.addr == addr && a.running())?;
        Some(running.followed())
    }

    /// The addition of `addr` under way, with its deadline set anew if
    /// `within` says so; or a new one.
    fn join_addition(
        &self,
        addr: &str,
        id: NodeId,
        member: bool,
        within: Option<Duration>,
    ) -> Result<Followed, MembershipError> {
        let now = Instant::now();
        let within = within.map(|w| w.min(MAX_ADD_WAIT));
        let mut slot = self.addition();
        if let Some(running) = slot.as_ref().filter(|a| a.running()) {
            if running.addr != addr {
                return Err(MembershipError::AddingAnother {
                    addr: running.addr.clone(),
                    left: running.deadline.borrow().saturating_duration_since(now),
                });
            }
            if let Some(within) = within {
                running.deadline.send_replace(now + within);
            }
            return Ok(running.followed());
        }
        let deadline = now + within.unwrap_or(ADD_DEADLINE);
        let addition = self.start(addr, id, member, now, deadline);
        let followed = addition.followed();
        *slot = Some(addition);
        Ok(followed)
    }

    /// Starts the task that carries out the addition of node `id` at
    /// `addr` (`member`: a learner already).
    fn start(
        &self,
        addr: &str,
        id: NodeId,
        member: bool,
        started: Instant,
        deadline: Instant,
    ) -> Addition {
        let deadline = Arc::new(watch::Sender::new(deadline));
        let settling = Arc::new(AtomicBool::new(false));
        let (done, outcome) = watch::channel(None);
        let changes = self.clone();
        let carried = Carried {
            addr: addr.to_string(),
            id,
            member,
            started,
            deadline: deadline.clone(),
            settling: settling.clone(),
        };
        self.shared.tasks.spawn(async move {
            let result = changes.carry_out(&carried).await;
            done.send_replace(Some(result));
        });
        Addition {
            addr: addr.to_string(),
            started,
            deadline,
            settling,
            outcome,
        }
    }

    async fn carry_out(&self, carried: &Carried) -> Result<(), MembershipError> {
        let (addr, id) = (carried.addr.as_str(), carried.id);
        if !carried.member {
            self.commit(learner(id, addr)).await?;
            tracing::info!(addr, "added a learner");
        }
        let waited = self
            .until_caught_up(id, &mut carried.deadline.subscribe())
            .await;
        if matches!(waited, Waited::CaughtUp | Waited::Deadline { .. }) {
            carried.settling.store(true, Ordering::Release);
        }
        match waited {
            Waited::CaughtUp => {
                let voters = BTreeSet::from([id]);
                self.commit(ChangeMembers::AddVoterIds(voters)).await?;
                tracing::info!(addr, "a learner became a voter");
                warn_if_even(&self.list());
                Ok(())
            }
            Waited::Votes => Ok(()),
            Waited::Gone => Err(MembershipError::RemovedMeanwhile(addr.to_string())),
            Waited::LostLead(leader) => Err(MembershipError::NotLeader { leader }),
            Waited::Deadline { answered } => {
                let removal = ChangeMembers::RemoveNodes(BTreeSet::from([id]));
                self.commit(removal).await?;
                let deadline = *carried.deadline.borrow();
                let waited = deadline.saturating_duration_since(carried.started);
                tracing::warn!(
                    addr,
                    answered,
                    "a node added as a learner did not catch up within {}; removed it again",
                    seconds(waited)
                );
                Err(MembershipError::RolledBack {
                    addr: addr.to_string(),
                    waited,
                    answered,
                })
            }
        }
    }

    /// Waits until node `id` has caught up, or the deadline comes, or the
    /// membership or the lead moves on.
    async fn until_caught_up(&self, id: NodeId, deadline: &mut watch::Receiver<Instant>) -> Waited {
        let mut watch = self.raft().metrics();
        loop {
            let metrics = watch.borrow_watched().clone();
            let members = Members::of(metrics.membership_config.membership());
            if metrics.state != ServerState::Leader || metrics.current_leader != Some(metrics.id) {
                let leader = metrics.current_leader.and_then(|l| members.addr_of(l));
                return Waited::LostLead(leader.map(str::to_string));
            }
            if !members.nodes.contains_key(&id) {
                return Waited::Gone;
            }
            if members.is_voter(id) {
                return Waited::Votes;
            }
            if caught_up(&metrics, id) {
                return Waited::CaughtUp;
            }
            let until = *deadline.borrow_and_update();
            if Instant::now() >= until {
                let answered = progress_of(&metrics, id).is_some_and(|p| p.matched.is_some());
                return Waited::Deadline { answered };
            }
            tokio::select! {
                changed = watch.changed() => if changed.is_err() {
                    return Waited::LostLead(None);
                },
                () = tokio::time::sleep_until(until) => {}
                _ = deadline.changed() => {}
            }
        }
    }

    /// Runs beside the node: while it leads, adopts a learner nobody is
    /// adding, and finishes a joint consensus that an earlier leader left
    /// half-made (the second step of a change is the proposer's to make).
    pub async fn keep(self) {
        loop {
            tokio::time::sleep(KEEP_EVERY).await;
            let Ok((members, metrics)) = self.leading() else {
                continue;
            };
            self.adopt_a_learner(&members);
            // Committed, else openraft refuses a change (one in progress).
            let committed = &metrics.committed_membership_config;
            let settled = metrics.membership_config.log_id() == committed.log_id();
            let joint = committed.membership().get_joint_config().len() > 1;
            if settled && joint && self.shared.change.try_lock().is_ok() {
                match self
                    .commit(ChangeMembers::AddVoterIds(BTreeSet::new()))
                    .await
                {
                    Ok(()) => tracing::info!(
                        "finished a membership change that an earlier leader left half-made"
                    ),
                    Err(error) => tracing::debug!(%error, "a joint consensus is still unfinished"),
                }
            }
        }
    }

    /// Adopts one learner that no addition is carrying.
    fn adopt_a_learner(&self, members: &Members) {
        let mut slot = self.addition();
        if slot.as_ref().is_some_and(Addition::running) {
            return;
        }
        let Some((&id, addr)) = members.nodes.iter().find(|(id, _)| !members.is_voter(**id)) else {
            return;
        };
        let now = Instant::now();
        tracing::info!(
            addr,
            "a learner nobody is adding (its adder lost the lead): it becomes a voter once it has caught up, or is removed within {}",
            seconds(ADD_DEADLINE)
        );
        *slot = Some(self.start(addr, id, true, now, now + ADD_DEADLINE));
    }
}
