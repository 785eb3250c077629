//! Tests of the rules as a deferred user (the Raft engine) uses them: the
//! grants they decide are applied later, or never.

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test

use super::*;

fn key(s: &str) -> Key {
    Key::try_from(s).unwrap()
}

fn held(table: &mut LockTable, k: &str, lease_ms: u64) -> Token {
    let grant = Command::Grant {
        key: key(k),
        lease_ms,
    };
    match table.apply(&grant, 0) {
        Outcome::Granted { token } => token,
        other => panic!("expected a grant, got {other:?}"),
    }
}

#[test]
fn a_grant_on_its_way_keeps_its_key_taken_until_applied() {
    let table = LockTable::new();
    let mut rules = LockRules::<u32>::new();
    let mut events = Vec::new();
    assert!(rules
        .grant_at_once(&table, &key("a"), 10, &AcquireOptions::default())
        .is_some());
    rules.queue(Acquire::plain(key("a"), 0, 10), 0, 1);
    let w2 = rules.queue(Acquire::plain(key("a"), 0, 20), 0, 2);
    let first = rules.hand_on(&table, &key("a"), 0, &mut events).unwrap();
    assert_eq!(
        first.command,
        Command::Grant {
            key: key("a"),
            lease_ms: 10
        }
    );
    // Not applied yet: no second grant, no grant at once, and the key with
    // its waiter counts as taken.
    assert!(rules.hand_on(&table, &key("a"), 0, &mut events).is_none());
    assert!(rules
        .grant_at_once(&table, &key("b"), 1, &AcquireOptions::default())
        .is_some());
    assert_eq!(rules.validate(&table), Ok(()));
    let mut table = table;
    let outcome = table.apply(&first.command, 5);
    let granted = rules.grant_applied(first.waiter, outcome).unwrap();
    assert!(matches!(
        granted,
        Event::Granted {
            handle: 1,
            token: 1,
            ..
        }
    ));
    assert!(!rules.is_granting(&key("a")));
    assert_eq!(rules.waiting_on(&key("a")), 1);
    assert!(events.is_empty());
    assert_eq!(rules.validate(&table), Ok(()));
    // A grant given up frees the key for the next hand-over.
    let release = Command::Release {
        key: key("a"),
        token: 1,
    };
    table.apply(&release, 6);
    let second = rules.hand_on(&table, &key("a"), 6, &mut events).unwrap();
    assert_eq!(second.waiter.id, w2);
    rules.grant_dropped(&key("a"));
    assert!(rules.is_free(&table, &key("a")));
}

#[test]
fn a_hand_over_may_ride_behind_the_release_of_the_holders_token_only() {
    let mut table = LockTable::new();
    let token = held(&mut table, "a", 100);
    let mut rules = LockRules::<u32>::new();
    let mut events = Vec::new();
    rules.queue(Acquire::plain(key("a"), 5, 10), 0, 1);
    let w2 = rules.queue(Acquire::plain(key("a"), 0, 10), 0, 2);
    assert!(rules.hand_on(&table, &key("a"), 5, &mut events).is_none());
    let wrong = rules.hand_on_behind_release(&table, &key("a"), token + 1, 5, &mut events);
    assert!(wrong.is_none());
    // The first waiter's time ran out at 5: it leaves the head, told so.
    assert!(matches!(
        events.as_slice(),
        [Event::TimedOut { handle: 1, .. }]
    ));
    let behind = rules
        .hand_on_behind_release(&table, &key("a"), token, 5, &mut events)
        .unwrap();
    assert_eq!(behind.waiter.id, w2);
    assert_eq!(events.len(), 1);
    // Only one hand-over of a key at a time.
    rules.queue(Acquire::plain(key("a"), 0, 10), 0, 3);
    assert!(rules
        .hand_on_behind_release(&table, &key("a"), token, 5, &mut events)
        .is_none());
}

#[test]
fn a_refused_grant_gives_the_waiter_back() {
    let mut table = LockTable::new();
    let mut rules = LockRules::<u32>::new();
    let mut events = Vec::new();
    rules.queue(Acquire::plain(key("a"), 0, 10), 0, 1);
    let handover = rules.hand_on(&table, &key("a"), 0, &mut events).unwrap();
    // Something the rules did not decide took the key first.
    held(&mut table, "a", 10);
    let outcome = table.apply(&handover.command, 0);
    assert_eq!(outcome, Outcome::GrantRejected);
    let waiter = rules.grant_applied(handover.waiter, outcome).unwrap_err();
    assert_eq!(waiter.handle, 1);
    assert!(!rules.is_granting(&key("a")));
}

#[test]
fn due_expiries_and_the_next_deadline() {
    let mut table = LockTable::new();
    let token = held(&mut table, "a", 50);
    let mut rules = LockRules::<u32>::new();
    assert_eq!(LockRules::<u32>::due_expiry(&table, 49), None);
    assert_eq!(
        LockRules::<u32>::due_expiry(&table, 50),
        Some(Command::Expire {
            key: key("a"),
            token
        })
    );
    assert_eq!(rules.next_deadline(Some(50)), Some(50));
    rules.queue(Acquire::plain(key("a"), 20, 10), 0, 1);
    assert_eq!(rules.next_deadline(Some(50)), Some(20));
    assert_eq!(rules.next_deadline(None), Some(20));
    let mut events = Vec::new();
    rules.time_out(20, &mut events);
    assert_eq!(events.len(), 1);
    assert_eq!(rules.next_deadline(None), None);
}

#[test]
fn validate_finds_a_free_key_with_waiters() {
    let mut table = LockTable::new();
    let token = held(&mut table, "a", 50);
    let mut rules = LockRules::<u32>::new();
    rules.queue(Acquire::plain(key("a"), 0, 10), 0, 1);
    assert_eq!(rules.validate(&table), Ok(()));
    // Freed behind the rules' back: nobody handed the key on.
    table.apply(
        &Command::Release {
            key: key("a"),
            token,
        },
        1,
    );
    assert!(rules.validate(&table).is_err());
    // An exhausted token space is the one way a free key keeps waiters.
    table.raise_token_floor(Token::MAX);
    assert_eq!(rules.validate(&table), Ok(()));
}
