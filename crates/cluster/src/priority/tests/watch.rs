//! The seam a graceful stop uses (`PriorityLockNode::handoff_step` and the
//! role watch): each step that changes what the stop waits for wakes it,
//! so the shell never polls.

use baton_server::Mailbox;

use super::super::lock_node::{HandoffStep, PriorityLockNode};
use super::*;

/// Hands everything each side says to the other, at `now`, until both
/// are quiet.
fn exchange(active: &mut PriorityLockNode, standby: &mut PriorityNode<Mailbox>, now: Millis) {
    for _ in 0..100 {
        let out = active.take_transmits();
        let back = standby.poll_transmits();
        if out.is_empty() && back.is_empty() {
            return;
        }
        for (to, message) in out {
            if to == 1 {
                standby.handle_message(0, message, now);
            }
        }
        let back: Vec<_> = back
            .into_iter()
            .filter(|(to, _)| *to == 0)
            .map(|(_, m)| m)
            .collect();
        active.receive(1, back, now, &mut Vec::new());
    }
    panic!("the two nodes kept talking");
}

#[test]
fn a_graceful_stop_is_woken_by_each_change_it_waits_for() {
    let mut active = PriorityLockNode::new(PriorityNode::new(config(0, 2), 0));
    let mut standby: PriorityNode<Mailbox> = PriorityNode::new(config(1, 2), 0);
    let mut role = active.watch_role();
    let mut now = 0;
    while active.engine().role() != NodeRole::Active || standby.following() != Some(0) {
        baton_server::LockNode::tick(&mut active, now, &mut Vec::new());
        standby.handle_tick(now);
        exchange(&mut active, &mut standby, now);
        now += 1;
        assert!(now < 10 * TIMEOUT, "no active");
    }
    exchange(&mut active, &mut standby, now);
    role.mark_unchanged();
    // The first step hands over: the role changes, the watch says so.
    let step = active.handoff_step(now, &mut Vec::new());
    assert_eq!(step, HandoffStep::Waiting);
    assert!(role.has_changed().unwrap());
    assert_eq!(
        role.borrow_and_update().role,
        NodeRole::HandingOff { to: 1 }
    );
    // Nothing changes until the successor answers.
    assert_eq!(
        active.handoff_step(now, &mut Vec::new()),
        HandoffStep::Waiting
    );
    assert!(!role.has_changed().unwrap());
    exchange(&mut active, &mut standby, now);
    assert!(role.has_changed().unwrap(), "the taken handoff woke nobody");
    let view = *role.borrow_and_update();
    assert_eq!(
        (view.role, view.handed_off_to),
        (NodeRole::Standby, Some(1))
    );
    assert_eq!(
        active.handoff_step(now, &mut Vec::new()),
        HandoffStep::Done(1)
    );
    assert_eq!(standby.role(), NodeRole::Active);
}
