//! Exact-output tests, in the style of openraft's engine tests: one engine
//! in a known state, one input, then every message and event it produced,
//! compared whole. Full-size messages (every table in one piece) and a
//! clock near the epoch.

use baton_core::{Acquire, Command, SnapshotLock, WaiterId};

use super::super::engine::wall_floor;
use super::super::token_floor::TokenBlocks;
use super::*;

/// The term a lone node `me` of `n` takes when it promotes at `now`: the
/// margin is below the wall-clock floor there (`wall_at_zero` is 0), so it
/// is that floor, moved into the node's blocks.
fn promoted_term(me: NodeIndex, n: usize, now: Millis) -> u64 {
    let term = TokenBlocks::new(me, n).wall_floor(wall_floor(now));
    assert!(term > TOKEN_MARGIN, "the margin would decide");
    term
}

/// Node `me` of `n`, full-size messages, started at 0 and ticked every
/// heartbeat to `until` (no peer heard: a lone node promotes at the end
/// of its quiet period), with everything it said so far taken.
fn lone(me: NodeIndex, n: usize, until: Millis) -> PriorityNode<u64> {
    let mut node = PriorityNode::new(config(me, n), 0);
    let mut now = 0;
    while now <= until {
        node.handle_tick(now);
        now += HEARTBEAT;
    }
    node.poll_transmits();
    drain(&mut node);
    node
}

/// Node `me` of 2, active since the end of its quiet period, holding
/// `a` (handle 7, the term's first token) with a waiter on it (handle 8),
/// both from `TIMEOUT + 1`, everything it said so far taken.
pub(super) fn active_with_a_waiter(me: NodeIndex) -> (PriorityNode<u64>, WaiterId) {
    let mut node = lone(me, 2, TIMEOUT);
    let now = TIMEOUT + 1;
    let term = node.term();
    let held = node.handle_acquire(Acquire::plain(key("a"), 0, 1_000), now, 7);
    assert_eq!(held, Ok(AcquireOutcome::Granted { token: term + 1 }));
    let queued = node.handle_acquire(Acquire::plain(key("a"), 5_000, 1_000), now, 8);
    let Ok(AcquireOutcome::Queued { id }) = queued else {
        panic!("not queued: {queued:?}");
    };
    node.poll_transmits();
    (node, id)
}

/// The one event of [`active_with_a_waiter`]'s node after it stopped
/// serving: its waiter sent to `to`.
pub(super) fn assert_only_waiter_moved(
    node: &mut PriorityNode<u64>,
    id: WaiterId,
    to: Option<NodeIndex>,
) {
    let moved = Event::Moved {
        id,
        handle: 8,
        key: key("a"),
        to: NotServing::redirect(to),
    };
    assert_event(node, moved);
    assert_no_event(node);
}

/// `Event` has no `PartialEq` (its handle may be a channel): compared by
/// its full `Debug` form, which names every field.
pub(super) fn assert_event(node: &mut PriorityNode<u64>, expected: Event<u64>) {
    let got = node.poll_event().map(|e| format!("{e:?}"));
    assert_eq!(got, Some(format!("{expected:?}")));
}

pub(super) fn assert_no_event(node: &mut PriorityNode<u64>) {
    let got = node.poll_event().map(|e| format!("{e:?}"));
    assert_eq!(got, None);
}

pub(super) fn heartbeat(
    role: PeerRole,
    term: u64,
    last_token: u64,
    following: Option<NodeIndex>,
) -> Heartbeat {
    Heartbeat {
        role,
        term,
        seq: 0,
        last_token,
        following,
    }
}

/// The one-piece table of a node that never sent one before.
fn whole(last_token: u64, locks: Vec<SnapshotLock>) -> TablePart {
    TablePart {
        table: 0,
        piece: 0,
        last: true,
        last_token,
        locks,
    }
}

#[test]
fn a_fresh_node_says_it_is_a_standby_that_follows_nobody() {
    let mut node: PriorityNode<u64> = PriorityNode::new(config(0, 3), 0);
    node.handle_tick(0);
    let beat = heartbeat(PeerRole::Standby, 0, 0, None);
    assert_eq!(
        node.poll_transmits(),
        vec![
            (1, PriorityMessage::Heartbeat(beat.clone())),
            (2, PriorityMessage::Heartbeat(beat)),
        ]
    );
    assert_no_event(&mut node);
    assert_eq!(node.poll_timeout(), HEARTBEAT);
}

#[test]
fn a_lone_node_promotes_at_the_end_of_its_quiet_period_above_the_clock() {
    let mut node: PriorityNode<u64> = PriorityNode::new(config(0, 2), 0);
    for now in (0..TIMEOUT).step_by(HEARTBEAT as usize) {
        node.handle_tick(now);
    }
    node.poll_transmits();
    node.handle_tick(TIMEOUT);
    assert_eq!(node.role(), NodeRole::Active);
    let term = promoted_term(0, 2, TIMEOUT);
    let beat = heartbeat(PeerRole::Active, term, term, None);
    assert_eq!(
        node.poll_transmits(),
        vec![(1, PriorityMessage::Heartbeat(beat))]
    );
    assert_no_event(&mut node);
}

#[test]
fn a_standby_follows_the_active_it_hears_and_asks_it_for_its_table() {
    let mut node = lone(1, 2, 2 * HEARTBEAT);
    let active = heartbeat(PeerRole::Active, TOKEN_MARGIN, TOKEN_MARGIN + 3, None);
    let now = 2 * HEARTBEAT + 1;
    node.handle_message(0, PriorityMessage::Heartbeat(active), now);
    assert_eq!(node.following(), Some(0));
    // The request goes out at the next tick, not on the heartbeat.
    assert_eq!(node.poll_transmits(), vec![]);
    node.handle_tick(now + 1);
    assert_eq!(
        node.poll_transmits(),
        vec![(0, PriorityMessage::SyncRequest)]
    );
    // A client is sent to the active; nothing else happens.
    let answer = node.handle_acquire(Acquire::plain(key("a"), 0, 100), now + 1, 7);
    assert_eq!(answer, Err(NotServing::redirect(Some(0))));
    assert_eq!(node.poll_transmits(), vec![]);
    assert_no_event(&mut node);
}

#[test]
fn an_active_answers_a_sync_request_with_its_table_then_sends_its_commands() {
    let mut node = lone(0, 2, TIMEOUT);
    let term = promoted_term(0, 2, TIMEOUT);
    assert_eq!(node.term(), term);
    let now = TIMEOUT + 1;
    node.handle_message(1, PriorityMessage::SyncRequest, now);
    assert_eq!(
        node.poll_transmits(),
        vec![(
            1,
            PriorityMessage::SnapshotPart {
                term,
                seq: 0,
                part: whole(term, Vec::new()),
            }
        )]
    );
    let granted = node.handle_acquire(Acquire::plain(key("a"), 0, 1_000), now, 7);
    assert_eq!(granted, Ok(AcquireOutcome::Granted { token: term + 1 }));
    assert_eq!(
        node.poll_transmits(),
        vec![(
            1,
            PriorityMessage::Commands {
                term,
                first_seq: 0,
                commands: [Command::Grant {
                    key: key("a"),
                    lease_ms: 1_000,
                }]
                .into_iter()
                .collect(),
            }
        )]
    );
    assert_no_event(&mut node);
}

#[test]
fn a_release_grants_the_waiter_and_replicates_both_in_order() {
    let mut node = lone(0, 2, TIMEOUT);
    let now = TIMEOUT + 1;
    node.handle_message(1, PriorityMessage::SyncRequest, now);
    let term = promoted_term(0, 2, TIMEOUT);
    let first = term + 1;
    assert_eq!(
        node.handle_acquire(Acquire::plain(key("a"), 0, 1_000), now, 7),
        Ok(AcquireOutcome::Granted { token: first })
    );
    let queued = node.handle_acquire(Acquire::plain(key("a"), 5_000, 1_000), now, 8);
    let Ok(AcquireOutcome::Queued { id }) = queued else {
        panic!("not queued: {queued:?}");
    };
    node.poll_transmits();
    assert_eq!(
        node.handle_release(&key("a"), first, now + 1),
        Ok(Outcome::Released)
    );
    assert_event(
        &mut node,
        Event::Granted {
            id,
            handle: 8,
            key: key("a"),
            token: first + 1,
        },
    );
    assert_no_event(&mut node);
    assert_eq!(
        node.poll_transmits(),
        vec![(
            1,
            PriorityMessage::Commands {
                term,
                first_seq: 1,
                commands: [
                    Command::Release {
                        key: key("a"),
                        token: first,
                    },
                    Command::Grant {
                        key: key("a"),
                        lease_ms: 1_000,
                    },
                ]
                .into_iter()
                .collect(),
            }
        )]
    );
}

#[test]
fn an_active_that_hears_a_higher_priority_active_hands_it_its_table_and_moves_its_waiters() {
    let (mut node, id) = active_with_a_waiter(1);
    let term = node.term();
    assert_eq!(term, promoted_term(1, 2, TIMEOUT));
    let now = TIMEOUT + 1;
    let higher = heartbeat(PeerRole::Active, TOKEN_MARGIN, TOKEN_MARGIN, None);
    node.handle_message(0, PriorityMessage::Heartbeat(higher), now + 1);
    let lock = SnapshotLock::plain(key("a"), term + 1, 999);
    assert_eq!(
        node.poll_transmits(),
        vec![(
            0,
            PriorityMessage::HandoffPart {
                part: whole(term + 1, vec![lock]),
            }
        )]
    );
    assert_only_waiter_moved(&mut node, id, Some(0));
    assert_eq!(node.role(), NodeRole::Standby);
    assert_eq!(node.following(), Some(0));
}

#[test]
fn a_handoff_announced_but_never_received_is_refused_once() {
    let mut node = lone(1, 2, 2 * HEARTBEAT);
    let handing = heartbeat(PeerRole::HandingOff, TOKEN_MARGIN, TOKEN_MARGIN, Some(1));
    let now = 2 * HEARTBEAT + 1;
    node.handle_message(0, PriorityMessage::Heartbeat(handing.clone()), now);
    assert_eq!(
        node.poll_transmits(),
        vec![(0, PriorityMessage::HandoffRefused)]
    );
    // Said once: the next announcement gets no second answer.
    node.handle_message(0, PriorityMessage::Heartbeat(handing), now + 1);
    assert_eq!(node.poll_transmits(), vec![]);
    assert_eq!(node.redirect_target(), None);
}

#[test]
fn a_cancelled_waiter_gets_no_event() {
    let mut node = lone(0, 2, TIMEOUT);
    let now = TIMEOUT + 1;
    let first = node.handle_acquire(Acquire::plain(key("a"), 0, 1_000), now, 7);
    assert!(matches!(first, Ok(AcquireOutcome::Granted { .. })));
    let queued = node.handle_acquire(Acquire::plain(key("a"), 5, 1_000), now, 8);
    let Ok(AcquireOutcome::Queued { id }) = queued else {
        panic!("not queued: {queued:?}");
    };
    node.handle_cancel(id);
    assert_eq!(node.waiter_count(), 0);
    // Its wait would have ended by now: no TimedOut for it.
    node.handle_tick(now + HEARTBEAT);
    assert_no_event(&mut node);
}

#[test]
fn every_synced_standby_gets_the_same_commands_in_the_peer_order() {
    let mut node = lone(0, 3, TIMEOUT);
    let term = promoted_term(0, 3, TIMEOUT);
    let now = TIMEOUT + 1;
    node.handle_message(2, PriorityMessage::SyncRequest, now);
    node.handle_message(1, PriorityMessage::SyncRequest, now);
    node.poll_transmits();
    let first = term + 1;
    assert_eq!(
        node.handle_acquire(Acquire::plain(key("a"), 0, 1_000), now, 7),
        Ok(AcquireOutcome::Granted { token: first })
    );
    assert_eq!(
        node.handle_release(&key("a"), first, now),
        Ok(Outcome::Released)
    );
    let batch = PriorityMessage::Commands {
        term,
        first_seq: 0,
        commands: [
            Command::Grant {
                key: key("a"),
                lease_ms: 1_000,
            },
            Command::Release {
                key: key("a"),
                token: first,
            },
        ]
        .into_iter()
        .collect(),
    };
    assert_eq!(node.poll_transmits(), vec![(1, batch.clone()), (2, batch)]);
    assert_eq!(node.poll_transmits(), Vec::new());
}
