//! A fault of the simulation: a follower's disk is lost and the node
//! replaced as docs/operations.md says: removed from the membership by the
//! leader, started again on an empty directory with `--join`, and added
//! again (a learner, then a voter) through the production membership code.
//!
//! The test loop moves the replacement along (`Wiped` once the host is
//! crashed and its directory emptied; the restart once it is removed); an
//! admin task on every host makes the membership changes whenever its node
//! serves. A change in flight on a host that crashes is asked again after
//! [`RETRY_MS`]: both changes are safe to repeat.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use baton_cluster::raft::membership::{AddAsk, MembershipChanges, MembershipError};

use super::node::{sim_ms, Locks};

/// A change still in flight after this long is asked again.
const RETRY_MS: u64 = 3_000;

/// Where the replacement of one node stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Phase {
    #[default]
    Idle,
    /// Node `n` is down with an empty disk: remove it.
    Remove(u64),
    /// Removal asked at this time.
    Removing(u64, u64),
    /// Removed: start it with `--join`.
    Removed(u64),
    /// Started with `--join`: add it.
    Add(u64),
    /// Addition asked at this time.
    Adding(u64, u64),
}

impl Phase {
    /// The node being replaced, if any.
    pub fn node(self) -> Option<u64> {
        match self {
            Phase::Idle => None,
            Phase::Remove(n)
            | Phase::Removing(n, _)
            | Phase::Removed(n)
            | Phase::Add(n)
            | Phase::Adding(n, _) => Some(n),
        }
    }
}

/// The replacement shared by the test loop and the hosts, and how many
/// have completed.
#[derive(Debug, Clone, Default)]
pub struct Replacements {
    phase: Arc<Mutex<Phase>>,
    completed: Arc<Mutex<u64>>,
    /// Hosts replaced at least once: they start with `--join`.
    joined: Arc<Mutex<Vec<u64>>>,
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Replacements {
    pub fn phase(&self) -> Phase {
        *locked(&self.phase)
    }

    pub fn set(&self, phase: Phase) {
        *locked(&self.phase) = phase;
    }

    pub fn completed(&self) -> u64 {
        *locked(&self.completed)
    }

    pub fn joins(&self, host: u64) -> bool {
        locked(&self.joined).contains(&host)
    }

    /// The test loop restarts node `n` with `--join`.
    pub fn restarted(&self, n: u64) {
        locked(&self.joined).push(n);
        self.set(Phase::Add(n));
    }

    /// Takes the next change to make, marking it in flight.
    fn take(&self) -> Option<(bool, u64)> {
        let mut phase = locked(&self.phase);
        let now = sim_ms();
        let (remove, n) = match *phase {
            Phase::Remove(n) => (true, n),
            Phase::Removing(n, at) if now >= at + RETRY_MS => (true, n),
            Phase::Add(n) => (false, n),
            Phase::Adding(n, at) if now >= at + RETRY_MS => (false, n),
            _ => return None,
        };
        *phase = if remove {
            Phase::Removing(n, now)
        } else {
            Phase::Adding(n, now)
        };
        Some((remove, n))
    }

    /// The change to node `n` ended with `done`; else it is asked again.
    fn finished(&self, remove: bool, n: u64, done: bool) {
        let mut phase = locked(&self.phase);
        let ours = matches!((*phase, remove), (Phase::Removing(m, _), true) | (Phase::Adding(m, _), false) if m == n);
        if !ours {
            return;
        }
        *phase = match (remove, done) {
            (true, true) => Phase::Removed(n),
            (true, false) => Phase::Remove(n),
            (false, true) => {
                *locked(&self.completed) += 1;
                Phase::Idle
            }
            (false, false) => Phase::Add(n),
        };
    }
}

/// On one host: makes the pending membership change whenever this node
/// serves, until the host crashes.
pub async fn admin(
    replacements: Replacements,
    changes: MembershipChanges,
    locks: Locks,
    peers: Vec<String>,
) {
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        if !locks.inspect(|n| n.engine().serving()) {
            continue;
        }
        let Some((remove, n)) = replacements.take() else {
            continue;
        };
        let addr = &peers[n as usize];
        let done = if remove {
            match changes.remove(addr).await {
                Ok(_) | Err(MembershipError::NotMember(_)) => true,
                Err(_) => false,
            }
        } else {
            let ask = AddAsk {
                wait: Duration::from_secs(2),
                within: None,
            };
            match changes.add(addr, ask).await {
                Ok(_) | Err(MembershipError::AlreadyMember(_)) => true,
                Err(_) => false,
            }
        };
        replacements.finished(remove, n, done);
    }
}
