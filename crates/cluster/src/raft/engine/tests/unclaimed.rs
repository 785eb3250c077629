//! Grants of a node's own requests that apply while it does not serve:
//! their clients are sent away (`M`), so nobody holds them, and the node
//! gives them back as soon as it serves again instead of leaving the key
//! taken until the lease runs out.

use baton_core::{Command, Event};

use super::exact::{proposal_of, release};
use super::{key, Pair};
use crate::raft::engine::{Committed, RaftRole, MAX_UNCLAIMED};

/// What each client was told, as `<client> <what>`, sorted.
fn answers(p: &mut Pair) -> Vec<String> {
    let mut told: Vec<String> = p
        .events
        .drain(..)
        .map(|e| match e {
            Event::Answered { handle, answer, .. } => format!("{handle} {answer:?}"),
            Event::Granted { handle, token, .. } => format!("{handle} granted {token}"),
            Event::Moved { handle, .. } => format!("{handle} moved"),
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    told.sort();
    told
}

/// A history the chaos test found: a leader paused
/// with a release and its hand-over to a waiter in the log steps down on
/// resume, the entry commits, the waiter is sent away; the leader then
/// regains the lead in the same term. Before, the key stayed taken by the
/// unclaimed grant for its whole lease, and the next acquire timed out.
#[test]
fn a_grant_applied_while_stepped_down_is_given_back_when_the_lead_returns() {
    let mut p = Pair::new();
    let _ = p.ask("a", 0, 60_000, 0, "c1");
    p.commit_proposals(0);
    let _ = p.ask("a", 5_000, 60_000, 0, "c2");
    p.events.clear();
    assert_eq!(
        p.leader
            .handle_release(&key("a"), 1, Some("c1"), 10, &mut p.events),
        Ok(None)
    );
    let (in_the_log, _) = p.leader.poll_proposal().expect("release and grant");
    p.leader
        .handle_role(RaftRole::Candidate, 300, &mut p.events);
    assert!(p.events.is_empty(), "{:?}", p.events);
    p.commit(Committed::Proposal(&in_the_log), 310);
    assert_eq!(answers(&mut p), ["c1 Ok(Released)", "c2 moved"]);
    let token = p.leader.table().holder(&key("a")).map(|h| h.token);
    assert_eq!(token, Some(2), "the grant is in the table, unclaimed");
    assert_eq!(p.proposed(), [], "nothing proposed while not serving");
    // The majority answers again in the same term: it serves at once and
    // gives the key back.
    p.leader
        .handle_role(RaftRole::Leader { term: 1 }, 320, &mut p.events);
    assert!(p.leader.serving());
    let (give_back, _) = p.leader.poll_proposal().expect("the give-back");
    let commands: Vec<_> = give_back
        .commands
        .iter()
        .map(|t| t.command.clone())
        .collect();
    assert_eq!(commands, [release("a", 2)]);
    p.commit(Committed::Proposal(&give_back), 321);
    assert!(p.events.is_empty(), "nobody to answer: {:?}", p.events);
    assert_eq!(p.leader.table().holder(&key("a")), None);
    assert_eq!(p.follower.table().holder(&key("a")), None);
    // The next acquire takes the key at once.
    let _ = p.ask("a", 0, 1_000, 330, "c3");
    p.commit_proposals(331);
    assert_eq!(answers(&mut p), ["c3 granted 3"]);
}

/// A node that serves again in a later term gives its grants back once its
/// own first entry applies (from then its table holds every committed
/// change); one that expired meanwhile, its key granted anew, is left
/// alone.
#[test]
fn unclaimed_grants_wait_for_the_new_terms_first_entry_and_spare_newer_grants() {
    let mut p = Pair::new();
    // `a`'s lease outlasts the test, so what gives it back is the
    // unclaimed grant's release, not its expiry.
    for (k, lease_ms, client) in [("a", 60_000, "c1"), ("b", 1_000, "c2")] {
        let _ = p.ask(k, 0, lease_ms, 0, client);
    }
    let (in_the_log, _) = p.leader.poll_proposal().expect("two grants");
    p.leader
        .handle_role(RaftRole::Follower { leader: Some(1) }, 10, &mut p.events);
    p.commit(Committed::Proposal(&in_the_log), 20);
    assert_eq!(answers(&mut p), ["c1 moved", "c2 moved"]);
    // Node 1 leads meanwhile: `b`'s lease ends and the key goes to c9.
    let expire_b = Command::Expire {
        key: key("b"),
        token: 2,
    };
    let grant_b = Command::Grant {
        key: key("b"),
        lease_ms: 1_000,
    };
    for command in [expire_b, grant_b] {
        p.commit(Committed::Proposal(&proposal_of(vec![command])), 1_100);
    }
    assert_eq!(p.leader.table().holder(&key("b")).map(|h| h.token), Some(3));
    // Node 0 leads term 2: nothing is given back before its first entry
    // and its token floor (its clock reads 1,200 ms since 1970) apply.
    p.leader
        .handle_role(RaftRole::Leader { term: 2 }, 1_200, &mut p.events);
    let (floor, _) = p.leader.poll_proposal().expect("the token floor");
    assert_eq!(
        floor.commands[0].command,
        Command::RaiseTokenFloor { floor: 1_200 << 20 }
    );
    assert_eq!(p.proposed(), []);
    p.commit(Committed::LeaderBlank { leader: 0, term: 2 }, 1_210);
    assert!(!p.leader.serving());
    assert_eq!(p.proposed(), []);
    p.commit(Committed::Proposal(&floor), 1_211);
    assert!(p.leader.serving());
    assert_eq!(p.proposed(), [release("a", 1)], "b's grant is c9's now");
}

/// The grants kept are bounded: past [`MAX_UNCLAIMED`] the oldest is
/// dropped (it lapses with its lease, as before), the newest are given back.
#[test]
fn the_unclaimed_grants_kept_are_bounded() {
    let mut p = Pair::new();
    let count = MAX_UNCLAIMED + 10;
    for i in 0..count {
        let _ = p.ask(&format!("k{i}"), 0, 60_000, 0, "c");
    }
    let mut in_the_log = Vec::new();
    while let Some((proposal, _)) = p.leader.poll_proposal() {
        in_the_log.push(proposal);
    }
    p.leader.handle_role(RaftRole::Candidate, 10, &mut p.events);
    for proposal in &in_the_log {
        p.commit(Committed::Proposal(proposal), 20);
    }
    p.events.clear();
    p.leader
        .handle_role(RaftRole::Leader { term: 1 }, 30, &mut p.events);
    let given_back = p.proposed();
    assert_eq!(given_back.len(), MAX_UNCLAIMED);
    assert_eq!(given_back.first(), Some(&release("k10", 11)));
    assert_eq!(
        given_back.last(),
        Some(&release(&format!("k{}", count - 1), count as u64))
    );
}
