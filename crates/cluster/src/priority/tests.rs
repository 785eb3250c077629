//! Unit tests of the priority engine: two or three engines driven by hand on
//! one clock (the driver the simulation uses too), each one's output handed
//! straight to the addressed peer.
//!
//! The tests name their scenario after the rule in the engine's module
//! comment that they exercise.

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test

use baton_core::{Acquire, AcquireOutcome, Event, Key, Millis, NotServing, Outcome, Token};

use super::engine::{HandoffCounts, NodeRole, PriorityNode, TOKEN_MARGIN};
use super::messages::{
    Heartbeat, NodeIndex, PeerRole, PriorityMessage, TablePart, MAX_MESSAGE_BYTES,
};

mod cluster;
mod exact;
mod handoffs;
mod limits;
mod liveness;
mod pauses;
mod pieces;
mod refused;
mod watch;

use cluster::{config, drain, elected, engine, key, Cluster, HEARTBEAT, TIMEOUT};

#[test]
fn fresh_cluster_waits_the_quiet_period_then_node_0_serves() {
    let mut c = Cluster::new(3);
    c.run(TIMEOUT - 1);
    assert!(c.actives().is_empty(), "promoted before the quiet period");
    for i in 0..3 {
        assert_eq!(c.node(i).redirect_target(), None);
    }
    c.run(2 * HEARTBEAT + 2);
    assert_eq!(c.actives(), vec![0]);
    let term = c.node(0).term();
    assert!(term >= TOKEN_MARGIN, "term {term} is not a token floor");
    for i in 1..3 {
        assert_eq!(c.node(i).role(), NodeRole::Standby);
        assert_eq!(c.node(i).following(), Some(0));
        assert_eq!(c.node(i).redirect_target(), Some(0));
        // The term arrives only with the active's snapshot.
        assert_eq!(c.node(i).term(), term, "node {i} has no snapshot");
        assert_eq!(c.node(i).table().last_token(), term);
    }
}

#[test]
fn a_standby_answers_not_serving_with_the_active() {
    let mut c = elected(3);
    let now = c.now;
    let refused = c
        .node_mut(1)
        .handle_acquire(Acquire::plain(key("a"), 0, 100), now, 9);
    assert_eq!(refused, Err(NotServing::redirect(Some(0))));
    let refused = c.node_mut(2).handle_release(&key("a"), 5, now);
    assert_eq!(refused, Err(NotServing::redirect(Some(0))));
    let refused = c.node_mut(2).handle_renew(&key("a"), 5, 100, now);
    assert_eq!(refused, Err(NotServing::redirect(Some(0))));
    assert!(drain(c.node_mut(1)).is_empty());
    assert!(drain(c.node_mut(2)).is_empty());
}

#[test]
fn grants_releases_and_renewals_reach_the_standbys() {
    let mut c = elected(3);
    let a = c.grant(0, "a", 1_000);
    let b = c.grant(0, "b", 1_000);
    assert!(b > a);
    for i in 1..3 {
        assert_eq!(c.holder(i, "a"), Some(a));
        assert_eq!(c.holder(i, "b"), Some(b));
        assert_eq!(c.node(i).table().last_token(), b);
    }
    let now = c.now;
    let released = c.node_mut(0).handle_release(&key("a"), a, now);
    assert_eq!(released, Ok(Outcome::Released));
    c.run(300);
    let now = c.now;
    let renewed = c.node_mut(0).handle_renew(&key("b"), b, 1_000, now);
    assert_eq!(renewed, Ok(Outcome::Renewed));
    c.deliver();
    for i in 1..3 {
        assert_eq!(c.holder(i, "a"), None, "node {i} missed the release");
        // Without the renewal the lease would end at 1_070 or so.
        let ends = c.node(i).table().holder(&key("b")).unwrap().expires_at;
        assert_eq!(ends, c.now + 1_000, "node {i} missed the renewal");
    }
}

/// The dead active's successor `next` promotes after the failure timeout,
/// not before.
fn assert_replaced_after_a_failure_timeout(c: &mut Cluster, next: NodeIndex) {
    c.run(TIMEOUT);
    assert!(
        c.actives().is_empty(),
        "promoted before the failure timeout"
    );
    c.run(2);
    assert_eq!(c.actives(), vec![next]);
}

#[test]
fn a_silent_active_is_replaced_by_the_next_in_priority_above_its_tokens() {
    let mut c = elected(3);
    let a = c.grant(0, "a", 200);
    let granted_at = c.now;
    c.crash(0);
    assert_replaced_after_a_failure_timeout(&mut c, 1);
    assert_eq!(c.node(2).following(), Some(1));
    // Node 1 keeps the lease it replicated and grants above it by the margin.
    assert_eq!(c.holder(1, "a"), Some(a));
    let b = c.grant(1, "b", 1_000);
    assert!(b > a + TOKEN_MARGIN, "{b} is not above {a} + margin");
    c.run(1);
    assert_eq!(c.holder(2, "b"), Some(b));
    // ...and expires it on its own clock, when the lease runs out.
    c.run(granted_at + 199 - c.now);
    assert_eq!(c.holder(1, "a"), Some(a));
    c.run(2);
    assert_eq!(c.holder(1, "a"), None);
    assert_eq!(c.holder(2, "a"), None, "the expiry was not replicated");
    let again = c.grant(1, "a", 100);
    assert!(again > b);
}

#[test]
fn the_promoting_node_is_the_one_with_the_newest_term() {
    // Node 1 heard node 0 but never got its state, node 2 did: when node 0
    // dies node 2 has the newer state and promotes, not node 1.
    let mut c = Cluster::new(3);
    c.starved.push(1);
    c.run(TIMEOUT + 2 * HEARTBEAT);
    assert_eq!(c.actives(), vec![0]);
    let a = c.grant(0, "a", 10_000);
    assert_eq!(c.node(1).term(), 0);
    c.starved.clear();
    c.crash(0);
    let mut first = None;
    for _ in 0..TIMEOUT + 2 * HEARTBEAT {
        c.step();
        first = first.or(c.actives().first().copied());
    }
    assert_eq!(first, Some(2), "the node without the state promoted");
    // Node 1 then syncs from node 2 and, having the higher priority, takes
    // the role back by handoff with the lock.
    c.run(TIMEOUT + 4 * HEARTBEAT);
    assert_eq!(c.actives(), vec![1]);
    assert_eq!(c.holder(1, "a"), Some(a));
    assert_eq!(c.node(2).following(), Some(1));
}

#[test]
fn a_paused_active_steps_down_before_granting() {
    let mut c = elected(3);
    let a = c.grant(0, "a", 10_000);
    // A waiter on node 0 when it stops.
    assert!(matches!(
        c.acquire(0, "a", 1_000, 77),
        AcquireOutcome::Queued { .. }
    ));
    c.frozen[0] = true;
    c.run(TIMEOUT + 2 * HEARTBEAT);
    assert_eq!(c.actives(), vec![0, 1], "node 0 is frozen, still active");
    let b = c.grant(1, "b", 10_000);
    c.frozen[0] = false;
    // The first thing node 0 does after the pause is a client's acquire.
    let now = c.now;
    let answer = c
        .node_mut(0)
        .handle_acquire(Acquire::plain(key("c"), 0, 1_000), now, 5);
    assert_eq!(
        answer,
        Err(NotServing::redirect(None)),
        "a paused active served"
    );
    assert_eq!(c.node(0).role(), NodeRole::Standby);
    let events = drain(c.node_mut(0));
    assert!(
        matches!(&events[..], [Event::Moved { handle: 77, .. }]),
        "the waiter was not moved: {events:?}"
    );
    assert_eq!(c.holder(0, "c"), None);
    // It then follows node 1, syncs, and takes over with every lock.
    c.run(TIMEOUT + 4 * HEARTBEAT);
    assert_eq!(c.actives(), vec![0]);
    assert_eq!(c.holder(0, "a"), Some(a));
    assert_eq!(c.holder(0, "b"), Some(b));
    assert!(c.grant(0, "c", 100) > b);
}

#[test]
fn a_paused_active_steps_down_at_its_first_tick() {
    let mut c = elected(2);
    c.frozen[0] = true;
    c.run(TIMEOUT + 2 * HEARTBEAT);
    c.frozen[0] = false;
    let now = c.now;
    c.node_mut(0).handle_tick(now);
    assert_eq!(c.node(0).role(), NodeRole::Standby);
    // A short stall (under the timeout) is not a pause.
    c.run(TIMEOUT + 4 * HEARTBEAT);
    assert_eq!(c.actives(), vec![0]);
    c.frozen[0] = true;
    c.run(TIMEOUT / 2);
    c.frozen[0] = false;
    let now = c.now;
    let answer = c
        .node_mut(0)
        .handle_acquire(Acquire::plain(key("a"), 0, 100), now, 1);
    assert!(answer.is_ok(), "stepped down after a short stall");
}

#[test]
fn of_two_actives_the_lower_priority_steps_down_and_the_winner_merges_its_grants() {
    let mut c = elected(3);
    let a = c.grant(0, "a", 10_000);
    c.isolate(0);
    c.run(TIMEOUT + 2 * HEARTBEAT);
    assert_eq!(c.actives(), vec![0, 1]);
    let b = c.grant(1, "b", 10_000);
    // Node 1 grants many more than node 0 during the split.
    let mut last_1 = b;
    for i in 0..5 {
        last_1 = c.grant(1, &format!("k{i}"), 10_000);
    }
    // A waiter on the loser.
    assert!(matches!(
        c.acquire(1, "b", 1_000, 42),
        AcquireOutcome::Queued { .. }
    ));
    let x = c.grant(0, "x", 10_000);
    assert!(x < b, "node 1 promoted above node 0's tokens");
    c.cut.clear();
    c.run(HEARTBEAT + 1);
    assert_eq!(c.actives(), vec![0]);
    assert_eq!(c.node(1).following(), Some(0));
    assert_eq!(c.moved(1), vec![(42, Some(0))]);
    c.run(3 * HEARTBEAT);
    // The winner took the loser's grants of the split on keys it did not
    // hold, and every node holds the merged table.
    for i in 0..3 {
        assert_eq!(c.locks(i), c.locks(0), "node {i} did not adopt node 0's");
        assert_eq!(c.holder(i, "b"), Some(b));
        assert_eq!(c.holder(i, "k4"), Some(last_1));
        assert_eq!(c.holder(i, "a"), Some(a));
        assert_eq!(c.holder(i, "x"), Some(x));
    }
    let next = c.grant(0, "y", 100);
    assert!(next > last_1, "{next} is not above the loser's {last_1}");
    assert!(next > last_1 + TOKEN_MARGIN - 10);
}

#[test]
fn a_handoff_moves_every_lock_and_the_waiters_to_the_successor() {
    let mut c = elected(3);
    let a = c.grant(0, "a", 10_000);
    let b = c.grant(0, "b", 10_000);
    assert!(matches!(
        c.acquire(0, "a", 1_000, 7),
        AcquireOutcome::Queued { .. }
    ));
    let before = c.locks(0);
    let now = c.now;
    assert!(c.node_mut(0).handle_begin_handoff(now));
    let events = drain(c.node_mut(0));
    assert!(
        matches!(
            &events[..],
            [Event::Moved {
                handle: 7,
                to: NotServing { serving: Some(1) },
                ..
            }]
        ),
        "waiter not moved to the successor: {events:?}"
    );
    assert_eq!(c.node(0).role(), NodeRole::HandingOff { to: 1 });
    // Until the successor takes over, nobody serves: `-`, not a redirect
    // the successor (still following node 0) would send back.
    assert_eq!(c.node(0).redirect_target(), None);
    let answer = c
        .node_mut(0)
        .handle_acquire(Acquire::plain(key("z"), 0, 100), now, 8);
    assert_eq!(
        answer,
        Err(NotServing::redirect(None)),
        "a node handing off served"
    );
    c.deliver();
    assert_eq!(c.node(0).redirect_target(), Some(1));
    assert_eq!(c.actives(), vec![1]);
    assert_eq!(c.locks(1), before);
    assert_eq!(c.node(0).role(), NodeRole::Standby);
    assert_eq!(c.node(0).following(), Some(1));
    assert_eq!(c.node(0).handed_off_to(), Some(1));
    // Counted for /metrics: one given by 0, one taken by 1.
    assert_eq!(c.node(0).handoffs(), HandoffCounts { given: 1, taken: 0 });
    assert_eq!(c.node(1).handoffs(), HandoffCounts { given: 0, taken: 1 });
    assert_eq!(c.node(2).handoffs(), HandoffCounts::default());
    let next = c.grant(1, "c", 100);
    assert!(next > b && next > a);
    // The old active is gone now, as in a graceful stop: nothing is lost.
    c.crash(0);
    c.run(TIMEOUT + 2 * HEARTBEAT);
    assert_eq!(c.actives(), vec![1]);
    assert_eq!(c.holder(1, "a"), Some(a));
    assert_eq!(c.holder(2, "b"), Some(b));
}

#[test]
fn begin_handoff_needs_an_active_and_a_live_standby() {
    let mut c = elected(2);
    let now = c.now;
    assert!(!c.node_mut(1).handle_begin_handoff(now));
    c.crash(1);
    c.run(TIMEOUT + 1);
    let now = c.now;
    assert!(!c.node_mut(0).handle_begin_handoff(now));
    assert_eq!(c.node(0).role(), NodeRole::Active);
}

#[test]
fn a_handoff_not_taken_up_gives_the_role_back_to_the_cluster() {
    let mut c = elected(2);
    let a = c.grant(0, "a", 10_000);
    c.cut.push((0, 1));
    let now = c.now;
    assert!(c.node_mut(0).handle_begin_handoff(now));
    c.deliver();
    c.cut.clear();
    c.run(TIMEOUT + 1);
    assert_ne!(c.node(0).role(), NodeRole::HandingOff { to: 1 });
    c.run(TIMEOUT + 4 * HEARTBEAT);
    assert_eq!(c.actives(), vec![0]);
    assert_eq!(c.node(0).handed_off_to(), None);
    assert_eq!(c.holder(0, "a"), Some(a));
    assert_eq!(c.holder(1, "a"), Some(a));
}

#[test]
fn a_returning_node_0_follows_syncs_then_takes_over_with_every_lock() {
    let mut c = elected(3);
    let a = c.grant(0, "a", 10_000);
    c.crash(0);
    c.run(TIMEOUT + 2 * HEARTBEAT);
    assert_eq!(c.actives(), vec![1]);
    let b = c.grant(1, "b", 10_000);
    let n = c.len();
    c.driver.start(0, engine(0, n, c.now), 0);
    let mut saw_following = false;
    for _ in 0..TIMEOUT + 4 * HEARTBEAT {
        c.step();
        assert!(c.actives().len() <= 1, "two actives at t={}", c.now);
        if c.node(0).role() == NodeRole::Standby && c.node(0).following() == Some(1) {
            saw_following = true;
        }
    }
    assert!(saw_following, "node 0 never followed node 1");
    assert_eq!(c.actives(), vec![0]);
    assert_eq!(c.holder(0, "a"), Some(a));
    assert_eq!(c.holder(0, "b"), Some(b));
    assert_eq!(c.node(1).following(), Some(0));
    assert_eq!(c.node(2).following(), Some(0));
    assert!(c.grant(0, "c", 100) > b);
}

#[test]
fn a_gap_in_the_commands_makes_the_standby_resync() {
    let mut c = elected(3);
    c.cut.push((0, 2));
    let a = c.grant(0, "a", 10_000);
    c.cut.clear();
    let b = c.grant(0, "b", 10_000);
    assert_eq!(c.holder(1, "a"), Some(a));
    // Node 2 skipped the batch with "a": it must not apply "b" on top of
    // a table missing "a", and must ask for a full copy.
    assert_eq!(c.holder(2, "a"), None);
    c.run(3 * HEARTBEAT);
    assert_eq!(c.holder(2, "a"), Some(a));
    assert_eq!(c.holder(2, "b"), Some(b));
    assert_eq!(c.locks(2), c.locks(0));
}

#[test]
fn commands_lost_before_a_heartbeat_are_noticed_at_the_heartbeat() {
    let mut c = elected(2);
    c.cut.push((0, 1));
    let a = c.grant(0, "a", 10_000);
    c.cut.clear();
    assert_eq!(c.holder(1, "a"), None);
    c.run(HEARTBEAT + 1);
    c.run(2 * HEARTBEAT);
    assert_eq!(c.holder(1, "a"), Some(a));
}

#[test]
fn a_broken_link_makes_the_active_withhold_commands_until_a_resync() {
    let mut c = elected(3);
    c.node_mut(0).handle_link_down(2);
    let a = c.grant(0, "a", 10_000);
    assert_eq!(c.holder(1, "a"), Some(a));
    assert_eq!(c.holder(2, "a"), None, "commands went to an unsynced peer");
    c.run(3 * HEARTBEAT);
    assert_eq!(c.holder(2, "a"), Some(a));
    // Unknown peers are ignored.
    c.node_mut(0).handle_link_down(9);
}

#[test]
fn messages_from_unknown_or_own_indexes_are_ignored() {
    let mut c = Cluster::new(3);
    c.run(5);
    let beat = Heartbeat {
        role: PeerRole::Active,
        term: 1 << 40,
        seq: 3,
        last_token: 1 << 41,
        following: None,
    };
    let now = c.now;
    for from in [0, 3, 9, usize::MAX] {
        let node = c.node_mut(0);
        node.handle_message(from, PriorityMessage::Heartbeat(beat.clone()), now);
        node.handle_message(
            from,
            PriorityMessage::HandoffPart { part: big_table() },
            now,
        );
        node.handle_message(from, PriorityMessage::SyncRequest, now);
    }
    let node = c.node_mut(0);
    assert_eq!(node.role(), NodeRole::Standby);
    assert_eq!(node.following(), None);
    assert_eq!(node.term(), 0);
    assert_eq!(node.table().last_token(), 0);
    assert!(drain(node).is_empty());
    // Only its own heartbeats are in the outbox, none addressed to 3 or 9.
    for (to, message) in node.poll_transmits() {
        assert!(to == 1 || to == 2, "output to {to}");
        assert!(matches!(message, PriorityMessage::Heartbeat(_)));
    }
    // And the cluster goes on as if nothing had come.
    c.run(TIMEOUT + 2 * HEARTBEAT);
    assert_eq!(c.actives(), vec![0]);
    assert!(c.node(0).term() < 1 << 40);
}

fn big_table() -> TablePart {
    TablePart {
        table: 1,
        piece: 0,
        last: true,
        last_token: 1 << 42,
        locks: Vec::new(),
    }
}

#[test]
fn waiters_on_the_active_are_served_and_their_grants_replicated() {
    let mut c = elected(2);
    let a = c.grant(0, "a", 10_000);
    assert!(matches!(
        c.acquire(0, "a", 500, 3),
        AcquireOutcome::Queued { .. }
    ));
    let now = c.now;
    let released = c.node_mut(0).handle_release(&key("a"), a, now);
    assert_eq!(released, Ok(Outcome::Released));
    let token = match &drain(c.node_mut(0))[..] {
        [Event::Granted {
            handle: 3, token, ..
        }] => *token,
        other => panic!("waiter not granted: {other:?}"),
    };
    assert!(token > a);
    c.deliver();
    assert_eq!(c.holder(1, "a"), Some(token));
}

/// The active that receives a renewal, release or value set of a grant
/// whose lease ended before its tick expired it refuses it, expires the
/// grant and hands the key on, and the standbys apply the same.
#[test]
fn a_request_past_the_lease_end_before_the_tick_is_refused_and_the_key_passes_on() {
    type Request = fn(&mut PriorityNode<u64>, Token, Millis) -> Result<Outcome, NotServing>;
    let requests: [(&str, Request); 3] = [
        ("renew", |node, token, now| {
            node.handle_renew(&key("a"), token, 1_000, now)
        }),
        ("release", |node, token, now| {
            node.handle_release(&key("a"), token, now)
        }),
        ("set value", |node, token, now| {
            node.handle_set_value(&key("a"), token, None, now)
        }),
    ];
    for (what, request) in requests {
        let mut c = elected(2);
        let held = c.grant(0, "a", 20);
        assert!(matches!(
            c.acquire(0, "a", 500, 3),
            AcquireOutcome::Queued { .. }
        ));
        // Renewed just in time to end 1 ms later, the lease ends; no
        // tick comes to expire it.
        c.advance(19);
        let now = c.now;
        let answer = c.node_mut(0).handle_renew(&key("a"), held, 1, now);
        assert_eq!(answer, Ok(Outcome::Renewed), "in time, {what}");
        c.advance(1);
        let now = c.now;
        assert_eq!(
            request(c.node_mut(0), held, now),
            Ok(Outcome::NotFound),
            "{what} past the lease end"
        );
        let token = match &drain(c.node_mut(0))[..] {
            [Event::Granted {
                handle: 3, token, ..
            }] => *token,
            other => panic!("waiter not granted on {what}: {other:?}"),
        };
        assert!(token > held);
        c.deliver();
        assert_eq!(c.holder(1, "a"), Some(token), "{what}");
        assert_eq!(c.node(1).table().len(), 1);
    }
}
