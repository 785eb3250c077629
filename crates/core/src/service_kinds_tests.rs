//! Unit tests of the lock service's semaphores, shared locks and values,
//! each rule of protocol 1.2 on its own (the property tests mix them).

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test

use super::*;
use crate::{Acquire, AcquireOptions, HolderValue, KeyDetail, LockMode, StateTag};

fn key(s: &str) -> Key {
    Key::try_from(s).unwrap()
}

fn acquire(
    svc: &mut LockService<u32>,
    k: &str,
    options: AcquireOptions,
    handle: u32,
) -> AcquireOutcome {
    svc.acquire(Acquire::new(key(k), 0, 10_000, options), 0, handle)
}

fn granted_handles(events: &[Event<u32>]) -> Vec<u32> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Granted { handle, .. } => Some(*handle),
            _ => None,
        })
        .collect()
}

#[test]
fn a_semaphore_takes_its_permits_then_queues_and_refuses_other_permits() {
    let mut svc = LockService::new();
    for h in 0..3 {
        assert!(matches!(
            acquire(&mut svc, "pool", AcquireOptions::semaphore(3), h),
            AcquireOutcome::Granted { .. }
        ));
    }
    assert!(matches!(
        acquire(&mut svc, "pool", AcquireOptions::semaphore(3), 3),
        AcquireOutcome::Queued { .. }
    ));
    assert_eq!(
        acquire(&mut svc, "pool", AcquireOptions::semaphore(2), 4),
        AcquireOutcome::Refused(Refusal::Permits(3))
    );
    assert_eq!(
        acquire(&mut svc, "pool", AcquireOptions::shared(), 5),
        AcquireOutcome::Refused(Refusal::Permits(3))
    );
    assert_eq!(Refusal::Permits(3).reason(), "the key has 3 permits");
    assert_eq!(svc.table().len(), 3);
    let oldest = svc.table().holder(&key("pool")).unwrap().token;
    let mut events = Vec::new();
    svc.release(&key("pool"), oldest, 0, &mut events);
    assert_eq!(granted_handles(&events), vec![3]);
    assert_eq!(svc.validate(), Ok(()));
}

#[test]
fn shared_waiters_at_the_head_are_granted_together_and_writers_do_not_starve() {
    let mut svc = LockService::new();
    let reader = match acquire(&mut svc, "rw", AcquireOptions::shared(), 0) {
        AcquireOutcome::Granted { token } => token,
        other => panic!("{other:?}"),
    };
    assert!(matches!(
        acquire(&mut svc, "rw", AcquireOptions::shared(), 1),
        AcquireOutcome::Granted { .. }
    ));
    // A writer waits; a reader arriving after it queues behind it.
    assert!(matches!(
        acquire(&mut svc, "rw", AcquireOptions::default(), 2),
        AcquireOutcome::Queued { .. }
    ));
    assert!(matches!(
        acquire(&mut svc, "rw", AcquireOptions::shared(), 3),
        AcquireOutcome::Queued { .. }
    ));
    assert!(matches!(
        acquire(&mut svc, "rw", AcquireOptions::shared(), 4),
        AcquireOutcome::Queued { .. }
    ));
    let mut events = Vec::new();
    svc.release(&key("rw"), reader, 0, &mut events);
    assert!(events.is_empty(), "a reader still holds the key");
    let other = svc.table().holder(&key("rw")).unwrap().token;
    svc.release(&key("rw"), other, 0, &mut events);
    assert_eq!(granted_handles(&events), vec![2]);
    let writer = svc.table().holder(&key("rw")).unwrap().token;
    events.clear();
    svc.release(&key("rw"), writer, 0, &mut events);
    assert_eq!(granted_handles(&events), vec![3, 4], "both readers at once");
    assert_eq!(svc.table().grants(&key("rw")).unwrap().len(), 2);
    assert_eq!(svc.validate(), Ok(()));
}

#[test]
fn a_writer_that_leaves_the_head_lets_the_readers_behind_it_in() {
    let mut svc = LockService::new();
    acquire(&mut svc, "rw", AcquireOptions::shared(), 0);
    let writer = match acquire(&mut svc, "rw", AcquireOptions::default(), 1) {
        AcquireOutcome::Queued { id } => id,
        other => panic!("{other:?}"),
    };
    acquire(&mut svc, "rw", AcquireOptions::shared(), 2);
    assert!(svc.cancel(writer));
    assert_eq!(svc.next_deadline(), Some(0), "due at once");
    let mut events = Vec::new();
    svc.tick(0, &mut events);
    assert_eq!(granted_handles(&events), vec![2]);
    assert_eq!(svc.validate(), Ok(()));
}

#[test]
fn each_permit_and_each_shared_grant_counts_against_max_locks() {
    let mut svc = LockService::new();
    svc.set_quota(Quota {
        max_locks: 3,
        max_waiters: 10,
        max_watches: Quota::DEFAULT_MAX_WATCHES,
    });
    acquire(&mut svc, "pool", AcquireOptions::semaphore(4), 0);
    acquire(&mut svc, "pool", AcquireOptions::semaphore(4), 1);
    acquire(&mut svc, "rw", AcquireOptions::shared(), 2);
    assert_eq!(
        acquire(&mut svc, "rw", AcquireOptions::shared(), 3),
        AcquireOutcome::Refused(Refusal::TooManyLocks)
    );
    assert_eq!(
        acquire(&mut svc, "pool", AcquireOptions::semaphore(4), 4),
        AcquireOutcome::Refused(Refusal::TooManyLocks)
    );
}

#[test]
fn a_permit_renewed_past_its_lease_end_passes_on_and_the_others_hold() {
    let mut svc: LockService<u32> = LockService::new();
    let short = svc.acquire(
        Acquire::new(key("pool"), 0, 100, AcquireOptions::semaphore(2)),
        0,
        1,
    );
    let AcquireOutcome::Granted { token: short } = short else {
        panic!("{short:?}")
    };
    let AcquireOutcome::Granted { token: long } =
        acquire(&mut svc, "pool", AcquireOptions::semaphore(2), 2)
    else {
        panic!("no second permit")
    };
    assert!(matches!(
        acquire(&mut svc, "pool", AcquireOptions::semaphore(2), 3),
        AcquireOutcome::Queued { .. }
    ));
    // Past the short lease's end, before any tick: `Q` counts one holder,
    // and the renewal finds no grant; the waiter takes the permit.
    let state = svc.query(&key("pool"), 100);
    assert_eq!(state.detail.as_ref().map(|d| d.holder_count), Some(1));
    let mut events = Vec::new();
    assert_eq!(
        svc.renew(&key("pool"), short, 10_000, 100, &mut events),
        Outcome::NotFound
    );
    assert_eq!(granted_handles(&events), vec![3]);
    assert_eq!(
        svc.renew(&key("pool"), long, 10_000, 100, &mut events),
        Outcome::Renewed
    );
    assert_eq!(svc.table().len(), 2);
    assert_eq!(svc.table().grant_of(&key("pool"), short), None);
}

#[test]
fn a_reader_released_past_its_lease_end_lets_the_writer_in_only_when_the_last_goes() {
    let mut svc: LockService<u32> = LockService::new();
    let first = svc.acquire(
        Acquire::new(key("rw"), 0, 100, AcquireOptions::shared()),
        0,
        1,
    );
    let second = svc.acquire(
        Acquire::new(key("rw"), 0, 200, AcquireOptions::shared()),
        0,
        2,
    );
    let (AcquireOutcome::Granted { token: first }, AcquireOutcome::Granted { token: second }) =
        (first, second)
    else {
        panic!("the readers were not granted together")
    };
    assert!(matches!(
        acquire(&mut svc, "rw", AcquireOptions::default(), 3),
        AcquireOutcome::Queued { .. }
    ));
    let mut events = Vec::new();
    assert_eq!(
        svc.release(&key("rw"), first, 150, &mut events),
        Outcome::NotFound
    );
    assert!(events.is_empty(), "a reader still holds the key");
    let state = svc.query(&key("rw"), 150);
    assert_eq!(state.grant.map(|g| g.token), Some(second));
    assert_eq!(
        svc.set_value(&key("rw"), second, None, 200, &mut events),
        Outcome::NotFound
    );
    assert_eq!(granted_handles(&events), vec![3]);
}

#[test]
fn values_are_set_cleared_and_reported_with_the_tag() {
    let mut svc: LockService<u32> = LockService::new();
    let token = match acquire(&mut svc, "lead", AcquireOptions::default(), 0) {
        AcquireOutcome::Granted { token } => token,
        other => panic!("{other:?}"),
    };
    svc.track_changes();
    let mut events = Vec::new();
    // Plain: the 1.1 answer, tagged by the token.
    let plain = svc.query(&key("lead"), 0);
    assert_eq!((plain.tag(), plain.detail), (StateTag::Plain(token), None));
    let value = HolderValue::try_from("10.0.0.7:80").unwrap();
    assert_eq!(
        svc.set_value(&key("lead"), token, Some(value.clone()), 0, &mut events),
        Outcome::ValueSet
    );
    assert_eq!(
        svc.set_value(&key("lead"), token + 1, None, 0, &mut events),
        Outcome::NotFound
    );
    let valued = svc.query(&key("lead"), 1_000);
    let detail: &KeyDetail = valued.detail.as_deref().unwrap();
    assert_eq!(
        (detail.permits, detail.mode, detail.holder_count),
        (1, LockMode::Exclusive, 1)
    );
    assert_eq!(detail.holders[0].value, Some(value));
    assert_eq!(detail.holders[0].lease_left_ms, 9_000);
    assert!(matches!(detail.tag, StateTag::Holders { newest, count: 1, .. } if newest == token));
    assert_eq!(
        svc.set_value(&key("lead"), token, None, 0, &mut events),
        Outcome::ValueSet
    );
    assert_eq!(svc.query(&key("lead"), 0).tag(), StateTag::Plain(token));
    assert_eq!(
        svc.drain_changed_keys(),
        Some(vec![key("lead"), key("lead")])
    );
    svc.replace_table(LockTable::new());
    assert_eq!(svc.drain_changed_keys(), None, "any key may have changed");
    assert_eq!(svc.drain_changed_keys(), Some(Vec::new()));
}
