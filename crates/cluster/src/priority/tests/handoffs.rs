//! Handoffs around dual actives and pauses: a
//! graceful stop hands its locks to whoever can be reached, an active one
//! included, and no two nodes ever send clients to each other.

use super::*;

/// No pair of nodes where each sends clients to the other.
fn assert_no_redirect_loop(c: &Cluster) {
    for i in 0..c.len() {
        for j in 0..c.len() {
            if !c.driver.is_up(i) || !c.driver.is_up(j) {
                continue;
            }
            let loops =
                c.node(i).redirect_target() == Some(j) && c.node(j).redirect_target() == Some(i);
            assert!(
                !loops,
                "nodes {i} and {j} redirect to each other at t={}",
                c.now
            );
        }
    }
}

/// Two nodes split into two actives, each with a lock of its own (`a` on
/// node 0, `b` on node 1, unless `b` is `None`), then half healed: node 0
/// hears node 1, node 1 does not hear node 0 yet. Returns their tokens.
fn two_actives_half_healed(c: &mut Cluster, b: Option<&str>) -> (Token, Option<Token>) {
    c.isolate(0);
    c.run(TIMEOUT + 3 * HEARTBEAT);
    assert_eq!(c.actives(), vec![0, 1]);
    let a = c.grant(0, "a", 60_000);
    let b = b.map(|key| c.grant(1, key, 60_000));
    c.cut.retain(|&link| link != (1, 0));
    c.run(2 * HEARTBEAT);
    assert_eq!(c.actives(), vec![0, 1]);
    (a, b)
}

/// Crashes node 0, the sender of a handoff, and checks that node 1 serves
/// alone with every lock of `held` (key, token).
fn crash_the_sender_and_check_node_1_holds(c: &mut Cluster, held: &[(&str, Token)]) {
    c.crash(0);
    c.run(TIMEOUT + 4 * HEARTBEAT);
    assert_eq!(c.actives(), vec![1]);
    for &(key, token) in held {
        assert_eq!(
            c.holder(1, key),
            Some(token),
            "the stopping active's lock on {key} was lost"
        );
    }
}

/// Right after a heal both sides may still serve; the one that stops
/// gracefully hands its table to the other active, which keeps every lock.
#[test]
fn a_graceful_stop_next_to_another_active_hands_its_locks_to_it() {
    let mut c = elected(2);
    let (a, b) = two_actives_half_healed(&mut c, Some("b"));
    let b = b.unwrap_or_else(|| panic!("no lock on node 1"));
    let now = c.now;
    assert!(
        c.node_mut(0).handle_begin_handoff(now),
        "no successor for a stop while another active is reachable"
    );
    c.cut.clear();
    c.deliver();
    assert_eq!(c.node(0).handed_off_to(), Some(1));
    // The stopping node exits once the handoff is confirmed.
    crash_the_sender_and_check_node_1_holds(&mut c, &[("a", a), ("b", b)]);
    assert!(c.grant(1, "c", 100) > a.max(b));
}

/// A key both sides of a split granted: the merging active keeps its own
/// grant (its holder was fenced with it) and takes the rest.
#[test]
fn a_merge_keeps_the_receivers_grant_of_a_key_granted_twice() {
    let mut c = elected(2);
    c.isolate(0);
    c.run(TIMEOUT + 3 * HEARTBEAT);
    let _theirs = c.grant(0, "k", 10_000);
    let only_theirs = c.grant(0, "only0", 10_000);
    let ours = c.grant(1, "k", 10_000);
    c.cut.retain(|&link| link != (1, 0));
    c.run(2 * HEARTBEAT);
    let now = c.now;
    assert!(c.node_mut(0).handle_begin_handoff(now));
    c.cut.clear();
    c.deliver();
    assert_eq!(c.node(0).handed_off_to(), Some(1));
    c.crash(0);
    c.run(2 * HEARTBEAT);
    assert_eq!(c.actives(), vec![1]);
    assert_eq!(c.holder(1, "k"), Some(ours));
    assert_eq!(c.holder(1, "only0"), Some(only_theirs));
}

/// A paused active resumes next to the node that replaced it: it must not
/// be offered the role while it would refuse it, nobody bounces clients,
/// and the cluster is never without an active.
#[test]
fn a_resumed_active_is_not_offered_the_role_and_nobody_redirects_in_a_loop() {
    let mut c = elected(2);
    c.frozen[0] = true;
    c.run(TIMEOUT + 3 * HEARTBEAT);
    assert_eq!(c.node(1).role(), NodeRole::Active);
    c.frozen[0] = false;
    let mut without_active = 0;
    for _ in 0..4 * TIMEOUT {
        c.step();
        assert_no_redirect_loop(&c);
        if c.actives().is_empty() {
            without_active += 1;
        }
    }
    assert_eq!(without_active, 0, "ms without an active after the resume");
    // Once it has run for a while, node 0 takes the role back.
    assert_eq!(c.actives(), vec![0]);
}

/// A handoff the successor refuses (it just resumed) leaves the sender
/// serving at once, and the refusing node does not send clients back to it.
#[test]
fn a_refused_handoff_leaves_the_sender_serving() {
    let mut c = elected(2);
    let a = c.grant(0, "a", 10_000);
    // Node 1 stalls for a few heartbeats: not long enough for anyone to
    // promote, long enough to count as a pause.
    c.frozen[1] = true;
    c.run(3 * HEARTBEAT);
    c.frozen[1] = false;
    let now = c.now;
    c.node_mut(1).handle_tick(now);
    assert!(c.node_mut(0).handle_begin_handoff(now));
    c.deliver();
    assert_eq!(c.actives(), vec![0], "the sender did not serve on");
    assert_no_redirect_loop(&c);
    assert_eq!(c.node(0).handed_off_to(), None);
    assert!(c.grant(0, "b", 100) > a);
    // Not offered again while node 1 would refuse.
    let now = c.now;
    assert!(!c.node_mut(0).handle_begin_handoff(now));
}

/// A broken link dropped the handoff but not the heartbeat behind it: the
/// successor says it did not take the role, and the sender serves on at
/// once instead of waiting out the handoff timeout with nobody serving.
#[test]
fn a_handoff_dropped_on_the_way_leaves_the_sender_serving() {
    let mut c = elected(2);
    let a = c.grant(0, "a", 10_000);
    let now = c.now;
    assert!(c.node_mut(0).handle_begin_handoff(now));
    let output = c.node_mut(0).poll_transmits();
    assert!(output
        .iter()
        .any(|(to, m)| *to == 1 && matches!(m, PriorityMessage::HandoffPart { .. })));
    for (to, message) in output {
        if to == 1 && !matches!(message, PriorityMessage::HandoffPart { .. }) {
            c.node_mut(1).handle_message(0, message, now);
        }
    }
    assert_eq!(c.node(1).role(), NodeRole::Standby);
    assert_eq!(
        c.node(1).redirect_target(),
        None,
        "node 1 sends clients back"
    );
    c.deliver();
    assert_eq!(c.actives(), vec![0], "the sender did not serve on");
    assert_no_redirect_loop(&c);
    assert!(c.grant(0, "b", 100) > a);
    c.run(2 * HEARTBEAT);
    assert_eq!(c.node(1).redirect_target(), Some(0));
}

/// A standby that has not yet said whom it follows (it joined a moment
/// ago) still comes first in priority order: passing it over for node 2
/// would only have node 2 hand the role straight back to it.
#[test]
fn a_graceful_stop_hands_over_in_priority_order_to_a_standby_still_joining() {
    let mut c = elected(3);
    let a = c.grant(0, "a", 10_000);
    let now = c.now;
    let joining = Heartbeat {
        role: PeerRole::Standby,
        term: 0,
        seq: 0,
        last_token: 0,
        following: None,
    };
    c.node_mut(0)
        .handle_message(1, PriorityMessage::Heartbeat(joining), now);
    assert!(c.node_mut(0).handle_begin_handoff(now));
    assert_eq!(c.node(0).role(), NodeRole::HandingOff { to: 1 });
    c.deliver();
    assert_eq!(c.node(0).handed_off_to(), Some(1));
    crash_the_sender_and_check_node_1_holds(&mut c, &[("a", a)]);
}

/// Offers the role until a handoff is confirmed, as a graceful stop does.
fn stop_offering(c: &mut Cluster, i: NodeIndex) {
    for _ in 0..20 {
        let now = c.now;
        c.node_mut(i).handle_begin_handoff(now);
        c.run(HEARTBEAT);
        if c.node(i).handed_off_to().is_some() {
            return;
        }
    }
    panic!(
        "node {i} never handed its role over: {:?}",
        c.node(i).role()
    );
}

/// A graceful stop at a heal: the stopping node's link to the other active
/// was still being dialled, and dropped the handoff as stale; the
/// heartbeats behind it arrive. The other active says it did not take it,
/// so the sender serves on with its table and offers it again.
#[test]
fn a_handoff_dropped_before_another_active_is_refused_and_offered_again() {
    let mut c = elected(2);
    let (a, _) = two_actives_half_healed(&mut c, None);
    let now = c.now;
    assert!(c.node_mut(0).handle_begin_handoff(now));
    let output = c.node_mut(0).poll_transmits();
    c.cut.clear();
    for (to, message) in output {
        if to == 1 && !matches!(message, PriorityMessage::HandoffPart { .. }) {
            c.node_mut(1).handle_message(0, message, now);
        }
    }
    c.deliver();
    assert!(
        c.actives().contains(&0),
        "the sender did not serve on: {:?}",
        c.node(0).role()
    );
    assert_eq!(c.holder(0, "a"), Some(a), "the sender dropped its lock");
    stop_offering(&mut c, 0);
    crash_the_sender_and_check_node_1_holds(&mut c, &[("a", a)]);
    assert!(c.grant(1, "b", 100) > a);
}

/// A successor that went silent the moment the handoff was sent (a split)
/// cannot be followed: when the handoff times out the sender serves on with
/// its table instead of standing by, and hands it over once the split
/// heals.
#[test]
fn a_handoff_to_a_successor_gone_silent_leaves_the_sender_serving() {
    let mut c = elected(2);
    let a = c.grant(0, "a", 60_000);
    let now = c.now;
    assert!(c.node_mut(0).handle_begin_handoff(now));
    assert_eq!(c.node(0).role(), NodeRole::HandingOff { to: 1 });
    c.isolate(0);
    // Never standing by, not even for a moment: a graceful stop that sees
    // its node stand by has nothing left to hand and exits.
    let until = c.now + TIMEOUT + 2 * HEARTBEAT;
    while c.now < until {
        c.run(1);
        assert_ne!(
            c.node(0).role(),
            NodeRole::Standby,
            "the sender stood down after a handoff nobody took (t={})",
            c.now
        );
    }
    assert_eq!(c.actives(), vec![0, 1]);
    assert_eq!(c.holder(0, "a"), Some(a), "the sender dropped its lock");
    c.cut.clear();
    c.run(2 * HEARTBEAT);
    stop_offering(&mut c, 0);
    crash_the_sender_and_check_node_1_holds(&mut c, &[("a", a)]);
    assert!(c.grant(1, "b", 100) > a);
}

/// A node that stalls while handing off (SIGSTOP) may have been replaced
/// meanwhile: when it resumes it stands by instead of serving on.
#[test]
fn a_handoff_that_times_out_across_a_pause_stands_by() {
    let mut c = elected(3);
    c.grant(0, "a", 60_000);
    c.cut.push((0, 1));
    let now = c.now;
    assert!(c.node_mut(0).handle_begin_handoff(now));
    assert_eq!(c.node(0).role(), NodeRole::HandingOff { to: 1 });
    c.frozen[0] = true;
    c.run(3 * TIMEOUT);
    assert_eq!(c.actives(), vec![1], "nobody promoted during the pause");
    c.frozen[0] = false;
    c.run(HEARTBEAT);
    assert_eq!(c.node(0).role(), NodeRole::Standby);
    assert_eq!(c.actives(), vec![1]);
}
