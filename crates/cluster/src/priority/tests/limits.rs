//! Limits on what even an authenticated peer can do: full-sync
//! requests answered at most at the snapshot rate, tokens and terms past
//! the sanity bound refused whole, indexes and sequence numbers checked.

use super::*;
use baton_core::{Command, EncodedCommands, SnapshotLock};

use super::super::engine::{CLOCK_ALLOWANCE_MS, REFUSAL_LOG_EVERY_MS};

#[test]
fn a_flood_of_sync_requests_gets_a_bounded_number_of_snapshots() {
    let mut c = elected(3);
    c.grant(0, "a", 100_000);
    let before = c.traffic.snapshots[1];
    // Ten requests a millisecond for a second, while the cluster runs.
    let flood_ms = 1_000;
    for _ in 0..flood_ms {
        let now = c.now;
        for _ in 0..10 {
            c.node_mut(0)
                .handle_message(1, PriorityMessage::SyncRequest, now);
        }
        c.step();
    }
    let sent = c.traffic.snapshots[1] - before;
    // A burst of 2, then one per max(4 heartbeats, 200 ms).
    let bound = 2 + flood_ms as usize / 200;
    assert!(sent <= bound, "{sent} snapshots for 10,000 requests");
    assert!(sent >= 2, "the limit starved the peer: {sent} snapshots");
    // Node 2 asked for nothing and got nothing more.
    assert_eq!(c.actives(), vec![0]);
    assert_eq!(c.locks(1), c.locks(0));
}

/// What a refused message must leave as it was.
#[derive(Debug, PartialEq)]
struct Seen {
    role: NodeRole,
    following: Option<NodeIndex>,
    term: u64,
    locks: Vec<(Key, Token)>,
    last_token: Token,
    /// Version (bumped by any change) and the state it would persist.
    persisted: Option<(u64, super::super::engine::PersistedState)>,
}

fn seen(c: &Cluster, i: NodeIndex) -> Seen {
    let node = c.node(i);
    Seen {
        role: node.role(),
        following: node.following(),
        term: node.term(),
        locks: c.locks(i),
        last_token: node.table().last_token(),
        persisted: node.state_to_persist(u64::MAX, c.now),
    }
}

fn poisoned_messages(term: u64, bound: Token) -> Vec<PriorityMessage> {
    let over = bound + 1;
    let part = |last_token, token| TablePart {
        table: 1,
        piece: 0,
        last: true,
        last_token,
        locks: vec![SnapshotLock::plain(key("p"), token, 1_000)],
    };
    let beat = |term, last_token, role| {
        PriorityMessage::Heartbeat(Heartbeat {
            role,
            term,
            seq: 0,
            last_token,
            following: None,
        })
    };
    vec![
        beat(term, Token::MAX, PeerRole::Standby),
        beat(term, over, PeerRole::Active),
        beat(over, 5, PeerRole::Active),
        PriorityMessage::SnapshotPart {
            term: over,
            seq: 0,
            part: part(5, 5),
        },
        PriorityMessage::SnapshotPart {
            term,
            seq: 0,
            part: part(5, Token::MAX),
        },
        PriorityMessage::Commands {
            term,
            first_seq: 0,
            commands: [Command::RaiseTokenFloor { floor: Token::MAX }]
                .into_iter()
                .collect(),
        },
        PriorityMessage::Commands {
            term: over,
            first_seq: 0,
            commands: EncodedCommands::default(),
        },
        PriorityMessage::HandoffPart {
            part: part(Token::MAX, 5),
        },
        PriorityMessage::HandoffPart {
            part: part(5, over),
        },
    ]
}

/// The bound a node applies at `now` (tests run near the epoch).
fn bound_at(now: Millis) -> Token {
    (now + CLOCK_ALLOWANCE_MS + TIMEOUT) << 20
}

#[test]
fn a_token_or_term_beyond_the_bound_is_refused_whole() {
    for i in 0..poisoned_messages(0, 0).len() {
        let mut c = elected(3);
        c.grant(0, "a", 100_000);
        let term = c.node(0).term();
        let message = poisoned_messages(term, bound_at(c.now)).swap_remove(i);
        // To the active from a standby, to the standby from its active.
        for (to, from) in [(0, 1), (1, 0)] {
            let before = seen(&c, to);
            let now = c.now;
            c.node_mut(to).handle_message(from, message.clone(), now);
            assert_eq!(seen(&c, to), before, "message {i} changed node {to}");
            assert!(drain(c.node_mut(to)).is_empty());
            assert_eq!(c.node(to).refused_from(from), 1, "message {i}");
        }
        // Nobody's next floor is near the poison.
        c.crash(0);
        c.run(TIMEOUT + 3 * HEARTBEAT);
        assert_eq!(c.actives(), vec![1]);
        let next = c.grant(1, "b", 100);
        assert!(next < 1 << 40, "message {i}: token {next}");
    }
}

#[test]
fn values_just_under_the_bound_are_taken() {
    let mut c = elected(2);
    let now = c.now;
    let under = bound_at(now);
    let beat = Heartbeat {
        role: PeerRole::Standby,
        term: 0,
        seq: 0,
        last_token: under,
        following: Some(0),
    };
    c.node_mut(0)
        .handle_message(1, PriorityMessage::Heartbeat(beat), now);
    assert_eq!(c.node(0).refused_from(1), 0);
    // The active grants above what a standby reports.
    assert!(c.grant(0, "a", 100) > under);
}

/// A refused heartbeat is not even a sign of life: a peer that only
/// sends poison is dead to the others.
#[test]
fn a_peer_sending_only_refused_messages_is_not_heard() {
    let mut c = elected(3);
    c.crash(0);
    for _ in 0..TIMEOUT + 2 * HEARTBEAT {
        c.step();
        let now = c.now;
        let beat = Heartbeat {
            role: PeerRole::Active,
            term: Token::MAX,
            seq: 0,
            last_token: Token::MAX,
            following: None,
        };
        for i in 1..3 {
            c.node_mut(i)
                .handle_message(0, PriorityMessage::Heartbeat(beat.clone()), now);
        }
    }
    assert_eq!(c.actives(), vec![1]);
    assert!(c.grant(1, "a", 100) < 1 << 40);
}

#[test]
fn refusals_are_logged_at_most_once_a_minute_per_peer() {
    let mut c = elected(3);
    let now = c.now;
    let poison = poisoned_messages(0, bound_at(now)).swap_remove(0);
    for from in [1, 2] {
        for _ in 0..1_000 {
            c.node_mut(0).handle_message(from, poison.clone(), now);
        }
    }
    let node = c.node_mut(0);
    assert_eq!(node.refusal_log_lines(1), 1);
    assert_eq!(node.refusal_log_lines(2), 1);
    assert_eq!(node.refused_from(1), 1_000);
    let later = now + REFUSAL_LOG_EVERY_MS;
    node.handle_message(1, poison.clone(), later - 1);
    assert_eq!(node.refusal_log_lines(1), 1);
    node.handle_message(1, poison, later);
    assert_eq!(node.refusal_log_lines(1), 2);
}

#[test]
fn a_heartbeat_naming_a_node_beyond_the_peer_list_is_refused() {
    let mut c = elected(3);
    for following in [Some(3), Some(usize::MAX), Some(1)] {
        let beat = Heartbeat {
            role: PeerRole::HandingOff,
            term: c.node(0).term(),
            seq: 0,
            last_token: 5,
            following,
        };
        let before = seen(&c, 2);
        let now = c.now;
        c.node_mut(2)
            .handle_message(1, PriorityMessage::Heartbeat(beat), now);
        assert_eq!(seen(&c, 2), before);
    }
    assert_eq!(c.node(2).refused_from(1), 3);
    c.run(2 * HEARTBEAT);
    assert_eq!(c.node(2).redirect_target(), Some(0));
}

#[test]
fn commands_numbered_past_the_end_of_the_sequence_are_refused() {
    let mut c = elected(2);
    let now = c.now;
    let message = PriorityMessage::Commands {
        term: c.node(1).term(),
        first_seq: u64::MAX,
        commands: [Command::RaiseTokenFloor { floor: 5 }]
            .into_iter()
            .collect(),
    };
    let before = seen(&c, 1);
    c.node_mut(1).handle_message(0, message, now);
    assert_eq!(seen(&c, 1), before);
    assert_eq!(c.node(1).refused_from(0), 1);
}

/// Within one term an active's count of commands only rises: a
/// heartbeat counting fewer than the standby applied means the copy
/// cannot be trusted, and the standby asks for a new one.
#[test]
fn a_heartbeat_whose_count_went_backwards_makes_the_standby_resync() {
    let mut c = elected(2);
    c.grant(0, "a", 10_000);
    c.grant(0, "b", 10_000);
    let now = c.now;
    let beat = Heartbeat {
        role: PeerRole::Active,
        term: c.node(0).term(),
        seq: 0,
        last_token: c.node(0).table().last_token(),
        following: None,
    };
    let node = c.node_mut(1);
    node.poll_transmits();
    node.handle_message(0, PriorityMessage::Heartbeat(beat), now);
    node.handle_tick(now + 1);
    let asked = node
        .poll_transmits()
        .into_iter()
        .any(|(to, m)| to == 0 && m == PriorityMessage::SyncRequest);
    assert!(asked, "the standby kept a copy its active does not count");
}
