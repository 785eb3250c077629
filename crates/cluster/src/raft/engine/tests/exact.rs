//! Exact-output tests of the Raft engine, in openraft's style: one input,
//! then the whole output asserted: the commands it proposes and the events
//! it tells, nothing more.

use baton_core::{Change, Command, Event, Key, Outcome, Token};

use super::{key, to, Pair};
use crate::raft::engine::{Committed, RaftRole};

/// An event in comparable form (handles are the clients' names).
#[derive(Debug, PartialEq, Eq)]
enum Told {
    Granted(&'static str, Key, Token),
    TimedOut(&'static str, Key),
    Moved(&'static str, Key, Option<usize>),
    Answered(&'static str, Key, Change, Result<Outcome, Option<usize>>),
}

fn told(event: Event<&'static str>) -> Told {
    match event {
        Event::Granted {
            handle, key, token, ..
        } => Told::Granted(handle, key, token),
        Event::TimedOut { handle, key, .. } => Told::TimedOut(handle, key),
        Event::Moved {
            handle, key, to, ..
        } => Told::Moved(handle, key, to.serving),
        Event::Answered {
            handle,
            key,
            change,
            answer,
        } => Told::Answered(handle, key, change, answer.map_err(|to| to.serving)),
    }
}

impl Pair {
    /// The events told since the last call, in order.
    fn told(&mut self) -> Vec<Told> {
        self.events.drain(..).map(told).collect()
    }

    /// The commands proposed since the last call, in one entry (taken, not committed).
    pub(super) fn proposed(&mut self) -> Vec<Command> {
        let mut commands = Vec::new();
        while let Some((proposal, _)) = self.leader.poll_proposal() {
            commands.extend(proposal.commands.into_iter().map(|t| t.command));
        }
        commands
    }
}

fn grant(k: &str, lease_ms: u64) -> Command {
    Command::Grant {
        key: key(k),
        lease_ms,
    }
}

pub(super) fn release(k: &str, token: Token) -> Command {
    Command::Release { key: key(k), token }
}

#[test]
fn an_acquire_proposes_its_grant_and_is_granted_when_it_applies() {
    let mut p = Pair::new();
    let _ = p.ask("a", 0, 500, 0, "c1");
    assert_eq!(p.told(), []);
    let (proposal, tags) = p.leader.poll_proposal().expect("a proposal");
    assert_eq!(tags.len(), 1);
    assert_eq!(
        proposal
            .commands
            .iter()
            .map(|t| &t.command)
            .collect::<Vec<_>>(),
        [&grant("a", 500)]
    );
    p.commit(Committed::Proposal(&proposal), 3);
    assert_eq!(p.told(), [Told::Granted("c1", key("a"), 1)]);
    assert_eq!(p.proposed(), []);
    assert_eq!(
        p.leader.table().holder(&key("a")).map(|h| h.expires_at),
        Some(503)
    );
}

#[test]
fn a_release_carries_the_next_waiters_grant_and_both_are_answered_at_its_apply() {
    let mut p = Pair::new();
    let _ = p.ask("a", 0, 500, 0, "c1");
    p.commit_proposals(0);
    let _ = p.ask("a", 10, 700, 0, "c2");
    let _ = p.ask("a", 0, 900, 0, "c3");
    p.told();
    assert_eq!(p.proposed(), []);
    // c2's wait ran out at 10: the hand-over passes it over, and says so.
    let release_at = p
        .leader
        .handle_release(&key("a"), 1, Some("c1"), 10, &mut p.events);
    assert_eq!(release_at, Ok(None));
    assert_eq!(p.told(), [Told::TimedOut("c2", key("a"))]);
    let (proposal, _) = p.leader.poll_proposal().expect("a proposal");
    let commands: Vec<_> = proposal
        .commands
        .iter()
        .map(|t| t.command.clone())
        .collect();
    assert_eq!(commands, [release("a", 1), grant("a", 900)]);
    p.commit(Committed::Proposal(&proposal), 11);
    assert_eq!(
        p.told(),
        [
            Told::Answered("c1", key("a"), Change::Release, Ok(Outcome::Released)),
            Told::Granted("c3", key("a"), 2),
        ]
    );
    assert_eq!(p.proposed(), []);
}

#[test]
fn a_due_lease_is_expired_after_the_waits_of_the_same_moment_run_out() {
    let mut p = Pair::new();
    let _ = p.ask("a", 0, 50, 0, "c1");
    p.commit_proposals(0);
    let _ = p.ask("a", 50, 70, 0, "c2");
    let _ = p.ask("a", 0, 80, 0, "c3");
    p.told();
    p.leader.handle_tick(50, &mut p.events);
    assert_eq!(p.told(), [Told::TimedOut("c2", key("a"))]);
    let expire = Command::Expire {
        key: key("a"),
        token: 1,
    };
    assert_eq!(p.proposed(), std::slice::from_ref(&expire));
    p.commit(Committed::Proposal(&proposal_of(vec![expire])), 50);
    // Another node's entry (the tags are not ours): nothing answered, but
    // the freed key goes to c3.
    assert_eq!(p.told(), []);
    assert_eq!(p.proposed(), [grant("a", 80)]);
}

/// Wraps commands as an entry proposed by another process.
pub(super) fn proposal_of(commands: Vec<Command>) -> crate::raft::types::Proposal {
    let commands = commands
        .into_iter()
        .enumerate()
        .map(|(tag, command)| crate::raft::types::Tagged {
            tag: tag as u64,
            command,
        })
        .collect();
    crate::raft::types::Proposal {
        origin: 999,
        commands,
    }
}

#[test]
fn a_grant_whose_client_was_answered_is_given_back_when_it_applies() {
    let mut p = Pair::new();
    let _ = p.ask("a", 0, 500, 0, "c1");
    let (in_the_log, tags) = p.leader.poll_proposal().expect("a proposal");
    p.leader
        .handle_proposal_failed(&tags, Some(2), 0, &mut p.events);
    assert_eq!(p.told(), [Told::Moved("c1", key("a"), Some(2))]);
    assert_eq!(p.proposed(), []);
    p.commit(Committed::Proposal(&in_the_log), 1);
    assert_eq!(p.told(), []);
    assert_eq!(p.proposed(), [release("a", 1)]);
}

/// A failed proposal of a hand-over frees the key for the next waiter
/// while this node serves, so that waiter is not left waiting for a key
/// nobody is being given (the rules' "a free key has no live waiters").
#[test]
fn a_failed_hand_over_passes_the_key_to_the_next_waiter() {
    let mut p = Pair::new();
    let _ = p.ask("a", 0, 500, 0, "c1");
    let _ = p.ask("a", 0, 600, 0, "c2");
    let (_, tags) = p.leader.poll_proposal().expect("a proposal");
    p.leader
        .handle_proposal_failed(&tags, None, 1, &mut p.events);
    assert_eq!(p.told(), [Told::Moved("c1", key("a"), None)]);
    assert_eq!(p.proposed(), [grant("a", 600)]);
    assert_eq!(p.leader.validate(), Ok(()));
}

#[test]
fn losing_the_lead_sends_waiters_and_unproposed_requests_away_and_keeps_the_log_s() {
    let mut p = Pair::new();
    let _ = p.ask("a", 0, 500, 0, "c1");
    p.commit_proposals(0);
    let _ = p
        .leader
        .handle_renew(&key("a"), 1, 500, "c1", 0, &mut p.events);
    let (_renewal_in_the_log, _) = p.leader.poll_proposal().expect("a proposal");
    let _ = p.ask("a", 0, 500, 1, "c2");
    let _ = p.ask("b", 0, 500, 1, "c3");
    p.told();
    p.leader
        .handle_role(RaftRole::Follower { leader: Some(1) }, 2, &mut p.events);
    // c3's grant was never proposed; c2 waited; the renewal is in the log.
    let mut told = p.told();
    told.sort_by_key(|o| format!("{o:?}"));
    assert_eq!(
        told,
        [
            Told::Moved("c2", key("a"), Some(1)),
            Told::Moved("c3", key("b"), Some(1)),
        ]
    );
    assert_eq!(p.proposed(), []);
    assert!(!p.leader.has_output());
    assert_eq!(
        p.leader
            .handle_renew(&key("a"), 1, 5, "c1", 2, &mut p.events),
        Err(to(Some(1)))
    );
}

/// A leader that steps down and regains the lead in the same term serves
/// at once, with its old grant still in the log: a new grant of the same
/// key is refused when it applies behind it, and its waiter waits its turn
/// again (the re-queue is a real path, not a "cannot happen").
#[test]
fn a_grant_refused_behind_an_old_grant_of_the_same_term_waits_again() {
    let mut p = Pair::new();
    let _ = p.ask("a", 0, 500, 0, "c1");
    let (old, _) = p.leader.poll_proposal().expect("a proposal");
    p.leader.handle_role(RaftRole::Candidate, 1, &mut p.events);
    p.leader
        .handle_role(RaftRole::Leader { term: 1 }, 2, &mut p.events);
    assert!(p.leader.serving());
    assert_eq!(p.told(), []);
    let _ = p.ask("a", 0, 600, 3, "c2");
    let (new, _) = p.leader.poll_proposal().expect("a proposal");
    p.commit(Committed::Proposal(&old), 4);
    assert_eq!(p.told(), [Told::Granted("c1", key("a"), 1)]);
    p.commit(Committed::Proposal(&new), 5);
    assert_eq!(p.told(), []);
    assert_eq!(p.leader.waiting_on(&key("a")), 1);
    assert_eq!(p.leader.validate(), Ok(()));
    let released = p
        .leader
        .handle_release(&key("a"), 1, Some("c1"), 6, &mut p.events);
    assert_eq!(released, Ok(None));
    assert_eq!(p.proposed(), [release("a", 1), grant("a", 600)]);
}

/// openraft refuses proposals at once while it hands the lead over, yet
/// reports itself leader: a refused expiry waits before it is proposed
/// again, and the timer is told when, so the node does not spin on it.
#[test]
fn a_refused_expiry_is_proposed_again_only_after_a_pause() {
    use crate::raft::engine::EXPIRY_RETRY_MS;
    let mut p = Pair::new();
    let _ = p.ask("a", 0, 50, 0, "c1");
    p.commit_proposals(0);
    p.told();
    let expire = Command::Expire {
        key: key("a"),
        token: 1,
    };
    p.leader.handle_tick(50, &mut p.events);
    let (_, tags) = p.leader.poll_proposal().expect("the expiry");
    p.leader
        .handle_proposal_failed(&tags, Some(2), 50, &mut p.events);
    assert_eq!(p.told(), []);
    assert_eq!(p.leader.poll_timeout(), Some(50 + EXPIRY_RETRY_MS));
    p.leader.handle_tick(50, &mut p.events);
    p.leader
        .handle_tick(50 + EXPIRY_RETRY_MS - 1, &mut p.events);
    assert_eq!(p.proposed(), []);
    p.leader.handle_tick(50 + EXPIRY_RETRY_MS, &mut p.events);
    assert_eq!(p.proposed(), [expire]);
    assert_eq!(p.told(), []);
}

/// The quota counts the grants on their way too: a second free key is
/// refused while the first grant waits for its commit, and nothing is
/// proposed for it.
#[test]
fn an_acquire_past_the_quota_is_refused_and_proposes_nothing() {
    use baton_core::{AcquireOutcome, Quota, Refusal};
    let mut p = Pair::new();
    p.leader.set_quota(Quota {
        max_locks: 1,
        max_waiters: 1,
        max_watches: Quota::DEFAULT_MAX_WATCHES,
    });
    let first = p.ask("a", 0, 500, 0, "c1");
    assert!(matches!(first, Ok(AcquireOutcome::Queued { .. })));
    let second = p.ask("b", 0, 500, 0, "c2");
    assert_eq!(second, Ok(AcquireOutcome::Refused(Refusal::TooManyLocks)));
    assert_eq!(p.proposed(), [grant("a", 500)]);
    let waiter = p.ask("a", 0, 500, 0, "c3");
    assert!(matches!(waiter, Ok(AcquireOutcome::Queued { .. })));
    let another = p.ask("a", 0, 500, 0, "c4");
    assert_eq!(
        another,
        Ok(AcquireOutcome::Refused(Refusal::TooManyWaiters))
    );
    assert_eq!(p.proposed(), []);
    assert_eq!(p.told(), []);
    assert_eq!(p.leader.validate(), Ok(()));
}
