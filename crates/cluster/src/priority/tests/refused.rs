//! Peers that answer but refuse the link (another key, another peer
//! list) are alive and incompatible, not dead: a node that links with
//! none of the peers that answer never serves, the larger side serves
//! (of equal sides, the one with the first node), and a misconfigured
//! node, wherever it is listed, blocks no failover of the others.

use super::super::engine::{Barred, LinkRefused, REFUSAL_HOLD_MIN_MS};
use super::exact::{active_with_a_waiter, assert_no_event, assert_only_waiter_moved, heartbeat};
use super::*;
use baton_core::Acquire;

/// Node `me` of `n`, started at 0 and ticked every heartbeat to `until`,
/// its dials of `refusing` answered with a refusal `why` before each tick.
fn refused_node(
    me: NodeIndex,
    n: usize,
    refusing: &[NodeIndex],
    why: LinkRefused,
    until: Millis,
) -> PriorityNode<u64> {
    let mut node = PriorityNode::new(config(me, n), 0);
    let mut now = 0;
    while now <= until {
        for &peer in refusing {
            node.handle_link_refused(peer, why, now);
        }
        node.handle_tick(now);
        now += HEARTBEAT;
    }
    node
}

#[test]
fn a_node_whose_only_peer_refuses_the_link_never_promotes_and_redirects_nowhere() {
    let mut node = refused_node(1, 2, &[0], LinkRefused::Key, TIMEOUT - HEARTBEAT);
    node.poll_transmits();
    node.handle_link_refused(0, LinkRefused::Key, TIMEOUT);
    node.handle_tick(TIMEOUT);
    // Without the refusal it would promote here (a lone node does).
    assert_eq!(node.role(), NodeRole::Standby);
    assert_eq!(
        node.poll_transmits(),
        vec![(
            0,
            PriorityMessage::Heartbeat(heartbeat(PeerRole::Standby, 0, 0, None))
        )]
    );
    let refused = node.handle_acquire(Acquire::plain(key("a"), 0, 1_000), TIMEOUT, 7);
    assert_eq!(refused, Err(NotServing::redirect(None)));
    assert_no_event(&mut node);
    assert_eq!(
        node.barred(TIMEOUT),
        Some(Barred::Alone {
            peer: 0,
            why: LinkRefused::Key
        })
    );
    let reason = node.barred_reason(TIMEOUT).unwrap();
    assert!(
        reason.contains("127.0.0.1:7400") && reason.contains("--cluster-key-file"),
        "{reason}"
    );
}

#[test]
fn a_refusing_peer_found_gone_is_dead_and_a_lone_node_then_promotes() {
    let mut node = refused_node(1, 2, &[0], LinkRefused::PeerList, 3 * TIMEOUT);
    assert_eq!(node.role(), NodeRole::Standby);
    let now = 3 * TIMEOUT + 1;
    node.handle_tick(now);
    assert_eq!(node.role(), NodeRole::Standby, "the refusal still counts");
    // Killed: its port refuses connections.
    node.handle_nobody_listening(0);
    assert_eq!(node.barred(now), None);
    node.handle_tick(now + 1);
    assert_eq!(node.role(), NodeRole::Active);
}

#[test]
fn a_refusal_counts_beyond_a_failure_timeout_without_redials_then_lapses() {
    // A node whose redials come late (a loaded host) must not take the
    // refusing peer for dead between two of them.
    let last = 3 * TIMEOUT;
    let mut node = refused_node(1, 2, &[0], LinkRefused::Key, last);
    const { assert!(REFUSAL_HOLD_MIN_MS > 2 * TIMEOUT) };
    let mut now = last;
    while now <= last + REFUSAL_HOLD_MIN_MS {
        node.handle_tick(now);
        assert_eq!(node.role(), NodeRole::Standby, "promoted at {now}");
        now += HEARTBEAT;
    }
    node.handle_tick(last + REFUSAL_HOLD_MIN_MS + 1);
    assert_eq!(
        node.role(),
        NodeRole::Active,
        "a peer silent that long is dead"
    );
}

#[test]
fn an_active_refused_by_every_peer_that_answers_steps_down_and_sends_its_waiters_nowhere() {
    let (mut node, id) = active_with_a_waiter(0);
    assert_eq!(node.role(), NodeRole::Active);
    let now = TIMEOUT + 1;
    node.handle_link_refused(1, LinkRefused::PeerList, now + 1);
    assert_eq!(node.role(), NodeRole::Standby);
    assert_eq!(node.following(), None);
    assert_only_waiter_moved(&mut node, id, None);
    assert_eq!(node.poll_transmits(), vec![]);
    let refused = node.handle_acquire(Acquire::plain(key("b"), 0, 1_000), now + 2, 9);
    assert_eq!(refused, Err(NotServing::redirect(None)));
}

#[test]
fn a_refused_node_listed_first_never_serves_and_blocks_no_failover() {
    let mut c = Cluster::new(4);
    c.misconfigure(0, LinkRefused::Key);
    let mut serving_0 = 0;
    for _ in 0..TIMEOUT + 2 * HEARTBEAT {
        c.step();
        serving_0 += usize::from(c.node(0).role() == NodeRole::Active);
    }
    assert_eq!(c.actives(), vec![1], "three linked nodes outnumber one");
    assert!(matches!(
        c.node(0).barred(c.now),
        Some(Barred::Alone { peer: 1, .. })
    ));
    assert_eq!(c.node(1).barred(c.now), None);
    let a = c.grant(1, "a", 10_000);
    c.crash(1);
    for _ in 0..2 * TIMEOUT + 2 * HEARTBEAT {
        c.step();
        serving_0 += usize::from(c.node(0).role() == NodeRole::Active);
    }
    assert_eq!(c.actives(), vec![2], "the failover went on");
    assert_eq!(c.holder(2, "a"), Some(a));
    assert_eq!(serving_0, 0, "the misconfigured node served");
}

#[test]
fn a_node_with_another_peer_list_listed_last_never_serves() {
    let mut c = Cluster::new(4);
    c.misconfigure(3, LinkRefused::PeerList);
    c.run(TIMEOUT + 2 * HEARTBEAT);
    assert_eq!(c.actives(), vec![0]);
    let a = c.grant(0, "a", 10_000);
    let now = c.now;
    let refused = c
        .node_mut(3)
        .handle_acquire(Acquire::plain(key("a"), 0, 1_000), now, 5);
    assert_eq!(refused, Err(NotServing::redirect(None)));
    c.run(10 * TIMEOUT);
    assert_eq!(c.actives(), vec![0]);
    assert_eq!(c.holder(0, "a"), Some(a));
    assert_eq!(c.node(3).table().len(), 0, "it never served");
}

#[test]
fn of_two_equal_sides_only_the_one_with_the_first_node_serves() {
    let mut c = Cluster::new(4);
    for (a, b) in [(0, 2), (0, 3), (1, 2), (1, 3)] {
        c.cut.extend([(a, b), (b, a)]);
        c.refusals
            .extend([(a, b, LinkRefused::Key), (b, a, LinkRefused::Key)]);
    }
    for _ in 0..4 * TIMEOUT {
        c.step();
        assert!(c.node(2).role() != NodeRole::Active);
        assert!(c.node(3).role() != NodeRole::Active);
    }
    assert_eq!(c.actives(), vec![0]);
    assert_eq!(
        c.node(2).barred(c.now),
        Some(Barred::Outnumbered {
            linked: 2,
            refusing: 2,
            peer: 0,
            why: LinkRefused::Key
        })
    );
}

#[test]
fn an_active_refused_by_the_larger_side_steps_down_and_that_side_serves() {
    let mut c = elected(3);
    let a = c.grant(0, "a", 10_000);
    c.misconfigure(0, LinkRefused::PeerList);
    for _ in 0..3 * TIMEOUT {
        c.step();
        assert!(c.actives().len() <= 1, "two actives: {:?}", c.actives());
    }
    assert_eq!(c.actives(), vec![1]);
    assert_eq!(c.node(0).role(), NodeRole::Standby);
    assert_eq!(c.holder(1, "a"), Some(a));
}
