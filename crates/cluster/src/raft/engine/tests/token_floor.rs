//! A leader's tokens start above its wall clock: the floor travels in the
//! log, first among the leader's proposals, and every node (a follower, a
//! node replaying the log, one installing a snapshot) lifts its tokens to
//! it at apply.

use baton_core::{AcquireOutcome, Command, Event, Token};

use super::{key, Pair, PEERS};
use crate::raft::engine::{Committed, RaftEngine, RaftRole};
use crate::raft::types::Proposal;

/// The leader's wall clock when its `now` read 0: 2027-01-15.
const WALL_MS: u64 = 1_800_000_000_000;

fn engine(me: u64, origin: u64, wall_ms: u64) -> RaftEngine<&'static str> {
    let peers = PEERS.iter().map(|s| s.to_string()).collect();
    let mut engine = RaftEngine::new(me, peers, origin);
    engine.set_wall_at_zero(wall_ms);
    engine
}

/// Node 0 (its clock at [`WALL_MS`]) and node 1.
fn pair(follower_wall_ms: u64) -> Pair {
    Pair {
        leader: engine(0, 11, WALL_MS),
        follower: engine(1, 22, follower_wall_ms),
        events: Vec::new(),
    }
}

/// Node 0 led term 1 from `now` 5, its token floor the only proposal.
fn leading_at_wall(follower_wall_ms: u64) -> (Pair, Proposal) {
    let mut p = pair(follower_wall_ms);
    p.leader
        .handle_role(RaftRole::Leader { term: 1 }, 5, &mut p.events);
    p.follower
        .handle_role(RaftRole::Follower { leader: Some(0) }, 5, &mut p.events);
    let (floor, _) = p.leader.poll_proposal().expect("the token floor");
    assert_eq!(commands(&floor), [floor_of(WALL_MS + 5)]);
    assert_eq!(p.leader.poll_proposal(), None, "nothing else");
    (p, floor)
}

fn floor_of(wall_ms: u64) -> Command {
    Command::RaiseTokenFloor {
        floor: wall_ms << 20,
    }
}

fn commands(proposal: &Proposal) -> Vec<Command> {
    proposal
        .commands
        .iter()
        .map(|t| t.command.clone())
        .collect()
}

/// Acquires `k` on the leader and commits the grant; the token.
fn grant(p: &mut Pair, k: &str, now: u64) -> Token {
    let acquired = p.ask(k, 0, 1_000, now, "c");
    assert!(matches!(acquired, Ok(AcquireOutcome::Queued { .. })));
    let (proposal, _) = p.leader.poll_proposal().expect("the grant");
    p.commit(Committed::Proposal(&proposal), now);
    let granted = p.events.drain(..).find_map(|e| match e {
        Event::Granted { token, .. } => Some(token),
        _ => None,
    });
    granted.expect("granted")
}

#[test]
fn the_leaders_first_proposal_carries_its_floor_and_apply_lifts_every_nodes_tokens() {
    // The follower's clock is a day behind: the floor is the leader's, in
    // the log, not each node's.
    let (mut p, floor) = leading_at_wall(WALL_MS - 86_400_000);
    p.commit(Committed::LeaderBlank { leader: 0, term: 1 }, 6);
    assert!(!p.leader.serving(), "serves before its floor applies");
    let refused = p.ask("a", 0, 1_000, 6, "c");
    assert!(refused.is_err());
    p.commit(Committed::Proposal(&floor), 7);
    assert!(p.leader.serving());
    let expected = ((WALL_MS + 5) << 20) + 1;
    assert_eq!(grant(&mut p, "a", 8), expected);
    assert_eq!(grant(&mut p, "b", 9), expected + 1);
    assert_eq!(p.follower.table(), p.leader.table());
    assert_eq!(p.follower.table().last_token(), expected + 1);
}

#[test]
fn a_leader_whose_clock_is_behind_still_grants_above_every_earlier_token() {
    let (mut p, floor) = leading_at_wall(WALL_MS);
    p.commit(Committed::LeaderBlank { leader: 0, term: 1 }, 6);
    p.commit(Committed::Proposal(&floor), 7);
    let first = grant(&mut p, "a", 8);
    // Node 1 leads term 2, its clock an hour behind: its floor is below
    // the table's, so it proposes none and serves once its blank applies.
    std::mem::swap(&mut p.leader, &mut p.follower);
    p.leader.set_wall_at_zero(WALL_MS - 3_600_000);
    p.leader
        .handle_role(RaftRole::Leader { term: 2 }, 10, &mut p.events);
    p.follower
        .handle_role(RaftRole::Follower { leader: Some(1) }, 10, &mut p.events);
    assert_eq!(p.leader.poll_proposal(), None);
    p.commit(Committed::LeaderBlank { leader: 1, term: 2 }, 11);
    assert!(p.leader.serving());
    assert_eq!(grant(&mut p, "b", 12), first + 1);
    // The first leader, back in term 3 a millisecond later by its clock,
    // starts at its new floor.
    std::mem::swap(&mut p.leader, &mut p.follower);
    p.leader
        .handle_role(RaftRole::Leader { term: 3 }, 13, &mut p.events);
    let (floor, _) = p.leader.poll_proposal().expect("the token floor");
    assert_eq!(commands(&floor), [floor_of(WALL_MS + 13)]);
    p.commit(Committed::LeaderBlank { leader: 0, term: 3 }, 14);
    p.commit(Committed::Proposal(&floor), 14);
    assert_eq!(grant(&mut p, "c", 15), ((WALL_MS + 13) << 20) + 1);
}

#[test]
fn a_node_replaying_the_log_or_installing_a_snapshot_computes_the_same_tokens() {
    let (mut p, floor) = leading_at_wall(WALL_MS);
    let blank = Committed::LeaderBlank { leader: 0, term: 1 };
    p.commit(blank, 6);
    p.commit(Committed::Proposal(&floor), 7);
    let acquired = p.ask("a", 0, 1_000, 8, "c");
    assert!(acquired.is_ok());
    let (grant_a, _) = p.leader.poll_proposal().expect("the grant");
    p.commit(Committed::Proposal(&grant_a), 8);
    // A restart: a new run of node 1, its clock elsewhere, replays the log.
    let mut replayed = engine(1, 33, 0);
    for entry in [
        blank,
        Committed::Proposal(&floor),
        Committed::Proposal(&grant_a),
    ] {
        replayed.handle_committed(entry, 50, &mut Vec::new());
    }
    // A node that installs a snapshot taken after the floor keeps it.
    let mut installed = engine(2, 44, 0);
    installed.handle_snapshot(&p.leader.snapshot(9), 60, &mut Vec::new());
    let token = ((WALL_MS + 5) << 20) + 1;
    for node in [&p.follower, &replayed, &installed] {
        let held = node.table().holder(&key("a")).map(|h| h.token);
        assert_eq!((held, node.table().last_token()), (Some(token), token));
    }
}

#[test]
fn a_floor_that_missed_the_log_is_proposed_again_and_a_regained_lead_keeps_it() {
    let mut p = pair(WALL_MS);
    let leader = RaftRole::Leader { term: 1 };
    p.leader.handle_role(leader, 5, &mut p.events);
    let (_, tags) = p.leader.poll_proposal().expect("the token floor");
    // While it is on its way, a role check proposes nothing.
    p.leader.handle_role(leader, 20, &mut p.events);
    assert_eq!(p.leader.poll_proposal(), None);
    p.leader
        .handle_proposal_failed(&tags, None, 30, &mut p.events);
    assert_eq!(p.leader.poll_proposal(), None, "not before the next check");
    p.leader.handle_role(leader, 40, &mut p.events);
    let (floor, _) = p.leader.poll_proposal().expect("the floor again");
    assert_eq!(
        commands(&floor),
        [floor_of(WALL_MS + 5)],
        "the term's floor"
    );
    p.commit(Committed::LeaderBlank { leader: 0, term: 1 }, 41);
    p.commit(Committed::Proposal(&floor), 42);
    assert!(p.leader.serving());
    // Stepped down and back in the same term: the floor is reached.
    p.leader.handle_role(RaftRole::Candidate, 50, &mut p.events);
    p.leader.handle_role(leader, 60, &mut p.events);
    assert!(p.leader.serving());
    assert_eq!(p.leader.poll_proposal(), None);
    assert!(p.events.is_empty(), "{:?}", p.events);
}

/// A log written before leaders proposed floors (tokens from 1, no
/// floor): it replays as it is, and the next leader lifts its tokens.
#[test]
fn an_old_logs_tokens_rise_to_the_next_leaders_floor() {
    let old_grants = super::exact::proposal_of(vec![
        Command::Grant {
            key: key("a"),
            lease_ms: 60_000,
        },
        Command::Grant {
            key: key("b"),
            lease_ms: 60_000,
        },
    ]);
    let mut p = pair(WALL_MS);
    p.commit(Committed::Proposal(&old_grants), 0);
    assert_eq!(p.leader.table().holder(&key("b")).map(|h| h.token), Some(2));
    p.leader
        .handle_role(RaftRole::Leader { term: 1 }, 5, &mut p.events);
    let (floor, _) = p.leader.poll_proposal().expect("the token floor");
    assert_eq!(commands(&floor), [floor_of(WALL_MS + 5)]);
    p.commit(Committed::LeaderBlank { leader: 0, term: 1 }, 6);
    p.commit(Committed::Proposal(&floor), 7);
    assert_eq!(grant(&mut p, "c", 8), ((WALL_MS + 5) << 20) + 1);
    assert_eq!(
        p.follower.table().holder(&key("a")).map(|h| h.token),
        Some(1)
    );
}
