//! Tables and command batches in pieces: every message within
//! `MAX_MESSAGE_BYTES`, the receiver's table the sender's, a handoff taken
//! only with its whole table.

use super::*;
use baton_core::{Acquire, MAX_KEY_LEN};

/// A key of the longest length, numbered.
fn long_key(i: usize) -> Key {
    let digits = format!("{i:08}");
    let mut text = "k".repeat(MAX_KEY_LEN - digits.len());
    text.push_str(&digits);
    key(&text)
}

/// A two-node cluster with the real message cap, node 0 active holding
/// `locks` locks of the longest keys, granted in one go (one journal, so
/// one flush that must be cut into batches).
fn big_cluster(locks: usize) -> Cluster {
    let mut c = Cluster::new(2);
    for i in 0..2 {
        c.node_mut(i).set_message_limit(MAX_MESSAGE_BYTES);
    }
    c.run(TIMEOUT + 2 * HEARTBEAT);
    assert_eq!(c.actives(), vec![0]);
    let now = c.now;
    for i in 0..locks {
        let answer =
            c.node_mut(0)
                .handle_acquire(Acquire::plain(long_key(i), 0, 600_000), now, i as u64);
        assert!(matches!(answer, Ok(AcquireOutcome::Granted { .. })));
    }
    c
}

#[test]
fn a_large_table_crosses_in_pieces_each_within_the_cap() {
    let mut c = big_cluster(50_000);
    // The grants reach the standby as batches of commands.
    c.deliver();
    assert!(
        c.traffic.command_batches > 10,
        "{:?}: 13 MB of grants in few batches",
        c.traffic
    );
    assert_eq!(c.node(1).table().len(), 50_000);
    assert!(c.node(1).table() == c.node(0).table());
    // A fresh standby in node 1's place asks for the whole table.
    let n = c.len();
    let mut fresh = PriorityNode::new(config(1, n), c.now);
    fresh.set_message_limit(MAX_MESSAGE_BYTES);
    c.driver.start(1, fresh, 0);
    c.node_mut(0).handle_link_down(1);
    let pieces_before = c.traffic.snapshot_pieces;
    c.run(3 * HEARTBEAT);
    assert_eq!(c.node(1).following(), Some(0));
    assert_eq!(c.node(1).term(), c.node(0).term(), "no snapshot taken");
    let pieces = c.traffic.snapshot_pieces - pieces_before;
    assert!(pieces > 10, "13 MB of table in {pieces} pieces");
    assert!(c.traffic.largest <= MAX_MESSAGE_BYTES);
    // Not far below the cap either: the pieces are cut by size.
    assert!(c.traffic.largest > MAX_MESSAGE_BYTES - 1_000);
    assert!(
        c.node(1).table() == c.node(0).table(),
        "the receiver's table is not the sender's"
    );
    // Commands go on from the snapshot.
    let a = c.grant(0, "after", 1_000);
    assert_eq!(c.holder(1, "after"), Some(a));
}

#[test]
fn a_handoff_of_a_large_table_is_taken_only_whole() {
    let mut c = big_cluster(20_000);
    c.deliver();
    c.run(HEARTBEAT);
    let before = c.node(0).table().clone();
    let now = c.now;
    assert!(c.node_mut(0).handle_begin_handoff(now));
    let output = c.node_mut(0).poll_transmits();
    let parts: Vec<_> = output
        .iter()
        .filter(|(to, m)| *to == 1 && matches!(m, PriorityMessage::HandoffPart { .. }))
        .map(|(_, m)| m.clone())
        .collect();
    assert!(parts.len() > 3, "a 5 MB handoff in {} pieces", parts.len());
    for (i, part) in parts.iter().enumerate() {
        c.traffic.note(1, part);
        c.node_mut(1).handle_message(0, part.clone(), now);
        let taken = c.node(1).role() == NodeRole::Active;
        assert_eq!(taken, i + 1 == parts.len(), "role after piece {i}");
    }
    assert_eq!(c.node(1).table().len(), 20_000);
    assert!(c.node(1).table().last_token() >= before.last_token());
    for (k, holder) in before.iter() {
        assert_eq!(
            c.node(1).table().holder(k).map(|h| h.token),
            Some(holder.token)
        );
    }
    for (to, message) in output {
        if !matches!(message, PriorityMessage::HandoffPart { .. }) {
            c.node_mut(to).handle_message(0, message, now);
        }
    }
    c.deliver();
    assert_eq!(c.node(0).handed_off_to(), Some(1));
    assert_eq!(c.actives(), vec![1]);
}

/// A link that loses one piece of a handoff (and keeps the rest and the
/// heartbeat behind them): the successor does not take a table short of
/// a piece, says so, and the sender serves on with every lock.
#[test]
fn a_handoff_short_of_a_piece_is_not_taken() {
    let mut c = elected(2);
    let tokens: Vec<_> = (0..12)
        .map(|i| c.grant(0, &format!("k{i}"), 10_000))
        .collect();
    let now = c.now;
    assert!(c.node_mut(0).handle_begin_handoff(now));
    let output = c.node_mut(0).poll_transmits();
    let pieces = output
        .iter()
        .filter(|(_, m)| matches!(m, PriorityMessage::HandoffPart { .. }))
        .count();
    assert!(pieces >= 3, "{pieces} pieces");
    let mut seen = 0;
    for (to, message) in output {
        if let PriorityMessage::HandoffPart { .. } = &message {
            seen += 1;
            if seen == 2 {
                continue;
            }
        }
        c.node_mut(to).handle_message(0, message, now);
    }
    assert_eq!(c.node(1).role(), NodeRole::Standby, "took a partial table");
    c.deliver();
    assert_eq!(c.actives(), vec![0], "the sender did not serve on");
    for (i, t) in tokens.iter().enumerate() {
        assert_eq!(c.holder(0, &format!("k{i}")), Some(*t));
    }
    c.run(3 * HEARTBEAT);
    assert_eq!(c.locks(1), c.locks(0));
}

/// A snapshot cut off by a broken link is dropped: the pieces that come
/// after are not taken as a table, and the standby takes the next whole
/// copy.
#[test]
fn an_unfinished_snapshot_is_dropped_and_a_later_one_taken() {
    let mut c = elected(2);
    for i in 0..12 {
        c.grant(0, &format!("k{i}"), 10_000);
    }
    // A restarted node 1 follows node 0 but gets none of its copies yet.
    c.driver.start(1, engine(1, 2, c.now), 0);
    c.starved.push(1);
    c.run(2 * HEARTBEAT);
    assert_eq!(c.node(1).following(), Some(0));
    c.node_mut(0).handle_link_down(1);
    let now = c.now;
    c.node_mut(0)
        .handle_message(1, PriorityMessage::SyncRequest, now);
    let parts: Vec<_> = c
        .node_mut(0)
        .poll_transmits()
        .into_iter()
        .filter(|(to, m)| *to == 1 && matches!(m, PriorityMessage::SnapshotPart { .. }))
        .map(|(_, m)| m)
        .collect();
    assert!(parts.len() >= 3, "{} pieces", parts.len());
    // The first piece arrives, then the link breaks, then the rest comes.
    let node = c.node_mut(1);
    node.handle_message(0, parts[0].clone(), now);
    node.handle_link_down(0);
    for part in &parts[1..] {
        node.handle_message(0, part.clone(), now);
    }
    assert!(node.table().is_empty(), "took the rest of a dropped table");
    assert_eq!(node.term(), 0);
    c.starved.clear();
    c.run(4 * HEARTBEAT);
    assert_eq!(c.node(1).term(), c.node(0).term());
    assert_eq!(c.locks(1), c.locks(0));
}
