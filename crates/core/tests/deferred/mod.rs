//! The lock rules as a user that applies their answers later uses them
//! (the Raft engine: it proposes commands and applies them when the log
//! commits them), checked on random runs: the table and the rules always
//! validate, tokens rise, one hand-over of a key at a time, a waiter is
//! granted only if it was the oldest still in time when its grant was
//! decided, every waiter ends once, and applied at once ("eager") the
//! same run gives what `LockService` gives. The keys are those of the
//! model: plain, a semaphore, a readers-writer lock; grants on their way
//! count against a key's room, so several may be decided for one key.

use std::collections::HashMap;

use baton_core::{
    Acquire, AcquireOutcome, Command, Event, Key, LockRules, LockService, LockTable, Millis,
    Outcome, Refusal, Token, Waiter,
};
use proptest::prelude::*;

use crate::model::{acquire_op, holder_value, options, AcquireOp};

const KEYS: u8 = 3;

#[derive(Clone, Debug)]
pub enum Op {
    Acquire(AcquireOp),
    /// Sets the value of the key's oldest grant.
    SetValue {
        key: u8,
        value: Option<u8>,
    },
    /// Releases the key's current grant (or a stale token if `stale`).
    Release {
        key: u8,
        stale: bool,
    },
    Renew {
        key: u8,
        lease: u64,
    },
    Cancel {
        pick: usize,
    },
    Tick,
    Advance(u64),
    /// Applies this many of the oldest commands not yet applied.
    Commit(usize),
}

pub fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => acquire_op(KEYS).prop_map(Op::Acquire),
        1 => (0..KEYS, proptest::option::of(0..3u8))
            .prop_map(|(key, value)| Op::SetValue { key, value }),
        3 => (0..KEYS, any::<bool>()).prop_map(|(key, stale)| Op::Release { key, stale }),
        1 => (0..KEYS, 1..40u64).prop_map(|(key, lease)| Op::Renew { key, lease }),
        1 => any::<usize>().prop_map(|pick| Op::Cancel { pick }),
        2 => Just(Op::Tick),
        3 => (0..12u64).prop_map(Op::Advance),
        3 => (1..4usize).prop_map(Op::Commit),
    ]
}

/// How a waiter (named by its handle) ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum End {
    Granted(Token),
    TimedOut,
    /// Refused: the key has other permits.
    Refused(u32),
}

/// A token no grant has: what a stale release names.
fn stale_token(table: &LockTable) -> Token {
    table.last_token() + 1_000
}

/// A command proposed and not yet applied, with the waiter its grant is for.
type Proposed = (Command, Option<Waiter<u64>>);

pub struct Deferred {
    table: LockTable,
    rules: LockRules<u64>,
    log: Vec<Proposed>,
    keys: Vec<Key>,
    pub now: Millis,
    /// Every acquire in arrival order: (handle, key index).
    arrivals: Vec<(u64, u8)>,
    pub ends: HashMap<u64, End>,
    cancelled: Vec<u64>,
    ids: HashMap<u64, u64>,
    last_token: Token,
    /// Keys a cancel let the head of in: handed on at the next tick, as
    /// `LockService` does.
    stalled: Vec<Key>,
    /// Waiters whose grant is decided (on its way or applied).
    decided: Vec<u64>,
}

impl Deferred {
    pub fn new() -> Deferred {
        Deferred {
            table: LockTable::new(),
            rules: LockRules::new(),
            log: Vec::new(),
            keys: (0..KEYS)
                .map(|i| Key::try_from(format!("key-{i}").as_str()).unwrap())
                .collect(),
            now: 1_000,
            arrivals: Vec::new(),
            ends: HashMap::new(),
            cancelled: Vec::new(),
            ids: HashMap::new(),
            last_token: 0,
            stalled: Vec::new(),
            decided: Vec::new(),
        }
    }

    pub fn table(&self) -> &LockTable {
        &self.table
    }

    pub fn step(&mut self, op: &Op) -> Result<(), TestCaseError> {
        let now = self.now;
        let mut events = Vec::new();
        match *op {
            Op::Acquire(acquire) => {
                let AcquireOp {
                    key, wait, lease, ..
                } = acquire;
                let handle = self.arrivals.len() as u64;
                let k = self.keys[key as usize].clone();
                let options = options(acquire.ask());
                if let Err(refusal) = self.rules.admit(&self.table, &k, &options) {
                    let Refusal::Permits(n) = refusal else {
                        return Err(TestCaseError::fail(format!("refused: {refusal:?}")));
                    };
                    self.ends.insert(handle, End::Refused(n));
                    self.arrivals.push((handle, u8::MAX));
                    return Ok(());
                }
                self.arrivals.push((handle, key));
                let nobody_waits = self.rules.waiting_on(&k) == 0;
                let acquire = Acquire::new(k.clone(), wait, lease, options);
                let id = self.rules.queue(acquire, now, handle);
                self.ids.insert(handle, id);
                // Queued then handed on when nobody waited is granted at
                // once if the key has room, as `LockService` has it.
                if nobody_waits {
                    self.hand_on(&k, None, &mut events)?;
                }
            }
            Op::SetValue { key, value } => {
                let k = self.keys[key as usize].clone();
                if let Some(holder) = self.table.holder(&k) {
                    let token = holder.token;
                    if self.lapse(&k, token, &mut events)? {
                        return self.after_step(events);
                    }
                    let value = value.map(holder_value);
                    self.log.push((
                        Command::SetValue {
                            key: k,
                            token,
                            value,
                        },
                        None,
                    ));
                }
            }
            Op::Release { key, stale } => {
                let k = self.keys[key as usize].clone();
                // A stale release is answered N without a proposal, as the
                // Raft engine does, and changes nothing.
                if let Some(holder) = self.table.holder(&k).copied().filter(|_| !stale) {
                    let token = holder.token;
                    if self.lapse(&k, token, &mut events)? {
                        return self.after_step(events);
                    }
                    let release = Command::Release {
                        key: k.clone(),
                        token,
                    };
                    self.log.push((release, None));
                    self.hand_on(&k, Some(token), &mut events)?;
                }
            }
            Op::Renew { key, lease } => {
                let k = self.keys[key as usize].clone();
                if let Some(holder) = self.table.holder(&k) {
                    let token = holder.token;
                    if self.lapse(&k, token, &mut events)? {
                        return self.after_step(events);
                    }
                    self.log.push((
                        Command::Renew {
                            key: k,
                            token,
                            lease_ms: lease,
                        },
                        None,
                    ));
                }
            }
            Op::Cancel { pick } => {
                if !self.arrivals.is_empty() {
                    let (handle, _) = self.arrivals[pick % self.arrivals.len()];
                    let withdrawn = self
                        .ids
                        .get(&handle)
                        .and_then(|id| self.rules.withdraw(*id));
                    if let Some(key) = withdrawn {
                        prop_assert!(!self.ends.contains_key(&handle));
                        self.cancelled.push(handle);
                        if self.rules.head_has_room(&self.table, &key, 0) {
                            self.stalled.push(key);
                        }
                    }
                }
            }
            Op::Tick => {
                self.rules.time_out(now, &mut events);
                let mut freed = std::mem::take(&mut self.stalled);
                freed.extend(events.iter().filter_map(|e| match e {
                    Event::TimedOut { key, .. } => Some(key.clone()),
                    _ => None,
                }));
                for key in freed {
                    self.hand_on(&key, None, &mut events)?;
                }
                let expiring: Vec<_> = self.log.iter().map(|(c, _)| c.clone()).collect();
                let due: Vec<Command> = self
                    .table
                    .due_expiries(now)
                    .map(|(key, token)| Command::Expire {
                        key: key.clone(),
                        token,
                    })
                    .filter(|c| !expiring.contains(c))
                    .collect();
                self.log.extend(due.into_iter().map(|c| (c, None)));
            }
            Op::Advance(ms) => self.now += ms,
            Op::Commit(n) => self.commit(n, &mut events)?,
        }
        self.after_step(events)
    }

    /// The checks after every step, its `events` recorded.
    fn after_step(&mut self, events: Vec<Event<u64>>) -> Result<(), TestCaseError> {
        self.record(events)?;
        prop_assert_eq!(self.table.validate(), Ok(()));
        // With commands in flight a key may be freed and not yet handed
        // on; the rules promise the invariant once the log is applied.
        if self.log.is_empty() {
            prop_assert_eq!(self.rules.validate_but(&self.table, &self.stalled), Ok(()));
        }
        Ok(())
    }

    /// As the Raft engine has it: a request naming `key`'s grant with
    /// `token` after its lease ended (and with no renewal of it on its
    /// way, which was decided in time and goes first) proposes the grant's
    /// expiry instead, unless that is on its way already, and the grants
    /// of the next waiters behind it. Whether the grant had lapsed.
    fn lapse(
        &mut self,
        key: &Key,
        token: Token,
        events: &mut Vec<Event<u64>>,
    ) -> Result<bool, TestCaseError> {
        let renewing = self.log.iter().any(|(command, _)| {
            matches!(command, Command::Renew { key: k, token: t, .. } if k == key && *t == token)
        });
        let lapsed = LockRules::<u64>::lapsed(&self.table, key, token, self.now);
        let Some(expire) = lapsed.filter(|_| !renewing) else {
            return Ok(false);
        };
        if !self.log.iter().any(|(command, _)| *command == expire) {
            self.log.push((expire, None));
            self.hand_on(key, Some(token), events)?;
        }
        Ok(true)
    }

    /// Decides the next grants of `key` (behind a release of `token` if
    /// given) and proposes them, checking each goes to the oldest waiter
    /// in time.
    fn hand_on(
        &mut self,
        key: &Key,
        behind: Option<Token>,
        events: &mut Vec<Event<u64>>,
    ) -> Result<(), TestCaseError> {
        while self.hand_on_one(key, behind, events)? {}
        Ok(())
    }

    /// One grant of [`Self::hand_on`]; whether there was one.
    fn hand_on_one(
        &mut self,
        key: &Key,
        behind: Option<Token>,
        events: &mut Vec<Event<u64>>,
    ) -> Result<bool, TestCaseError> {
        let handover = match behind {
            None => self.rules.hand_on(&self.table, key, self.now, events),
            Some(token) => {
                self.rules
                    .hand_on_behind_release(&self.table, key, token, self.now, events)
            }
        };
        self.record(std::mem::take(events))?;
        let Some(handover) = handover else {
            return Ok(false);
        };
        let handle = handover.waiter.handle;
        prop_assert!(handover.waiter.deadline.is_none_or(|d| d > self.now));
        let k = self.keys.iter().position(|x| x == key).unwrap() as u8;
        let older_waiting =
            self.arrivals
                .iter()
                .take_while(|(h, _)| *h != handle)
                .find(|(h, on)| {
                    *on == k
                        && !self.ends.contains_key(h)
                        && !self.cancelled.contains(h)
                        && !self.decided.contains(h)
                });
        prop_assert!(
            older_waiting.is_none(),
            "{} overtook {:?}",
            handle,
            older_waiting
        );
        self.decided.push(handle);
        self.log.push((handover.command, Some(handover.waiter)));
        Ok(true)
    }

    /// Applies the `n` oldest proposed commands; a freed key is handed on.
    fn commit(&mut self, n: usize, events: &mut Vec<Event<u64>>) -> Result<(), TestCaseError> {
        for _ in 0..n {
            if self.log.is_empty() {
                break;
            }
            let (command, waiter) = self.log.remove(0);
            let outcome = self.table.apply(&command, self.now);
            if let Some(waiter) = waiter {
                let granted = self.rules.grant_applied(waiter, outcome);
                prop_assert!(granted.is_ok(), "a decided grant was refused");
                events.extend(granted.ok());
            }
            let freed = matches!(
                outcome,
                Outcome::Released | Outcome::Expired { existed: true }
            );
            if let (true, Command::Release { key, .. } | Command::Expire { key, .. }) =
                (freed, &command)
            {
                let key = key.clone();
                self.hand_on(&key, None, events)?;
            }
        }
        Ok(())
    }

    fn record(&mut self, events: Vec<Event<u64>>) -> Result<(), TestCaseError> {
        for event in events {
            let (handle, end) = match event {
                Event::Granted { handle, token, .. } => {
                    prop_assert!(
                        token > self.last_token,
                        "token {} after {}",
                        token,
                        self.last_token
                    );
                    self.last_token = token;
                    (handle, End::Granted(token))
                }
                Event::TimedOut { handle, .. } => (handle, End::TimedOut),
                other => return Err(TestCaseError::fail(format!("unexpected {other:?}"))),
            };
            prop_assert!(
                !self.cancelled.contains(&handle),
                "{} ended after cancel",
                handle
            );
            prop_assert!(
                self.ends.insert(handle, end).is_none(),
                "{} ended twice",
                handle
            );
        }
        Ok(())
    }
}

/// The same run through `LockService`, for the eager comparison: how each
/// acquire (by handle) ended, and the table.
pub fn service_run(ops: &[Op]) -> (HashMap<u64, End>, LockTable) {
    let mut svc = LockService::<u64>::new();
    let keys: Vec<Key> = (0..KEYS)
        .map(|i| Key::try_from(format!("key-{i}").as_str()).unwrap())
        .collect();
    let (mut now, mut ends, mut ids, mut handles) = (1_000, HashMap::new(), HashMap::new(), 0);
    let mut events = Vec::new();
    for op in ops {
        match *op {
            Op::Acquire(acquire) => {
                let AcquireOp {
                    key, wait, lease, ..
                } = acquire;
                let options = options(acquire.ask());
                let k = keys[key as usize].clone();
                match svc.acquire(Acquire::new(k, wait, lease, options), now, handles) {
                    AcquireOutcome::Granted { token } => {
                        ends.insert(handles, End::Granted(token));
                    }
                    AcquireOutcome::Queued { id } => {
                        ids.insert(handles, id);
                    }
                    AcquireOutcome::Refused(Refusal::Permits(n)) => {
                        ends.insert(handles, End::Refused(n));
                    }
                    AcquireOutcome::Refused(refusal) => {
                        panic!("refused without a quota: {refusal:?}")
                    }
                }
                handles += 1;
            }
            Op::SetValue { key, value } => {
                let k = &keys[key as usize];
                if let Some(holder) = svc.table().holder(k).copied() {
                    svc.set_value(k, holder.token, value.map(holder_value), now, &mut events);
                }
            }
            Op::Release { key, stale } => {
                let k = &keys[key as usize];
                if let Some(holder) = svc.table().holder(k).copied() {
                    let token = if stale {
                        stale_token(svc.table())
                    } else {
                        holder.token
                    };
                    svc.release(k, token, now, &mut events);
                }
            }
            Op::Renew { key, lease } => {
                let k = &keys[key as usize];
                if let Some(holder) = svc.table().holder(k).copied() {
                    svc.renew(k, holder.token, lease, now, &mut events);
                }
            }
            Op::Cancel { pick } => {
                if handles > 0 {
                    if let Some(id) = ids.get(&(pick as u64 % handles)) {
                        svc.cancel(*id);
                    }
                }
            }
            Op::Tick => svc.tick(now, &mut events),
            Op::Advance(ms) => now += ms,
            Op::Commit(_) => {}
        }
        for event in events.drain(..) {
            match event {
                Event::Granted { handle, token, .. } => ends.insert(handle, End::Granted(token)),
                Event::TimedOut { handle, .. } => ends.insert(handle, End::TimedOut),
                other => panic!("unexpected {other:?}"),
            };
        }
    }
    (ends, svc.table().clone())
}
