//! Property tests of `LockService` against a naive reference model, over
//! random sequences of acquire/release/renew/set-value/cancel/tick with
//! random time advances on a few keys: a plain one, a semaphore (acquires
//! naming 2 or 3 permits, the wrong ones refused) and a readers-writer one.
//! Besides agreeing with the model step by step, the service must keep the
//! protocol's promises on its own: never more grants of a key than its
//! permits, never a shared and an exclusive grant together, tokens unique
//! and ever-increasing, first come first served with no barging, stale
//! commands changing nothing (one naming a grant whose lease has ended,
//! not yet expired by a tick, expires it and hands the key on, as the
//! model does), a journal that replays into the same table,
//! and no waiter both granted and timed out. The same rules ([`baton_core::LockRules`]) are
//! run as a user that applies their answers later runs them (the Raft
//! engine), in `deferred`.

// A failed unwrap in a test is a failed test.
#![allow(clippy::unwrap_used)]

mod deferred;
mod model;

use std::collections::HashMap;

use baton_core::{
    Acquire, AcquireOutcome, Command, Event, Holder, Key, LockMode, LockService, LockTable, Millis,
    Outcome, Quota, Refusal, TableSnapshot, Token, WaiterId,
};
use model::{acquire_op, holder_value, options, AcquireOp, MAcquire, MEvent, Model, K};
use proptest::prelude::*;

const KEYS: u8 = 3;

/// How an operation names a token: the key's live one, one issued at some
/// point (likely stale), or an arbitrary number.
#[derive(Clone, Debug)]
enum TokenPick {
    Current,
    Issued(usize),
    Raw(u64),
}

#[derive(Clone, Debug)]
enum Op {
    Acquire(AcquireOp),
    SetValue {
        key: K,
        token: TokenPick,
        value: Option<u8>,
    },
    Release {
        key: K,
        token: TokenPick,
    },
    Renew {
        key: K,
        token: TokenPick,
        lease: u64,
    },
    Cancel {
        pick: usize,
    },
    Tick,
    Advance(u64),
    /// Raises the floor this far above the last token.
    RaiseFloor(u64),
    /// Applies an Expire to a copy of the table, to check what it does.
    ProbeExpire {
        key: K,
        token: TokenPick,
    },
}

fn token_pick() -> impl Strategy<Value = TokenPick> {
    prop_oneof![
        Just(TokenPick::Current),
        any::<usize>().prop_map(TokenPick::Issued),
        (0..30u64).prop_map(TokenPick::Raw),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let key = || 0..KEYS;
    prop_oneof![
        6 => acquire_op(KEYS).prop_map(Op::Acquire),
        1 => (key(), token_pick(), proptest::option::of(0..3u8))
            .prop_map(|(key, token, value)| Op::SetValue { key, token, value }),
        3 => (key(), token_pick()).prop_map(|(key, token)| Op::Release { key, token }),
        1 => (key(), token_pick(), 1..40u64)
            .prop_map(|(key, token, lease)| Op::Renew { key, token, lease }),
        1 => any::<usize>().prop_map(|pick| Op::Cancel { pick }),
        2 => Just(Op::Tick),
        3 => (0..12u64).prop_map(Op::Advance),
        1 => (0..4u64).prop_map(Op::RaiseFloor),
        1 => (key(), token_pick()).prop_map(|(key, token)| Op::ProbeExpire { key, token }),
    ]
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Status {
    Waiting,
    Granted,
    TimedOut,
    Cancelled,
}

/// The service under test, the model, and what has been seen so far.
struct Harness {
    svc: LockService<u64>,
    model: Model,
    keys: Vec<Key>,
    now: Millis,
    issued: Vec<Token>,
    /// Every waiter id handed out, in order, with its key and handle.
    waiters: Vec<(WaiterId, K, u64)>,
    status: HashMap<WaiterId, Status>,
    /// The journal, drained after every step with that step's time.
    journal: Vec<(Millis, Vec<Command>)>,
    next_handle: u64,
}

impl Harness {
    fn new() -> Self {
        Harness::with_quota(Quota {
            max_locks: usize::MAX,
            max_waiters: usize::MAX,
            max_watches: Quota::DEFAULT_MAX_WATCHES,
        })
    }

    fn with_quota(quota: Quota) -> Self {
        let mut svc = LockService::new();
        svc.enable_journal();
        svc.set_quota(quota);
        Harness {
            svc,
            model: Model {
                max_locks: quota.max_locks,
                max_waiters: quota.max_waiters,
                ..Model::default()
            },
            keys: (0..KEYS)
                .map(|i| Key::try_from(format!("key-{i}").as_str()).unwrap())
                .collect(),
            now: 1_000,
            issued: Vec::new(),
            waiters: Vec::new(),
            status: HashMap::new(),
            journal: Vec::new(),
            next_handle: 0,
        }
    }

    fn token(&self, key: K, pick: &TokenPick) -> Token {
        match pick {
            TokenPick::Current => self
                .model
                .holder(key)
                .map_or(self.model.last_token, |l| l.token),
            TokenPick::Issued(i) if !self.issued.is_empty() => self.issued[i % self.issued.len()],
            TokenPick::Issued(_) => 0,
            TokenPick::Raw(t) => *t,
        }
    }

    /// Every grant's token must exceed every token before it.
    fn record_grant(&mut self, token: Token) -> Result<(), TestCaseError> {
        if let Some(&last) = self.issued.last() {
            prop_assert!(token > last, "token {} after {}", token, last);
        }
        self.issued.push(token);
        Ok(())
    }

    fn step(&mut self, op: &Op) -> Result<(), TestCaseError> {
        let now = self.now;
        match *op {
            Op::Acquire(acquire) => {
                let AcquireOp {
                    key, wait, lease, ..
                } = acquire;
                let handle = self.next_handle;
                self.next_handle += 1;
                let ask = acquire.ask();
                let before = self.svc.table().clone();
                let k = self.keys[key as usize].clone();
                let got = self
                    .svc
                    .acquire(Acquire::new(k, wait, lease, options(ask)), now, handle);
                let expected = self.model.acquire(key, lease, ask, now);
                match (got, expected) {
                    (AcquireOutcome::Granted { token }, MAcquire::Granted(t)) => {
                        prop_assert_eq!(token, t);
                        self.record_grant(token)?;
                    }
                    (AcquireOutcome::Refused(Refusal::TooManyLocks), MAcquire::TooManyLocks)
                    | (
                        AcquireOutcome::Refused(Refusal::TooManyWaiters),
                        MAcquire::TooManyWaiters,
                    ) => prop_assert_eq!(self.svc.table(), &before),
                    (AcquireOutcome::Refused(Refusal::Permits(n)), MAcquire::Permits(m)) => {
                        prop_assert_eq!(n, m);
                        prop_assert_eq!(self.svc.table(), &before);
                    }
                    (AcquireOutcome::Queued { id }, MAcquire::Queued) => {
                        if let Some(&(last, _, _)) = self.waiters.last() {
                            prop_assert!(id > last, "waiter id {} after {}", id, last);
                        }
                        self.model.queue(id, key, wait, lease, ask, now);
                        self.waiters.push((id, key, handle));
                        self.status.insert(id, Status::Waiting);
                    }
                    (got, expected) => {
                        prop_assert!(false, "acquire gave {:?}, model {:?}", got, expected)
                    }
                }
            }
            Op::Release { key, ref token } => {
                let token = self.token(key, token);
                let unchanged = self.unchanged_unless_lapsed(key, token);
                let mut events = Vec::new();
                let outcome = self
                    .svc
                    .release(&self.keys[key as usize], token, now, &mut events);
                let mut expected = Vec::new();
                if self.model.release(key, token, now, &mut expected) {
                    prop_assert_eq!(outcome, Outcome::Released);
                } else {
                    prop_assert_eq!(outcome, Outcome::NotFound);
                    self.check_unchanged(unchanged)?;
                }
                self.check_events(events, &expected)?;
            }
            Op::Renew {
                key,
                ref token,
                lease,
            } => {
                let token = self.token(key, token);
                let unchanged = self.unchanged_unless_lapsed(key, token);
                let mut events = Vec::new();
                let k = &self.keys[key as usize];
                let outcome = self.svc.renew(k, token, lease, now, &mut events);
                let mut expected = Vec::new();
                if self.model.renew(key, token, lease, now, &mut expected) {
                    prop_assert_eq!(outcome, Outcome::Renewed);
                } else {
                    prop_assert_eq!(outcome, Outcome::NotFound);
                    self.check_unchanged(unchanged)?;
                }
                self.check_events(events, &expected)?;
            }
            Op::SetValue {
                key,
                ref token,
                value,
            } => {
                let token = self.token(key, token);
                let unchanged = self.unchanged_unless_lapsed(key, token);
                let mut events = Vec::new();
                let k = &self.keys[key as usize];
                let outcome =
                    self.svc
                        .set_value(k, token, value.map(holder_value), now, &mut events);
                let mut expected = Vec::new();
                if self.model.set_value(key, token, value, now, &mut expected) {
                    prop_assert_eq!(outcome, Outcome::ValueSet);
                } else {
                    prop_assert_eq!(outcome, Outcome::NotFound);
                    self.check_unchanged(unchanged)?;
                }
                self.check_events(events, &expected)?;
            }
            Op::Cancel { pick } => {
                if self.waiters.is_empty() {
                    return Ok(());
                }
                let (id, _, _) = self.waiters[pick % self.waiters.len()];
                let was_queued = self.svc.cancel(id);
                prop_assert_eq!(was_queued, self.model.cancel(id));
                let status = self.status.get_mut(&id).unwrap();
                prop_assert_eq!(was_queued, *status == Status::Waiting);
                if was_queued {
                    *status = Status::Cancelled;
                }
            }
            Op::Tick => {
                let mut events = Vec::new();
                self.svc.tick(now, &mut events);
                let mut expected = Vec::new();
                self.model.tick(now, &mut expected);
                self.check_events(events, &expected)?;
            }
            Op::Advance(ms) => self.now += ms,
            Op::RaiseFloor(above) => {
                let floor = self.model.last_token + above;
                self.svc.raise_token_floor(floor);
                self.model.raise_token_floor(floor);
            }
            Op::ProbeExpire { key, ref token } => {
                let token = self.token(key, token);
                let k = &self.keys[key as usize];
                let mut copy = self.svc.table().clone();
                let outcome = copy.apply(
                    &Command::Expire {
                        key: k.clone(),
                        token,
                    },
                    now,
                );
                let live = self.model.holders(key).iter().any(|l| l.token == token);
                prop_assert_eq!(outcome, Outcome::Expired { existed: live });
                if live {
                    prop_assert_eq!(copy.grant_of(k, token), None);
                    prop_assert_eq!(copy.len() + 1, self.svc.table().len());
                } else {
                    prop_assert_eq!(&copy, self.svc.table());
                }
            }
        }
        let journaled = self
            .svc
            .drain_journal()
            .iter()
            .map(Result::unwrap)
            .collect();
        self.journal.push((now, journaled));
        self.check_state()
    }

    /// The table and waiter count before a request naming `key`'s grant
    /// with `token`, to be found unchanged if it names no grant held
    /// (`None` if it names one whose lease ended: that one expires).
    fn unchanged_unless_lapsed(&self, key: K, token: Token) -> Option<(LockTable, usize)> {
        let lapsed = self.model.lapsed(key, token, self.now);
        (!lapsed).then(|| (self.svc.table().clone(), self.svc.waiter_count()))
    }

    /// A request that named no grant held changed nothing.
    fn check_unchanged(&self, before: Option<(LockTable, usize)>) -> Result<(), TestCaseError> {
        if let Some((table, waiting)) = before {
            prop_assert_eq!(self.svc.table(), &table);
            prop_assert_eq!(self.svc.waiter_count(), waiting);
        }
        Ok(())
    }

    /// Events must be the model's, and each must end a waiting waiter, in
    /// order of arrival on its key.
    fn check_events(
        &mut self,
        events: Vec<Event<u64>>,
        expected: &[MEvent],
    ) -> Result<(), TestCaseError> {
        let mut seen = Vec::new();
        for event in events {
            let (id, handle, key, token) = match event {
                Event::Granted {
                    id,
                    handle,
                    key,
                    token,
                } => (id, handle, key, Some(token)),
                Event::TimedOut { id, handle, key } => (id, handle, key, None),
                other => {
                    return Err(TestCaseError::fail(format!(
                        "the service moved or answered late: {other:?}"
                    )))
                }
            };
            let k = self.keys.iter().position(|x| *x == key).unwrap() as K;
            let &(_, queued_on, queued_handle) =
                self.waiters.iter().find(|(w, _, _)| *w == id).unwrap();
            prop_assert_eq!(queued_on, k);
            prop_assert_eq!(queued_handle, handle);
            let status = self.status[&id];
            prop_assert_eq!(status, Status::Waiting, "waiter {} ended twice", id);
            if let Some(token) = token {
                self.record_grant(token)?;
                let overtaken = self
                    .waiters
                    .iter()
                    .take_while(|(w, _, _)| *w != id)
                    .find(|(w, on, _)| *on == k && self.status[w] == Status::Waiting);
                prop_assert!(overtaken.is_none(), "{} overtook {:?}", id, overtaken);
            }
            let ended = if token.is_some() {
                Status::Granted
            } else {
                Status::TimedOut
            };
            self.status.insert(id, ended);
            seen.push((id, k, token));
        }
        prop_assert_eq!(seen.as_slice(), expected);
        Ok(())
    }

    fn check_state(&self) -> Result<(), TestCaseError> {
        let table = self.svc.table();
        prop_assert_eq!(table.last_token(), self.model.last_token);
        prop_assert_eq!(table.len(), self.model.locks.len());
        for (k, key) in self.keys.iter().enumerate() {
            let expected: Vec<Holder> = self
                .model
                .holders(k as K)
                .iter()
                .map(|l| Holder {
                    token: l.token,
                    expires_at: l.expires_at,
                })
                .collect();
            let grants = table.grants(key);
            let got = grants.map(|g| g.holders().to_vec()).unwrap_or_default();
            prop_assert_eq!(&got, &expected);
            for lock in self.model.holders(k as K) {
                prop_assert_eq!(
                    table.value(lock.token).cloned(),
                    lock.ask.value.map(holder_value)
                );
            }
            if let Some(grants) = grants {
                // The promises, checked here on their own: never more
                // grants than permits, never shared and exclusive together.
                let first = self.model.holders(k as K)[0].ask;
                prop_assert_eq!(grants.permits(), first.permits);
                let shared = self
                    .model
                    .holders(k as K)
                    .iter()
                    .filter(|l| l.ask.shared)
                    .count();
                prop_assert!(
                    shared == 0 || shared == grants.len(),
                    "{:?} mixes modes",
                    key
                );
                prop_assert!(shared > 0 || grants.len() <= grants.permits() as usize);
                prop_assert_eq!(grants.mode() == LockMode::Shared, shared > 0);
            }
        }
        prop_assert_eq!(self.svc.waiter_count(), self.model.waiters.len());
        let waiting = self
            .status
            .values()
            .filter(|s| **s == Status::Waiting)
            .count();
        prop_assert_eq!(self.svc.waiter_count(), waiting);
        prop_assert_eq!(self.svc.next_deadline(), self.model.next_deadline());
        prop_assert_eq!(self.svc.validate(), Ok(()));
        Ok(())
    }

    /// Checks on the whole run: journal replay, snapshots, draining.
    fn finish(mut self) -> Result<(), TestCaseError> {
        let mut replica = LockTable::new();
        for (now, cmds) in &self.journal {
            for cmd in cmds {
                replica.apply(cmd, *now);
            }
        }
        prop_assert_eq!(&replica, self.svc.table());

        let snap = self.svc.table().snapshot(self.now);
        let restored = LockTable::restore(&snap, self.now);
        prop_assert_eq!(restored.last_token(), self.svc.table().last_token());
        prop_assert_eq!(restored.len(), self.svc.table().len());
        for (key, holder) in self.svc.table().iter() {
            // A lease already run out restarts as "due now": 0 remaining.
            let expected = Holder {
                expires_at: holder.expires_at.max(self.now),
                ..*holder
            };
            prop_assert_eq!(restored.grant_of(key, holder.token), Some(&expected));
            prop_assert_eq!(
                restored.value(holder.token),
                self.svc.table().value(holder.token)
            );
        }
        let elsewhere = self.now + 123_456;
        // Leases already run out all come back due at once, so only their
        // order among themselves may differ.
        let by_key = |mut s: TableSnapshot| {
            s.locks
                .sort_by(|a, b| (&a.key, a.token).cmp(&(&b.key, b.token)));
            s
        };
        let again = LockTable::restore(&snap, elsewhere).snapshot(elsewhere);
        prop_assert_eq!(by_key(again), by_key(snap));

        let drained: Vec<_> = self.svc.drain_waiters().iter().map(|w| w.id).collect();
        let mut expected: Vec<_> = self.model.waiters.iter().map(|w| w.id).collect();
        expected.sort_unstable();
        prop_assert_eq!(drained, expected);
        prop_assert_eq!(self.svc.waiter_count(), 0);
        prop_assert_eq!(
            self.svc.next_deadline(),
            self.svc.table().next_expiry().map(|e| e.0)
        );
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn service_matches_the_model_and_keeps_its_promises(
        ops in proptest::collection::vec(op(), 1..150)
    ) {
        let mut h = Harness::new();
        for op in &ops {
            h.step(op)?;
        }
        h.finish()?;
    }

    /// Under a small quota, a refused acquire changes nothing and the rest
    /// goes on as the model says (a hand-over at the cap adds no grant).
    #[test]
    fn service_matches_the_model_under_a_quota(
        max_locks in 0usize..4,
        max_waiters in 0usize..4,
        ops in proptest::collection::vec(op(), 1..150)
    ) {
        let mut h = Harness::with_quota(Quota { max_locks, max_waiters, max_watches: Quota::DEFAULT_MAX_WATCHES });
        for op in &ops {
            h.step(op)?;
        }
        h.finish()?;
    }

    /// A replica fed the journal issues the very tokens the service gave
    /// out, and every journaled command takes effect there too.
    #[test]
    fn a_replica_replays_the_journal_to_the_same_effect(
        ops in proptest::collection::vec(op(), 1..80)
    ) {
        let mut h = Harness::new();
        for op in &ops {
            h.step(op)?;
        }
        let mut replica = LockTable::new();
        let mut tokens = Vec::new();
        for (now, cmds) in &h.journal {
            for cmd in cmds {
                match replica.apply(cmd, *now) {
                    Outcome::Granted { token } => tokens.push(token),
                    Outcome::GrantRejected | Outcome::NotFound | Outcome::Expired { existed: false } => {
                        prop_assert!(false, "{:?} had no effect on the replica", cmd)
                    }
                    Outcome::Released
                    | Outcome::Renewed
                    | Outcome::ValueSet
                    | Outcome::Expired { existed: true }
                    | Outcome::Noop => {}
                }
            }
        }
        prop_assert_eq!(tokens, h.issued);
    }

    /// Applied later, in random batches, the rules keep their promises.
    #[test]
    fn the_rules_keep_their_promises_when_grants_apply_later(
        ops in proptest::collection::vec(deferred::op(), 1..150)
    ) {
        let mut d = deferred::Deferred::new();
        for op in &ops {
            d.step(op)?;
        }
        d.step(&deferred::Op::Commit(usize::MAX))?;
        prop_assert_eq!(d.table().validate(), Ok(()));
    }

    /// Applied at once, the rules as the Raft engine uses them end every
    /// acquire as `LockService` does, with the same tokens and table.
    #[test]
    fn the_rules_applied_at_once_are_the_service(
        ops in proptest::collection::vec(deferred::op(), 1..150)
    ) {
        let mut d = deferred::Deferred::new();
        for op in &ops {
            d.step(op)?;
            d.step(&deferred::Op::Commit(usize::MAX))?;
        }
        let (ends, table) = deferred::service_run(&ops);
        prop_assert_eq!(&d.ends, &ends);
        prop_assert_eq!(d.table(), &table);
    }
}
