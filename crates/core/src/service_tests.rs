//! Unit tests of the lock service: its rules applied at once.

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test

use super::*;

fn key(s: &str) -> Key {
    Key::try_from(s).unwrap()
}

fn granted(outcome: AcquireOutcome) -> Token {
    match outcome {
        AcquireOutcome::Granted { token } => token,
        other => panic!("expected a grant, got {other:?}"),
    }
}

fn queued(outcome: AcquireOutcome) -> WaiterId {
    match outcome {
        AcquireOutcome::Queued { id } => id,
        other => panic!("expected to queue, got {other:?}"),
    }
}

/// Events as comparable tuples: (id, handle, key, Some(token) if granted).
fn summary(events: &[Event<u32>]) -> Vec<(WaiterId, u32, String, Option<Token>)> {
    events
        .iter()
        .map(|e| match e {
            Event::Granted {
                id,
                handle,
                key,
                token,
            } => (*id, *handle, key.to_string(), Some(*token)),
            Event::TimedOut { id, handle, key } => (*id, *handle, key.to_string(), None),
            other => panic!("the service moved or answered late: {other:?}"),
        })
        .collect()
}

#[test]
fn a_free_key_is_granted_at_once() {
    let mut s = LockService::<u32>::new();
    let t = granted(s.acquire(Acquire::plain(key("a"), 0, 100), 5, 1));
    assert_eq!(t, 1);
    assert_eq!(s.waiter_count(), 0);
    assert_eq!(s.table().holder(&key("a")).map(|h| h.expires_at), Some(105));
    assert_eq!(s.next_deadline(), Some(105));
}

#[test]
fn release_hands_the_key_to_waiters_in_order() {
    let mut s = LockService::<u32>::new();
    let t1 = granted(s.acquire(Acquire::plain(key("a"), 0, 100), 0, 1));
    let w2 = queued(s.acquire(Acquire::plain(key("a"), 0, 200), 1, 2));
    let w3 = queued(s.acquire(Acquire::plain(key("a"), 0, 300), 2, 3));
    assert_eq!(s.waiter_count(), 2);
    let mut events = Vec::new();
    assert_eq!(s.release(&key("a"), t1, 10, &mut events), Outcome::Released);
    assert_eq!(summary(&events), vec![(w2, 2, "a".into(), Some(2))]);
    // The waiter's own lease, counted from the handoff.
    assert_eq!(
        s.table().holder(&key("a")),
        Some(&crate::Holder {
            token: 2,
            expires_at: 210
        })
    );
    events.clear();
    assert_eq!(s.release(&key("a"), 2, 20, &mut events), Outcome::Released);
    assert_eq!(summary(&events), vec![(w3, 3, "a".into(), Some(3))]);
    events.clear();
    assert_eq!(s.release(&key("a"), 3, 30, &mut events), Outcome::Released);
    assert!(events.is_empty());
    assert!(s.table().is_empty());
    assert_eq!(s.waiter_count(), 0);
}

#[test]
fn a_new_acquire_never_overtakes_a_waiter() {
    let mut s = LockService::<u32>::new();
    let t1 = granted(s.acquire(Acquire::plain(key("a"), 0, 100), 0, 1));
    let w2 = queued(s.acquire(Acquire::plain(key("a"), 0, 100), 0, 2));
    let mut events = Vec::new();
    s.release(&key("a"), t1, 1, &mut events);
    // The key passed to w2 inside release, so a newcomer queues.
    let w3 = queued(s.acquire(Acquire::plain(key("a"), 0, 100), 1, 3));
    assert!(w3 > w2);
    assert_eq!(summary(&events), vec![(w2, 2, "a".into(), Some(2))]);
}

#[test]
fn stale_release_and_renew_change_nothing() {
    let mut s = LockService::<u32>::new();
    let t1 = granted(s.acquire(Acquire::plain(key("a"), 0, 100), 0, 1));
    queued(s.acquire(Acquire::plain(key("a"), 0, 100), 0, 2));
    s.enable_journal();
    let before = s.table().clone();
    let mut events = Vec::new();
    assert_eq!(
        s.release(&key("a"), t1 + 1, 5, &mut events),
        Outcome::NotFound
    );
    assert_eq!(s.release(&key("b"), t1, 5, &mut events), Outcome::NotFound);
    assert_eq!(
        s.renew(&key("a"), t1 + 1, 500, 5, &mut events),
        Outcome::NotFound
    );
    assert!(events.is_empty());
    assert_eq!(s.table(), &before);
    assert_eq!(s.waiter_count(), 1);
    assert!(s.drain_journal().is_empty());
    assert_eq!(
        s.renew(&key("a"), t1, 500, 5, &mut events),
        Outcome::Renewed
    );
    assert_eq!(s.table().holder(&key("a")).map(|h| h.expires_at), Some(505));
}

/// A held key whose lease ends at 100, a waiter behind it, the journal on.
fn lease_ending_at_100_with_a_waiter() -> (LockService<u32>, Token, WaiterId) {
    let mut s = LockService::<u32>::new();
    let t1 = granted(s.acquire(Acquire::plain(key("a"), 0, 100), 0, 1));
    let w2 = queued(s.acquire(Acquire::plain(key("a"), 0, 50), 1, 2));
    s.enable_journal();
    (s, t1, w2)
}

/// What a request naming a lapsed grant must leave: the grant expired
/// (journaled so), the key passed on to the waiter with a new token.
fn check_expired_and_handed_on(s: &mut LockService<u32>, t1: Token, at: Millis) {
    let handed = Command::Grant {
        key: key("a"),
        lease_ms: 50,
    };
    let expire = Command::Expire {
        key: key("a"),
        token: t1,
    };
    assert_eq!(journaled(s), vec![expire, handed]);
    let holder = s.table().holder(&key("a")).copied();
    let expected = crate::Holder {
        token: t1 + 1,
        expires_at: at + 50,
    };
    assert_eq!(holder, Some(expected));
    assert_eq!(s.waiter_count(), 0);
}

#[test]
fn a_renew_at_its_lease_end_is_refused_and_hands_the_key_on() {
    let (mut s, t1, w2) = lease_ending_at_100_with_a_waiter();
    let mut events = Vec::new();
    // At 99 the lease still runs: renewed.
    assert_eq!(s.renew(&key("a"), t1, 1, 99, &mut events), Outcome::Renewed);
    assert!(events.is_empty());
    journaled(&mut s);
    // It now ends at 100. The tick has not come, yet at 100 the lease
    // has ended: the renewal finds no live grant and applies the expiry.
    assert_eq!(
        s.renew(&key("a"), t1, 1_000, 100, &mut events),
        Outcome::NotFound
    );
    assert_eq!(summary(&events), vec![(w2, 2, "a".into(), Some(t1 + 1))]);
    check_expired_and_handed_on(&mut s, t1, 100);
    // Later requests with the old token stay refused and change nothing.
    let mut later = Vec::new();
    assert_eq!(
        s.renew(&key("a"), t1, 1_000, 101, &mut later),
        Outcome::NotFound
    );
    assert!(later.is_empty() && journaled(&mut s).is_empty());
}

#[test]
fn a_release_just_past_its_lease_end_is_refused_and_hands_the_key_on() {
    let (mut s, t1, w2) = lease_ending_at_100_with_a_waiter();
    let mut events = Vec::new();
    assert_eq!(
        s.release(&key("a"), t1, 101, &mut events),
        Outcome::NotFound
    );
    assert_eq!(summary(&events), vec![(w2, 2, "a".into(), Some(t1 + 1))]);
    check_expired_and_handed_on(&mut s, t1, 101);
    // The tick finds nothing left to expire.
    s.tick(101, &mut events);
    assert_eq!(events.len(), 1);
}

#[test]
fn a_value_set_past_its_lease_end_is_refused_and_hands_the_key_on() {
    let (mut s, t1, w2) = lease_ending_at_100_with_a_waiter();
    let mut events = Vec::new();
    let value = crate::HolderValue::try_from("v").ok();
    assert_eq!(
        s.set_value(&key("a"), t1, value, 100, &mut events),
        Outcome::NotFound
    );
    assert_eq!(summary(&events), vec![(w2, 2, "a".into(), Some(t1 + 1))]);
    check_expired_and_handed_on(&mut s, t1, 100);
}

#[test]
fn a_lapsed_grant_without_waiters_frees_its_key() {
    let mut s = LockService::<u32>::new();
    let t1 = granted(s.acquire(Acquire::plain(key("a"), 0, 100), 0, 1));
    let mut events = Vec::new();
    assert_eq!(
        s.renew(&key("a"), t1, 100, 150, &mut events),
        Outcome::NotFound
    );
    assert!(events.is_empty());
    assert!(s.table().is_empty());
    assert_eq!(s.next_deadline(), None);
    let t2 = granted(s.acquire(Acquire::plain(key("a"), 0, 100), 150, 2));
    assert!(t2 > t1);
}

#[test]
fn a_timed_out_waiter_is_never_granted() {
    let mut s = LockService::<u32>::new();
    let t1 = granted(s.acquire(Acquire::plain(key("a"), 0, 100), 0, 1));
    let w2 = queued(s.acquire(Acquire::plain(key("a"), 10, 100), 0, 2));
    let w3 = queued(s.acquire(Acquire::plain(key("a"), 0, 100), 0, 3));
    assert_eq!(s.next_deadline(), Some(10));
    // Released exactly at w2's deadline, before any tick saw it.
    let mut events = Vec::new();
    s.release(&key("a"), t1, 10, &mut events);
    assert_eq!(
        summary(&events),
        vec![(w2, 2, "a".into(), None), (w3, 3, "a".into(), Some(2))]
    );
}

#[test]
fn tick_times_out_waiters_then_expires_leases() {
    let mut s = LockService::<u32>::new();
    granted(s.acquire(Acquire::plain(key("a"), 0, 50), 0, 1));
    let w2 = queued(s.acquire(Acquire::plain(key("a"), 50, 100), 0, 2));
    let w3 = queued(s.acquire(Acquire::plain(key("a"), 60, 100), 0, 3));
    let mut events = Vec::new();
    s.tick(49, &mut events);
    assert!(events.is_empty());
    s.tick(50, &mut events);
    // w2's wait ran out at the very moment the lease did: it is out
    // first, so w3 gets the key.
    assert_eq!(
        summary(&events),
        vec![(w2, 2, "a".into(), None), (w3, 3, "a".into(), Some(2))]
    );
    assert_eq!(s.table().holder(&key("a")).map(|h| h.expires_at), Some(150));
    assert_eq!(s.next_deadline(), Some(150));
}

#[test]
fn expiries_count_the_leases_ticks_end_not_releases_or_waits() {
    let mut s = LockService::<u32>::new();
    let mut events = Vec::new();
    granted(s.acquire(Acquire::plain(key("a"), 0, 10), 0, 1));
    queued(s.acquire(Acquire::plain(key("a"), 5, 100), 0, 2));
    queued(s.acquire(Acquire::plain(key("a"), 0, 100), 0, 3));
    let b = granted(s.acquire(Acquire::plain(key("b"), 0, 10), 0, 4));
    s.tick(6, &mut events);
    assert_eq!(s.release(&key("b"), b, 7, &mut events), Outcome::Released);
    assert_eq!(s.expiries(), 0, "a wait ran out, a grant was released");
    s.tick(10, &mut events);
    assert_eq!(s.expiries(), 1, "a's lease ended, handed on to 3");
    s.tick(110, &mut events);
    assert_eq!(s.expiries(), 2);
    s.tick(500, &mut events);
    assert_eq!(s.expiries(), 2);
}

#[test]
fn tick_expires_chains_of_short_leases() {
    let mut s = LockService::<u32>::new();
    granted(s.acquire(Acquire::plain(key("a"), 0, 10), 0, 1));
    let w2 = queued(s.acquire(Acquire::plain(key("a"), 0, 10), 0, 2));
    let w3 = queued(s.acquire(Acquire::plain(key("a"), 0, 100), 0, 3));
    let mut events = Vec::new();
    // Long after both short leases: the first passes to w2 at 30, whose
    // lease (counted from 30) is not yet due.
    s.tick(30, &mut events);
    assert_eq!(summary(&events), vec![(w2, 2, "a".into(), Some(2))]);
    events.clear();
    s.tick(40, &mut events);
    assert_eq!(summary(&events), vec![(w3, 3, "a".into(), Some(3))]);
    assert_eq!(s.waiter_count(), 0);
}

#[test]
fn cancel_takes_a_waiter_out_of_line() {
    let mut s = LockService::<u32>::new();
    let t1 = granted(s.acquire(Acquire::plain(key("a"), 0, 100), 0, 1));
    let w2 = queued(s.acquire(Acquire::plain(key("a"), 0, 100), 0, 2));
    let w3 = queued(s.acquire(Acquire::plain(key("a"), 0, 100), 0, 3));
    assert!(s.cancel(w2));
    assert!(!s.cancel(w2));
    let mut events = Vec::new();
    s.release(&key("a"), t1, 1, &mut events);
    assert_eq!(summary(&events), vec![(w3, 3, "a".into(), Some(2))]);
    assert!(!s.cancel(w3));
}

#[test]
fn a_ghost_grant_released_by_the_caller_passes_on() {
    let mut s = LockService::<u32>::new();
    let t1 = granted(s.acquire(Acquire::plain(key("a"), 0, 100), 0, 1));
    let w2 = queued(s.acquire(Acquire::plain(key("a"), 0, 100), 0, 2));
    let w3 = queued(s.acquire(Acquire::plain(key("a"), 0, 100), 0, 3));
    let mut events = Vec::new();
    s.release(&key("a"), t1, 1, &mut events);
    let Some(Event::Granted {
        id, token, key: k, ..
    }) = events.pop()
    else {
        panic!("expected a grant");
    };
    assert_eq!(id, w2);
    // w2's connection is gone: the caller releases its grant.
    s.release(&k, token, 1, &mut events);
    assert_eq!(summary(&events), vec![(w3, 3, "a".into(), Some(3))]);
}

#[test]
fn next_deadline_is_the_earliest_of_leases_and_waits() {
    let mut s = LockService::<u32>::new();
    assert_eq!(s.next_deadline(), None);
    granted(s.acquire(Acquire::plain(key("a"), 0, 100), 0, 1));
    assert_eq!(s.next_deadline(), Some(100));
    queued(s.acquire(Acquire::plain(key("a"), 40, 100), 0, 2));
    assert_eq!(s.next_deadline(), Some(40));
    queued(s.acquire(Acquire::plain(key("a"), 0, 100), 0, 3));
    assert_eq!(s.next_deadline(), Some(40));
    let mut events = Vec::new();
    s.tick(40, &mut events);
    assert_eq!(s.next_deadline(), Some(100));
}

/// The commands `s` journaled since the last drain, decoded.
fn journaled(s: &mut LockService<u32>) -> Vec<Command> {
    s.drain_journal().iter().map(Result::unwrap).collect()
}

#[test]
fn the_journal_replays_into_an_equal_table() {
    let mut s = LockService::<u32>::new();
    assert!(s.drain_journal().is_empty());
    granted(s.acquire(Acquire::plain(key("x"), 0, 5), 0, 0));
    assert!(s.drain_journal().is_empty());
    s.enable_journal();
    let mut replica = s.table().clone();
    let mut events = Vec::new();
    let mut steps: Vec<(Millis, Vec<Command>)> = Vec::new();
    let t = granted(s.acquire(Acquire::plain(key("a"), 0, 100), 1, 1));
    steps.push((1, journaled(&mut s)));
    queued(s.acquire(Acquire::plain(key("a"), 0, 70), 2, 2));
    steps.push((2, journaled(&mut s)));
    s.raise_token_floor(50);
    steps.push((3, journaled(&mut s)));
    s.release(&key("a"), t, 4, &mut events);
    steps.push((4, journaled(&mut s)));
    s.renew(&key("a"), 51, 30, 5, &mut events);
    steps.push((5, journaled(&mut s)));
    s.tick(40, &mut events);
    steps.push((40, journaled(&mut s)));
    assert_eq!(
        steps
            .iter()
            .flat_map(|(_, cmds)| cmds.clone())
            .collect::<Vec<_>>(),
        vec![
            Command::Grant {
                key: key("a"),
                lease_ms: 100
            },
            Command::RaiseTokenFloor { floor: 50 },
            Command::Release {
                key: key("a"),
                token: 2
            },
            Command::Grant {
                key: key("a"),
                lease_ms: 70
            },
            Command::Renew {
                key: key("a"),
                token: 51,
                lease_ms: 30
            },
            Command::Expire {
                key: key("x"),
                token: 1
            },
            Command::Expire {
                key: key("a"),
                token: 51
            },
        ]
    );
    for (now, cmds) in &steps {
        for cmd in cmds {
            replica.apply(cmd, *now);
        }
    }
    assert_eq!(&replica, s.table());
    assert_eq!(replica.last_token(), 51);
}

#[test]
fn a_promoted_table_keeps_its_grants_and_tokens() {
    let mut old = LockTable::new();
    old.apply(
        &Command::Grant {
            key: key("a"),
            lease_ms: 100,
        },
        0,
    );
    let mut s = LockService::<u32>::from_table(old);
    let w = queued(s.acquire(Acquire::plain(key("a"), 0, 10), 0, 1));
    assert_eq!(granted(s.acquire(Acquire::plain(key("b"), 0, 10), 0, 2)), 2);
    let mut events = Vec::new();
    s.tick(100, &mut events);
    assert_eq!(summary(&events), vec![(w, 1, "a".into(), Some(3))]);
}

#[test]
fn drain_waiters_takes_everyone_out() {
    let mut s = LockService::<u32>::new();
    granted(s.acquire(Acquire::plain(key("a"), 0, 100), 0, 1));
    let w2 = queued(s.acquire(Acquire::plain(key("a"), 10, 100), 0, 2));
    let w3 = queued(s.acquire(Acquire::plain(key("a"), 0, 100), 0, 3));
    let drained: Vec<_> = s.drain_waiters().into_iter().map(|w| w.id).collect();
    assert_eq!(drained, vec![w2, w3]);
    assert_eq!(s.waiter_count(), 0);
    assert_eq!(s.next_deadline(), Some(100));
    let mut events = Vec::new();
    s.tick(100, &mut events);
    assert!(events.is_empty());
    assert!(s.table().is_empty());
}

#[test]
fn an_exhausted_token_space_queues_instead_of_granting() {
    let mut s = LockService::<u32>::new();
    s.raise_token_floor(Token::MAX);
    let w = queued(s.acquire(Acquire::plain(key("a"), 5, 100), 0, 1));
    let mut events = Vec::new();
    s.tick(5, &mut events);
    assert_eq!(summary(&events), vec![(w, 1, "a".into(), None)]);
}

/// Leases lapsing in numbers are expired a bounded batch per tick, soonest
/// first, the next tick due at once, until all are gone; a freed key still
/// goes to its waiter in the tick that expires it.
#[test]
fn a_tick_expires_a_bounded_batch_of_leases() {
    let mut s = LockService::<u32>::new();
    let leases = 2 * MAX_EXPIRIES_PER_TICK + 3;
    for i in 0..leases {
        granted(s.acquire(Acquire::plain(key(&format!("k{i}")), 0, 100), 0, 1));
    }
    let last = format!("k{}", leases - 1);
    queued(s.acquire(Acquire::plain(key(&last), 1_000, 100), 50, 2));
    let mut events = Vec::new();
    s.tick(100, &mut events);
    assert_eq!(s.table().len(), leases - MAX_EXPIRIES_PER_TICK);
    assert!(events.is_empty(), "{events:?}");
    assert_eq!(s.next_deadline(), Some(100));
    s.tick(100, &mut events);
    assert_eq!(s.table().len(), 3);
    s.tick(101, &mut events);
    let handed = summary(&events);
    assert_eq!(handed.len(), 1);
    assert_eq!((handed[0].1, handed[0].2.as_str()), (2, last.as_str()));
    assert_eq!(s.table().len(), 1);
    assert_eq!(s.next_deadline(), Some(201));
}
