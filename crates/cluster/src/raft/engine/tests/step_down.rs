//! A leader that steps down, once or many times, or keeps its lead and
//! commits nothing: every request is answered within the answer budget.

use baton_core::Event;

use super::{key, to, Committed, Pair, RaftRole};
use crate::raft::engine::{ANSWER_BUDGET_MS, ORPHAN_WAIT_MS};

#[test]
fn a_leader_without_a_majority_answers_everything_then_serves_again_when_it_returns() {
    let mut p = Pair::new();
    let _ = p.ask("a", 0, 60_000, 0, "c1");
    p.commit_proposals(0);
    p.events.clear();
    // A waiter queued behind `a`, and a release with its hand-over in the
    // log when the majority goes silent.
    let _ = p.ask("a", 5_000, 60_000, 0, "c2");
    let _ = p.ask("b", 0, 60_000, 0, "c3");
    let _in_the_log = p.leader.poll_proposal();
    assert_eq!(
        p.leader
            .handle_release(&key("a"), 1, Some("c1"), 0, &mut p.events),
        Ok(None)
    );
    let _also_in_the_log = p.leader.poll_proposal();
    assert!(p.events.is_empty());
    // Stepped down (the shell saw no majority for an election timeout).
    p.leader
        .handle_role(RaftRole::Candidate, 300, &mut p.events);
    assert_eq!(p.leader.not_serving(), to(None));
    assert!(
        p.events.is_empty(),
        "the log may still commit these: {:?}",
        p.events
    );
    assert_eq!(
        p.ask("c", 0, 1_000, 301, "c4"),
        Err(to(None)),
        "a new request is sent away at once"
    );
    let deadline = p
        .leader
        .poll_timeout()
        .unwrap_or_else(|| panic!("a deadline for the requests in the log"));
    assert!(deadline <= 300 + ORPHAN_WAIT_MS);
    p.leader.handle_tick(deadline, &mut p.events);
    let mut answered: Vec<String> = p
        .events
        .drain(..)
        .map(|e| match e {
            Event::Moved { handle, to, .. } => format!("{handle} M {:?}", to.serving),
            Event::Answered {
                handle,
                answer: Err(to),
                ..
            } => format!("{handle} M {:?}", to.serving),
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    answered.sort();
    assert_eq!(answered, ["c1 M None", "c2 M None", "c3 M None"]);
    // The majority answers again in the same term: it serves at once, its
    // table unchanged.
    p.leader
        .handle_role(RaftRole::Leader { term: 1 }, 400, &mut p.events);
    assert!(p.leader.serving());
    assert_eq!(p.leader.table().holder(&key("a")).map(|h| h.token), Some(1));
}

/// A leader that steps down, regains the lead in the same term and steps
/// down again must not push back the wait of the requests of its first
/// leadership: they are answered within their own wait, or the
/// answer-time rule breaks (the simulation once left a release
/// unanswered for 3 s across two step-downs).
#[test]
fn a_second_step_down_keeps_the_first_ones_wait() {
    let mut p = Pair::new();
    let _ = p.ask("a", 0, 60_000, 0, "c1");
    let _in_the_log = p.leader.poll_proposal();
    p.leader
        .handle_role(RaftRole::Candidate, 100, &mut p.events);
    let first = p
        .leader
        .poll_timeout()
        .unwrap_or_else(|| panic!("a deadline for the request in the log"));
    assert_eq!(first, 100 + ORPHAN_WAIT_MS);
    // Back in the lead, a request of the new leadership, and down again.
    p.leader
        .handle_role(RaftRole::Leader { term: 1 }, 600, &mut p.events);
    let _ = p.ask("b", 0, 60_000, 600, "c2");
    let _also_in_the_log = p.leader.poll_proposal();
    p.leader
        .handle_role(RaftRole::Candidate, 1_000, &mut p.events);
    assert!(p.events.is_empty(), "{:?}", p.events);
    assert_eq!(p.leader.poll_timeout(), Some(first));
    p.leader.handle_tick(first, &mut p.events);
    let moved: Vec<&str> = p
        .events
        .drain(..)
        .map(|e| match e {
            Event::Moved { handle, .. } => handle,
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(moved, ["c1"], "the first leadership's request, on time");
    // The second leadership's request keeps a wait of its own.
    let second = 1_000 + ORPHAN_WAIT_MS;
    assert_eq!(p.leader.poll_timeout(), Some(second));
    p.leader.handle_tick(second, &mut p.events);
    assert!(
        matches!(p.events.as_slice(), [Event::Moved { handle: "c2", .. }]),
        "{:?}",
        p.events
    );
}

/// Step-downs in a row: the groups of waiting requests stay bounded, and
/// every request is answered within one wait of its own leadership's end.
#[test]
fn many_step_downs_keep_few_groups_and_answer_every_request_in_time() {
    let mut p = Pair::new();
    let clients = ["c0", "c1", "c2", "c3", "c4", "c5", "c6", "c7", "c8", "c9"];
    for (i, client) in clients.iter().enumerate() {
        let now = 10 * i as u64;
        p.leader
            .handle_role(RaftRole::Leader { term: 1 }, now, &mut p.events);
        let name = format!("k{i}");
        let _ = p.ask(&name, 0, 60_000, now, client);
        let _in_the_log = p.leader.poll_proposal();
        p.leader
            .handle_role(RaftRole::Candidate, now + 5, &mut p.events);
    }
    assert!(p.events.is_empty(), "{:?}", p.events);
    let last_end = 10 * 9 + 5;
    p.leader
        .handle_tick(last_end + ORPHAN_WAIT_MS, &mut p.events);
    assert_eq!(p.events.len(), clients.len(), "{:?}", p.events);
    assert_eq!(p.leader.poll_timeout(), None);
}

/// A leader that keeps its lead but commits nothing still answers within
/// the budget: `M` to nobody; if the entry commits afterwards, nobody is
/// answered twice and the grant is given back (found by the simulation).
#[test]
fn a_request_whose_entry_does_not_apply_is_answered_within_the_budget() {
    let mut p = Pair::new();
    let _ = p.ask("a", 0, 60_000, 1_000, "c1");
    let (grant, _) = p
        .leader
        .poll_proposal()
        .unwrap_or_else(|| panic!("no grant"));
    let by = 1_000 + ANSWER_BUDGET_MS;
    assert_eq!(p.leader.poll_timeout(), Some(by));
    p.leader.handle_tick(by - 1, &mut p.events);
    assert!(p.events.is_empty(), "{:?}", p.events);
    p.leader.handle_tick(by, &mut p.events);
    match p.events.as_slice() {
        [Event::Moved {
            handle: "c1", to, ..
        }] => assert_eq!(*to, self::to(None)),
        other => panic!("expected c1 sent away, got {other:?}"),
    }
    p.events.clear();
    assert!(p.leader.serving(), "the leader still serves");
    // The entry commits late: nobody hears of it, and the key comes back.
    p.commit(Committed::Proposal(&grant), by + 10);
    assert!(p.granted().is_empty(), "{:?}", p.events);
    assert_eq!(p.commit_proposals(by + 10), 1, "the grant is given back");
    assert!(p.follower.table().is_empty());
    assert_eq!(p.leader.poll_timeout(), None);
}
