//! What counts as a sign of life: any message, and bytes of one still on
//! their way. A busy active whose frames queue behind a large one (a table
//! piece, a flood's batches of commands) is not a dead one; a dead one
//! sends nothing at all and is still replaced after a failure timeout.

use super::*;

/// Node 0's messages no longer reach node 1 whole (they queue behind a
/// large frame still being received), but bytes of them keep coming.
fn frames_stuck_behind_a_large_one(c: &mut Cluster, ms: u64) {
    c.cut.push((0, 1));
    for _ in 0..ms {
        c.step();
        let now = c.now;
        c.node_mut(1).handle_link_progress(0, now);
    }
    c.cut.retain(|&link| link != (0, 1));
}

#[test]
fn a_standby_does_not_promote_while_bytes_of_the_active_keep_coming() {
    let mut c = elected(3);
    let a = c.grant(0, "a", 10_000);
    frames_stuck_behind_a_large_one(&mut c, 4 * TIMEOUT);
    assert_eq!(
        c.actives(),
        vec![0],
        "a standby took a busy link for a dead active"
    );
    assert_eq!(c.node(1).following(), Some(0));
    c.run(2 * HEARTBEAT);
    assert_eq!(c.actives(), vec![0]);
    assert_eq!(c.holder(1, "a"), Some(a));
}

#[test]
fn a_dead_active_is_still_replaced_after_a_failure_timeout() {
    let mut c = elected(3);
    frames_stuck_behind_a_large_one(&mut c, 2 * TIMEOUT);
    // Killed: neither messages nor bytes from now on.
    c.crash(0);
    assert_replaced_after_a_failure_timeout(&mut c, 1);
}

#[test]
fn bytes_count_only_from_a_peer_heard_whole_and_not_refused() {
    let mut c = Cluster::new(2);
    let now = c.now;
    // Never heard: bytes alone (a handshake's, a stranger's) make no peer.
    c.node_mut(1).handle_link_progress(0, now);
    c.node_mut(1).handle_link_progress(1, now);
    c.node_mut(1).handle_link_progress(7, now);
    assert!(!c.node(1).has_live_peer(now));
    // Heard, then refused: what follows on its link is no sign of life.
    let mut c = elected(2);
    c.cut.push((0, 1));
    let now = c.now;
    let implausible = PriorityMessage::Heartbeat(Heartbeat {
        role: PeerRole::Active,
        term: u64::MAX,
        seq: u64::MAX,
        last_token: u64::MAX,
        following: None,
    });
    c.node_mut(1).handle_message(0, implausible, now);
    for _ in 0..TIMEOUT + 2 {
        c.step();
        let now = c.now;
        c.node_mut(1).handle_link_progress(0, now);
    }
    assert_eq!(c.actives(), vec![0, 1], "refused bytes kept a peer alive");
}

#[test]
fn a_table_whose_pieces_cross_slowly_is_not_dropped_as_stale() {
    let mut c = elected(2);
    for i in 0..10 {
        c.grant(0, &format!("slow/{i}"), 600_000);
    }
    // A fresh node 1 follows node 0 but gets no table yet.
    let fresh = engine(1, 2, c.now);
    c.driver.start(1, fresh, 0);
    c.starved.push(1);
    c.run(3 * HEARTBEAT);
    assert_eq!(c.node(1).following(), Some(0));
    assert!(c.node(1).table().is_empty());
    // Node 0's table, in pieces, taken by hand; nothing else of node 0
    // reaches node 1 whole while they cross.
    c.starved.clear();
    c.cut.push((0, 1));
    let now = c.now;
    c.node_mut(0).handle_link_down(1);
    c.node_mut(0)
        .handle_message(1, PriorityMessage::SyncRequest, now);
    let mut pieces = c
        .node_mut(0)
        .poll_transmits()
        .into_iter()
        .filter(|(to, m)| *to == 1 && matches!(m, PriorityMessage::SnapshotPart { .. }))
        .map(|(_, m)| m);
    let first = pieces.next().unwrap();
    let rest: Vec<_> = pieces.collect();
    assert!(!rest.is_empty(), "the table fits one piece");
    c.node_mut(1).handle_message(0, first, now);
    for _ in 0..2 * TIMEOUT {
        c.step();
        let now = c.now;
        c.node_mut(1).handle_link_progress(0, now);
    }
    let now = c.now;
    for piece in rest {
        c.node_mut(1).handle_message(0, piece, now);
    }
    assert_eq!(c.node(1).table().len(), 10, "the slow table was dropped");
    assert_eq!(c.actives(), vec![0]);
}
