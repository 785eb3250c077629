//! The lock service of the node that serves clients directly (a single node,
//! or the active node of the priority cluster): the lock table plus the wait
//! queues, with the rules that join them — first come, first served, and a
//! freed key passes at once to the oldest waiter still in time.
//!
//! Invariant kept by every method: a key that is free has no live waiters,
//! because whatever frees a key hands it on in the same call.

use crate::encoded::{CommandEncoder, EncodedCommands};
use crate::event::Event;
use crate::holder_value::HolderValue;
use crate::invariant::{debug_check, Broken};
use crate::lock_mode::Acquire;
use crate::query::KeyState;
use crate::quota::{Quota, Refusal};
use crate::rules::LockRules;
use crate::table::{Command, LockTable, Outcome};
use crate::waiters::{Waiter, WaiterId};
use crate::{Key, Millis, Token};

/// Most leases one tick expires. As many leases may lapse together as
/// are held (a fleet that lost its network at once), and expired all in
/// one tick they would hold the node, every request waiting, for as long
/// as that takes. The rest stay due: the timer ticks again at once, and
/// the requests that queued for the node meanwhile go in between. A few
/// milliseconds of work a tick.
pub const MAX_EXPIRIES_PER_TICK: usize = 4_096;

/// What became of an acquire.
#[derive(Debug, PartialEq, Eq)]
pub enum AcquireOutcome {
    Granted {
        token: Token,
    },
    /// Waiting in the key's queue; an [`Event`] will say how it ends.
    Queued {
        id: WaiterId,
    },
    /// Past the [`Quota`]: nothing was granted or queued.
    Refused(Refusal),
}

/// Table and queues of the serving node. `H` is an opaque handle the caller
/// uses to answer a waiter; the service never looks inside it.
#[derive(Debug)]
pub struct LockService<H> {
    table: LockTable,
    rules: LockRules<H>,
    journal: Option<CommandEncoder>,
    /// Commands that changed the table, ever: what a node that saves its
    /// table counts its changes by.
    changes: u64,
    /// Grants whose lease ran out and that a tick ended, ever.
    expiries: u64,
    /// Keys whose holders or values changed since the last drain, when
    /// the user watches keys ([`LockService::track_changes`]).
    changed_keys: Option<Vec<Key>>,
    /// The table was replaced whole since the last drain: any key may
    /// have changed.
    replaced: bool,
    /// Keys whose head waiter has room since a waiter ahead of it left:
    /// handed on at the next tick, which [`LockService::next_deadline`]
    /// makes due at once.
    stalled: Vec<Key>,
}

impl<H> Default for LockService<H> {
    fn default() -> Self {
        Self::from_table(LockTable::new())
    }
}

impl<H> LockService<H> {
    pub fn new() -> Self {
        Self::default()
    }

    /// E.g. a standby promoted with a replicated table.
    pub fn from_table(table: LockTable) -> Self {
        Self {
            table,
            rules: LockRules::new(),
            journal: None,
            changes: 0,
            expiries: 0,
            changed_keys: None,
            replaced: false,
            stalled: Vec::new(),
        }
    }

    /// The single door to the table, so the journal sees every change.
    /// Commands that changed nothing (a stale release, a refused grant) are
    /// left out of the journal: replaying them would change nothing either.
    fn apply(&mut self, cmd: Command, now: Millis) -> Outcome {
        let floor_before = self.table.last_token();
        let outcome = self.table.apply(&cmd, now);
        let holders_changed = match outcome {
            Outcome::Granted { .. } | Outcome::Released | Outcome::ValueSet => true,
            Outcome::Expired { existed } => existed,
            Outcome::Renewed | Outcome::Noop | Outcome::GrantRejected | Outcome::NotFound => false,
        };
        let changed = holders_changed
            || outcome == Outcome::Renewed
            || (outcome == Outcome::Noop && self.table.last_token() != floor_before);
        if changed {
            self.changes += 1;
            if let Some(journal) = &mut self.journal {
                journal.push(&cmd);
            }
        }
        if let (true, Some(keys), Some(key)) = (holders_changed, &mut self.changed_keys, cmd.key())
        {
            keys.push(key.clone());
        }
        outcome
    }

    /// `wait_ms == 0` means wait without limit; else deadline = now + wait_ms.
    /// Key with room AND no live waiters on it -> Grant applied now -> Granted.
    /// Otherwise queued (FIFO: a new acquire never overtakes queued waiters).
    /// Past the quota, or naming other permits than the key has while it
    /// has holders or waiters, refused with nothing changed.
    /// The handle is dropped when granted at once.
    pub fn acquire(&mut self, acquire: Acquire, now: Millis, handle: H) -> AcquireOutcome {
        let (key, options) = (&acquire.key, &acquire.options);
        if let Err(refusal) = self.rules.admit(&self.table, key, options) {
            return AcquireOutcome::Refused(refusal);
        }
        let at_once = self
            .rules
            .grant_at_once(&self.table, key, acquire.lease_ms, options);
        if let Some(grant) = at_once {
            if let Outcome::Granted { token } = self.apply(grant, now) {
                self.debug_validate();
                return AcquireOutcome::Granted { token };
            }
            debug_assert!(false, "a key with room refused a grant");
        }
        let id = self.rules.queue(acquire, now, handle);
        self.debug_validate();
        AcquireOutcome::Queued { id }
    }

    /// Sets (`None`: clears) the value of `key`'s grant with `token`:
    /// [`Outcome::ValueSet`], or [`Outcome::NotFound`] if no live grant of
    /// the key has this token (one whose lease ended by `now` is expired
    /// here and handed on, as by [`LockService::release`]).
    pub fn set_value(
        &mut self,
        key: &Key,
        token: Token,
        value: Option<HolderValue>,
        now: Millis,
        events: &mut Vec<Event<H>>,
    ) -> Outcome {
        if self.expire_if_lapsed(key, token, now, events) {
            return Outcome::NotFound;
        }
        let command = Command::SetValue {
            key: key.clone(),
            token,
            value,
        };
        let outcome = self.apply(command, now);
        self.debug_validate();
        outcome
    }

    /// From now on, the keys whose holders or values change are kept for
    /// [`LockService::drain_changed_keys`] (a node with watches).
    pub fn track_changes(&mut self) {
        self.changed_keys.get_or_insert_with(Vec::new);
    }

    /// The keys whose holders or values changed since the last call, in
    /// the order they changed (a key may come more than once); `None`
    /// when the table was replaced whole meanwhile (any key may have).
    pub fn drain_changed_keys(&mut self) -> Option<Vec<Key>> {
        let keys = self
            .changed_keys
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default();
        (!std::mem::take(&mut self.replaced)).then_some(keys)
    }

    /// Release; on success the key passes AT ONCE to the oldest live waiter
    /// (new Grant, Event::Granted pushed to `events`); waiters found timed out
    /// on the way are pushed as Event::TimedOut. A grant whose lease ended
    /// by `now` is no longer held, even if its expiry was not applied yet:
    /// the release is [`Outcome::NotFound`], and the expiry is applied
    /// now, handing the key on the same way.
    pub fn release(
        &mut self,
        key: &Key,
        token: Token,
        now: Millis,
        events: &mut Vec<Event<H>>,
    ) -> Outcome {
        if self.expire_if_lapsed(key, token, now, events) {
            return Outcome::NotFound;
        }
        let outcome = self.apply(
            Command::Release {
                key: key.clone(),
                token,
            },
            now,
        );
        if outcome == Outcome::Released {
            self.hand_on(key, now, events);
        }
        self.debug_validate();
        outcome
    }

    /// Renewal: the lease of `key`'s grant with `token` ends `lease_ms`
    /// from `now`. A grant whose lease ended by `now` is not renewed: as
    /// for [`LockService::release`], it is [`Outcome::NotFound`] and the
    /// key passes to its next waiter.
    pub fn renew(
        &mut self,
        key: &Key,
        token: Token,
        lease_ms: u64,
        now: Millis,
        events: &mut Vec<Event<H>>,
    ) -> Outcome {
        if self.expire_if_lapsed(key, token, now, events) {
            return Outcome::NotFound;
        }
        let outcome = self.apply(
            Command::Renew {
                key: key.clone(),
                token,
                lease_ms,
            },
            now,
        );
        self.debug_validate();
        outcome
    }

    /// A waiter leaves (its connection closed). Returns whether it was still
    /// queued. Nothing is handed on: a key with waiters is held.
    pub fn cancel(&mut self, id: WaiterId) -> bool {
        let Some(key) = self.rules.withdraw(id) else {
            return false;
        };
        // Any `now` will do: a waiter out of time is not granted at the tick.
        if self.rules.head_has_room(&self.table, &key, 0) {
            self.stalled.push(key);
        }
        true
    }

    /// Does everything due at `now`: waiters whose deadline <= now time out
    /// (Event::TimedOut) FIRST, then leases with expires_at <= now expire
    /// (Expire command), soonest first and at most `MAX_EXPIRIES_PER_TICK`,
    /// and pass to the oldest live waiter (Event::Granted).
    pub fn tick(&mut self, now: Millis, events: &mut Vec<Event<H>>) {
        let first = events.len();
        self.rules.time_out(now, events);
        // A waiter that leaves the head of a line may let the next in.
        let mut freed: Vec<Key> = std::mem::take(&mut self.stalled);
        freed.extend(events[first..].iter().filter_map(|e| match e {
            Event::TimedOut { key, .. } => Some(key.clone()),
            _ => None,
        }));
        for key in freed {
            self.hand_on(&key, now, events);
        }
        // One expiry at a time: handing a key on changes the index being read.
        // At most a bound per tick: the rest stay due, and the next tick
        // runs as soon as this one lets the requests waiting for the node in.
        for _ in 0..MAX_EXPIRIES_PER_TICK {
            let Some(expire) = LockRules::<H>::due_expiry(&self.table, now) else {
                break;
            };
            let Command::Expire { key, .. } = &expire else {
                break;
            };
            let key = key.clone();
            self.expire(expire, &key, now, events);
        }
        self.debug_validate();
    }

    /// Applies the expiry of `key`'s grant with `token` if its lease ended
    /// by `now` (see [`LockRules::lapsed`]); whether it did.
    fn expire_if_lapsed(
        &mut self,
        key: &Key,
        token: Token,
        now: Millis,
        events: &mut Vec<Event<H>>,
    ) -> bool {
        let Some(expire) = LockRules::<H>::lapsed(&self.table, key, token, now) else {
            return false;
        };
        self.expire(expire, key, now, events);
        self.debug_validate();
        true
    }

    /// Applies `expire`, an expiry of `key`, and hands the key on.
    fn expire(&mut self, expire: Command, key: &Key, now: Millis, events: &mut Vec<Event<H>>) {
        let outcome = self.apply(expire, now);
        self.expiries += u64::from(outcome == Outcome::Expired { existed: true });
        self.hand_on(key, now, events);
    }

    /// Grants `key`, which just made room, to its waiters still in time,
    /// oldest first, at once, while it has room for the next.
    fn hand_on(&mut self, key: &Key, now: Millis, events: &mut Vec<Event<H>>) {
        while let Some(handover) = self.rules.hand_on(&self.table, key, now, events) {
            let outcome = self.apply(handover.command, now);
            match self.rules.grant_applied(handover.waiter, outcome) {
                Ok(granted) => events.push(granted),
                Err(waiter) => {
                    // The rules decide grants only for keys with room, and
                    // this one applied at once: a refusal means they fell
                    // out of step with the table. Answering the waiter
                    // beats losing it.
                    debug_assert!(false, "a hand-over to a key with room was refused");
                    events.push(Event::TimedOut {
                        id: waiter.id,
                        handle: waiter.handle,
                        key: waiter.key,
                    });
                }
            }
        }
    }

    /// Earliest of the next lease expiry and the next waiter deadline: the one timer to arm.
    pub fn next_deadline(&self) -> Option<Millis> {
        if !self.stalled.is_empty() {
            return Some(0);
        }
        let lease = self.table.next_expiry().map(|(at, _, _)| at);
        self.rules.next_deadline(lease)
    }

    /// `Q <key>`: the key's live grant and waiters at `now`.
    pub fn query(&self, key: &Key, now: Millis) -> KeyState {
        KeyState::of(&self.table, key, self.rules.waiting_on(key), now)
    }

    /// The caps on grants and waiters (see [`LockRules::set_quota`]).
    pub fn set_quota(&mut self, quota: Quota) {
        self.rules.set_quota(quota);
    }

    pub fn table(&self) -> &LockTable {
        &self.table
    }

    /// Number of queued acquires on all keys.
    pub fn waiter_count(&self) -> usize {
        self.rules.waiter_count()
    }

    /// Raises the token floor; goes through the journal as RaiseTokenFloor.
    pub fn raise_token_floor(&mut self, floor: Token) {
        self.apply(Command::RaiseTokenFloor { floor }, 0);
    }

    /// Replication support: when enabled, every command that changes the
    /// table is appended to a journal, encoded, in the order applied. All
    /// commands of one call share that call's `now`.
    pub fn enable_journal(&mut self) {
        self.journal.get_or_insert_with(CommandEncoder::default);
    }

    /// The commands journaled since the last drain; empty when disabled.
    pub fn drain_journal(&mut self) -> EncodedCommands {
        self.journal
            .as_mut()
            .map(CommandEncoder::take)
            .unwrap_or_default()
    }

    /// How many commands changed the table since this service was made
    /// (journal or not): a stale release, a refused grant count nothing.
    pub fn changes(&self) -> u64 {
        self.changes
    }

    /// How many grants a tick ended because their lease ran out, since
    /// this service was made (for the metrics).
    pub fn expiries(&self) -> u64 {
        self.expiries
    }

    /// Applies a command replicated from the serving node, as a standby
    /// does: the table changes, no waiter is touched, nothing is journaled
    /// (the standby is not the one replicating).
    pub fn apply_replicated(&mut self, cmd: &Command, now: Millis) -> Outcome {
        self.table.apply(cmd, now)
    }

    /// Replaces the table with a copy received whole (a standby syncing,
    /// or a successor taking over). Queued waiters are kept.
    pub fn replace_table(&mut self, table: LockTable) {
        self.table = table;
        self.replaced = self.changed_keys.is_some();
    }

    /// Whether commands wait in the journal to be replicated.
    pub fn has_journal(&self) -> bool {
        self.journal.as_ref().is_some_and(|j| !j.is_empty())
    }

    /// Takes every queued waiter out, oldest first (a node that stops
    /// serving redirects them all).
    pub fn drain_waiters(&mut self) -> Vec<Waiter<H>> {
        self.stalled.clear();
        self.rules.drain_waiters()
    }

    /// Checks the table, the queues, and that a free key has no live
    /// waiters. Holds after every call but [`LockService::apply_replicated`]
    /// and [`LockService::replace_table`], which change the table under
    /// the waiters (a standby has none; a successor keeps them).
    pub fn validate(&self) -> Result<(), Broken> {
        self.table.validate()?;
        self.rules.validate_but(&self.table, &self.stalled)?;
        crate::invariant::ensure(self.rules.granting_count() == 0, || {
            "a hand-over left undone".to_string()
        })
    }

    fn debug_validate(&self) {
        debug_check(self.rules.small(&self.table), || self.validate());
    }
}

#[cfg(test)]
#[path = "service_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "service_kinds_tests.rs"]
mod kinds_tests;
