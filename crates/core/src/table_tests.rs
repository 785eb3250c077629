//! Tests of the lock table.

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test

use super::*;

fn key(s: &str) -> Key {
    Key::try_from(s).unwrap()
}

fn grant(t: &mut LockTable, k: &str, lease_ms: u64, now: Millis) -> Token {
    match t.apply(
        &Command::Grant {
            key: key(k),
            lease_ms,
        },
        now,
    ) {
        Outcome::Granted { token } => token,
        other => panic!("expected a grant, got {other:?}"),
    }
}

#[test]
fn grants_increasing_tokens_and_rejects_a_held_key() {
    let mut t = LockTable::new();
    assert_eq!(t.last_token(), 0);
    assert_eq!(grant(&mut t, "a", 100, 10), 1);
    assert_eq!(grant(&mut t, "b", 50, 10), 2);
    let before = t.clone();
    let again = Command::Grant {
        key: key("a"),
        lease_ms: 5,
    };
    assert_eq!(t.apply(&again, 20), Outcome::GrantRejected);
    assert_eq!(t, before);
    assert_eq!(
        t.holder(&key("a")),
        Some(&Holder {
            token: 1,
            expires_at: 110
        })
    );
    assert_eq!(t.len(), 2);
    assert_eq!(t.validate(), Ok(()));
}

#[test]
fn a_lapsed_lease_still_holds_until_expired() {
    let mut t = LockTable::new();
    grant(&mut t, "a", 10, 0);
    let again = Command::Grant {
        key: key("a"),
        lease_ms: 10,
    };
    assert_eq!(t.apply(&again, 1_000), Outcome::GrantRejected);
    let expire = Command::Expire {
        key: key("a"),
        token: 1,
    };
    assert_eq!(t.apply(&expire, 0), Outcome::Expired { existed: true });
    assert_eq!(t.apply(&again, 1_000), Outcome::Granted { token: 2 });
}

#[test]
fn release_needs_the_exact_token() {
    let mut t = LockTable::new();
    let tok = grant(&mut t, "a", 100, 0);
    let before = t.clone();
    for (k, token) in [("a", tok + 1), ("a", 0), ("b", tok)] {
        let cmd = Command::Release { key: key(k), token };
        assert_eq!(t.apply(&cmd, 5), Outcome::NotFound);
        assert_eq!(t, before);
    }
    let cmd = Command::Release {
        key: key("a"),
        token: tok,
    };
    assert_eq!(t.apply(&cmd, 5), Outcome::Released);
    assert!(t.is_empty());
    assert_eq!(t.next_expiry(), None);
    assert_eq!(t.apply(&cmd, 5), Outcome::NotFound);
    assert_eq!(t.validate(), Ok(()));
}

#[test]
fn renew_moves_the_lease_only_with_the_token() {
    let mut t = LockTable::new();
    let tok = grant(&mut t, "a", 100, 0);
    let before = t.clone();
    let stale = Command::Renew {
        key: key("a"),
        token: tok + 7,
        lease_ms: 1_000,
    };
    assert_eq!(t.apply(&stale, 50), Outcome::NotFound);
    assert_eq!(t, before);
    let renew = Command::Renew {
        key: key("a"),
        token: tok,
        lease_ms: 300,
    };
    assert_eq!(t.apply(&renew, 50), Outcome::Renewed);
    assert_eq!(
        t.holder(&key("a")),
        Some(&Holder {
            token: tok,
            expires_at: 350
        })
    );
    assert_eq!(t.next_expiry(), Some((350, &key("a"), tok)));
    assert_eq!(t.validate(), Ok(()));
    // Renewing does not issue a token.
    assert_eq!(t.last_token(), tok);
}

#[test]
fn a_late_or_duplicated_expiry_changes_nothing() {
    let mut t = LockTable::new();
    let old = grant(&mut t, "a", 10, 0);
    let expire_old = Command::Expire {
        key: key("a"),
        token: old,
    };
    assert_eq!(t.apply(&expire_old, 10), Outcome::Expired { existed: true });
    let new = grant(&mut t, "a", 10, 10);
    let before = t.clone();
    assert_eq!(
        t.apply(&expire_old, 20),
        Outcome::Expired { existed: false }
    );
    assert_eq!(t, before);
    assert_eq!(t.holder(&key("a")).map(|h| h.token), Some(new));
}

#[test]
fn the_token_floor_only_rises() {
    let mut t = LockTable::new();
    let cmd = Command::RaiseTokenFloor { floor: 1_000 };
    assert_eq!(t.apply(&cmd, 0), Outcome::Noop);
    assert_eq!(t.last_token(), 1_000);
    t.raise_token_floor(10);
    assert_eq!(t.last_token(), 1_000);
    assert_eq!(grant(&mut t, "a", 1, 0), 1_001);
}

#[test]
fn an_exhausted_token_space_grants_nothing() {
    let mut t = LockTable::new();
    t.raise_token_floor(Token::MAX - 1);
    assert_eq!(grant(&mut t, "a", 1, 0), Token::MAX);
    let cmd = Command::Grant {
        key: key("b"),
        lease_ms: 1,
    };
    assert_eq!(t.apply(&cmd, 0), Outcome::GrantRejected);
    assert_eq!(t.len(), 1);
}

#[test]
fn lease_end_saturates() {
    let mut t = LockTable::new();
    grant(&mut t, "a", u64::MAX, 5);
    assert_eq!(t.holder(&key("a")).map(|h| h.expires_at), Some(u64::MAX));
}

#[test]
fn expiries_come_earliest_first() {
    let mut t = LockTable::new();
    let c = grant(&mut t, "c", 300, 0);
    let a = grant(&mut t, "a", 100, 0);
    let b = grant(&mut t, "b", 100, 0);
    assert_eq!(t.next_expiry(), Some((100, &key("a"), a)));
    let due: Vec<_> = t.due_expiries(99).collect();
    assert!(due.is_empty());
    let due: Vec<_> = t.due_expiries(100).collect();
    assert_eq!(due, vec![(&key("a"), a), (&key("b"), b)]);
    let due: Vec<_> = t.due_expiries(u64::MAX).collect();
    assert_eq!(due.len(), 3);
    assert_eq!(due[2], (&key("c"), c));
}

#[test]
fn snapshot_restores_under_another_clock_epoch() {
    let mut t = LockTable::new();
    grant(&mut t, "a", 100, 1_000);
    grant(&mut t, "b", 500, 1_000);
    grant(&mut t, "gone", 10, 1_000);
    t.raise_token_floor(40);
    let snap = t.snapshot(1_050);
    assert_eq!(snap.last_token, 40);
    assert_eq!(
        snap.locks,
        vec![
            SnapshotLock::plain(key("gone"), 3, 0),
            SnapshotLock::plain(key("a"), 1, 50),
            SnapshotLock::plain(key("b"), 2, 450),
        ]
    );
    let r = LockTable::restore(&snap, 7);
    assert_eq!(r.validate(), Ok(()));
    assert_eq!(r.last_token(), 40);
    assert_eq!(r.len(), 3);
    assert_eq!(r.holder(&key("a")).map(|h| h.expires_at), Some(57));
    assert_eq!(r.holder(&key("b")).map(|h| h.expires_at), Some(457));
    assert_eq!(r.next_expiry(), Some((7, &key("gone"), 3)));
    // Same epoch, same moment: an identical table.
    assert_eq!(LockTable::restore(&t.snapshot(1_000), 1_000), t);
    // And the restored table snapshots the same.
    assert_eq!(r.snapshot(7), snap);
}

#[test]
fn restore_survives_a_malformed_snapshot() {
    let lock = |k: &str, token, remaining_ms| SnapshotLock::plain(key(k), token, remaining_ms);
    let snap = TableSnapshot {
        last_token: 2,
        locks: vec![
            lock("a", 9, 5),
            lock("a", 4, 6),
            lock("b", 4, 6),
            lock("c", 4, 8),
        ],
    };
    let mut r = LockTable::restore(&snap, 0);
    assert_eq!(r.validate(), Ok(()));
    assert_eq!(r.last_token(), 9);
    // The first grant of a plain key is kept, a second has no room; a
    // token already kept is not kept twice.
    assert_eq!(r.holder(&key("a")).map(|h| h.token), Some(9));
    assert_eq!(r.holder(&key("b")).map(|h| h.token), Some(4));
    assert_eq!(r.holder(&key("c")), None);
    assert_eq!(grant(&mut r, "d", 1, 0), 10);
}

#[test]
fn validate_finds_a_broken_index_and_a_low_floor() {
    let mut t = LockTable::new();
    grant(&mut t, "a", 10, 0);
    grant(&mut t, "b", 10, 0);
    assert_eq!(t.validate(), Ok(()));
    let mut unindexed = t.clone();
    unindexed.grants.drop_last_from_heap();
    assert!(unindexed.validate().is_err());
    let mut moved = t.clone();
    moved.grants.move_lease_end_behind_the_heap(&key("a"), 1);
    assert!(moved.validate().is_err());
    let mut low = t.clone();
    low.last_token = 1;
    assert!(low.validate().is_err());
}
