//! Pauses and splits: a node that stalled, two actives after a heal, a
//! timer that runs late. None of them may cost a token's uniqueness.

use super::*;
use baton_core::Acquire;

/// A standby that was paused (SIGSTOP, a stall) sees every peer as dead at
/// its first tick after the pause, because it has not read their heartbeats
/// yet. It must listen before it promotes, as at start-up.
#[test]
fn a_paused_standby_listens_before_promoting() {
    let mut c = elected(3);
    let a = c.grant(0, "a", 10_000);
    c.frozen[2] = true;
    c.run(TIMEOUT + 2 * HEARTBEAT);
    c.frozen[2] = false;
    // Its first tick comes before the heartbeats that waited for it.
    c.advance(1);
    let now = c.now;
    c.node_mut(2).handle_tick(now);
    assert_eq!(
        c.node(2).role(),
        NodeRole::Standby,
        "a standby promoted at its first tick after a pause, next to a live active"
    );
    c.deliver();
    c.run(TIMEOUT + 4 * HEARTBEAT);
    assert_eq!(c.actives(), vec![0]);
    assert_eq!(c.holder(2, "a"), Some(a));
}

/// A handoff that waited out the successor's pause may be stale: its sender
/// gave up, served again, and granted since.
#[test]
fn a_handoff_that_waited_out_a_pause_is_not_taken() {
    let mut c = elected(2);
    let now = c.now;
    assert!(c.node_mut(0).handle_begin_handoff(now));
    let handoff: Vec<_> = c
        .node_mut(0)
        .poll_transmits()
        .into_iter()
        .filter(|(to, m)| *to == 1 && matches!(m, PriorityMessage::HandoffPart { .. }))
        .map(|(_, m)| m)
        .collect();
    assert!(!handoff.is_empty());
    c.frozen[1] = true;
    c.run(3 * TIMEOUT);
    assert_eq!(c.actives(), vec![0], "the sender did not serve again");
    let b = c.grant(0, "b", 10_000);
    c.frozen[1] = false;
    c.advance(1);
    let now = c.now;
    let node = c.node_mut(1);
    node.handle_tick(now);
    for part in handoff {
        node.handle_message(0, part, now);
    }
    assert_eq!(c.node(1).role(), NodeRole::Standby, "took a stale handoff");
    c.deliver();
    c.run(TIMEOUT + 4 * HEARTBEAT);
    assert_eq!(c.actives(), vec![0]);
    assert_eq!(c.holder(1, "b"), Some(b));
}

/// The loser of a dual-active episode may step down before the winner ever
/// hears it as active; its heartbeats must still carry its tokens after it
/// adopted the winner's table.
#[test]
fn the_winner_learns_the_losers_tokens_even_when_the_loser_steps_down_first() {
    let mut c = elected(2);
    c.isolate(0);
    c.run(TIMEOUT + 2 * HEARTBEAT);
    assert_eq!(c.actives(), vec![0, 1]);
    let mut last_1 = 0;
    for i in 0..3 {
        last_1 = c.grant(1, &format!("k{i}"), 10_000);
    }
    c.cut.clear();
    // Only node 0's heartbeat reaches node 1 at first: it steps down, asks
    // for node 0's table and adopts it before node 0 hears anything.
    c.cut.push((1, 0));
    let mut beat = None;
    for _ in 0..2 * HEARTBEAT {
        c.advance(1);
        let now = c.now;
        c.node_mut(0).handle_tick(now);
        beat = c
            .node_mut(0)
            .poll_transmits()
            .into_iter()
            .find(|(to, m)| *to == 1 && matches!(m, PriorityMessage::Heartbeat(_)))
            .map(|(_, m)| m);
        if beat.is_some() {
            break;
        }
    }
    let now = c.now;
    c.node_mut(1).handle_message(0, beat.unwrap(), now);
    assert_eq!(c.node(1).role(), NodeRole::Standby);
    c.node_mut(1).poll_transmits();
    let table = c.node(0).table().snapshot(now);
    let snapshot = PriorityMessage::SnapshotPart {
        term: c.node(0).term(),
        seq: 0,
        part: TablePart {
            table: 1,
            piece: 0,
            last: true,
            last_token: table.last_token,
            locks: table.locks,
        },
    };
    c.node_mut(1).handle_message(0, snapshot, now);
    assert!(
        c.node(1).table().last_token() < last_1,
        "no snapshot adopted"
    );
    c.cut.clear();
    c.run(2 * HEARTBEAT);
    let next = c.grant(0, "y", 100);
    assert!(next > last_1, "{next} is not above the loser's {last_1}");
}

/// Both sides of a split can promote from the same known tokens and so
/// take the same floor: the same token is then granted twice, and after
/// the heal a holder of one grant can release the other (found by the
/// simulation). Each node grants only from its own token blocks
/// (`token_floor.rs`), so equal knowledge gives different tokens.
#[test]
fn two_sides_of_a_split_never_grant_the_same_token() {
    let mut c = elected(2);
    c.grant(0, "a", 10_000);
    c.isolate(0);
    // Node 0 stalls inside the split: it steps down, then, alone, promotes
    // again from the same table node 1 promoted from.
    c.frozen[0] = true;
    c.run(TIMEOUT + 2 * HEARTBEAT);
    assert_eq!(c.node(1).role(), NodeRole::Active);
    let b = c.grant(1, "b", 10_000);
    c.frozen[0] = false;
    c.run(3 * TIMEOUT);
    assert_eq!(c.actives(), vec![0, 1]);
    let x = c.grant(0, "x", 10_000);
    assert_ne!(x, b, "both sides granted token {x}");
}

#[test]
fn a_busy_active_whose_timer_runs_late_keeps_its_role() {
    let mut c = elected(3);
    let before = c.grant(0, "held", 60_000);
    // Node 0's timer never fires for three failure timeouts, but clients
    // keep it busy every 10 ms; its peers tick and listen as usual.
    let until = c.now + 3 * TIMEOUT;
    let mut handle = 1_000;
    while c.now < until {
        for _ in 0..10 {
            c.advance(1);
            for i in 1..3 {
                c.driver.tick(i);
            }
            c.deliver();
        }
        handle += 1;
        let now = c.now;
        let answer = c.node_mut(0).handle_acquire(
            Acquire::plain(key(&format!("busy/{handle}")), 0, 1_000),
            now,
            handle,
        );
        assert!(
            answer.is_ok(),
            "node 0 stopped serving at t={now}: {answer:?}"
        );
        c.deliver();
    }
    assert_eq!(
        c.actives(),
        vec![0],
        "a standby promoted next to a busy active"
    );
    assert_eq!(c.holder(1, "held"), Some(before));
}

/// After a split, an active that hears a standby of the other side reports
/// the other active's tokens. Raising its floor to exactly that token made
/// both actives count through the same numbers (the simulation found it).
#[test]
fn an_active_that_hears_the_other_sides_standby_never_grants_its_tokens() {
    let mut c = elected(3);
    c.grant(0, "a", 10_000);
    c.isolate(0);
    c.run(TIMEOUT + 3 * HEARTBEAT);
    assert_eq!(c.actives(), vec![0, 1]);
    assert_eq!(c.node(2).following(), Some(1));
    let mut theirs = vec![c.grant(1, "b", 10_000)];
    // Only node 2's heartbeats reach node 0 now.
    c.cut.retain(|&link| link != (2, 0));
    c.run(2 * HEARTBEAT);
    assert_eq!(c.actives(), vec![0, 1]);
    let mut ours = Vec::new();
    for i in 0..3 {
        ours.push(c.grant(0, &format!("x{i}"), 10_000));
        theirs.push(c.grant(1, &format!("y{i}"), 10_000));
        c.run(HEARTBEAT);
    }
    for t in &ours {
        assert!(
            !theirs.contains(t),
            "both actives granted token {t}: {ours:?} {theirs:?}"
        );
    }
}
