//! The lock rules, written once for every engine: who may take a key at
//! once, who is next when it is freed, which waits run out, what becomes
//! of a grant nobody holds. [`LockRules`] owns the wait queues and answers
//! over a [`LockTable`] its user owns; it never changes the table.
//!
//! A key has room for a grant when it is not held; or, held, when the
//! grant names the key's permits and either is exclusive with a permit
//! free (no shared holder), or is shared and the holders are shared. First
//! come, first served with no barging: a newcomer is granted at once only
//! if nobody waits; the head waiter is granted as soon as the key has room
//! for it, and nobody overtakes it, so when a key passes every shared
//! waiter at the head of the line (up to the first exclusive one) is
//! granted together. While a key has holders or waiters, an acquire
//! naming other permits is refused.
//!
//! Its answers are commands. [`crate::LockService`] applies them at once;
//! the Raft engine proposes them and applies them when the log commits
//! them. A grant decided and not yet applied counts against its key's room
//! (no grant beyond it is decided meanwhile) until the user reports the
//! grant applied ([`LockRules::grant_applied`]) or given up
//! ([`LockRules::grant_dropped`]).
//!
//! Invariant, checked by [`LockRules::validate`] where the user's rules
//! say it must hold: a key's head waiter has no room (whatever makes room
//! hands the key on), and every waiter of a key names its permits.

use crate::event::Event;
use crate::invariant::{ensure, Broken};
use crate::lock_mode::{Acquire, AcquireOptions, LockMode};
use crate::quota::{Quota, Refusal};
use crate::table::{has_room, Command, LockTable, Outcome};
use crate::waiters::{WaitQueues, Waiter, WaiterId};
use crate::{FastMap, Key, Millis, Token};

/// The grant of a freed key to its next waiter: apply `command` to the
/// table (now, or when the log commits it), then tell the rules with
/// [`LockRules::grant_applied`] what it did.
#[derive(Debug)]
pub struct Handover<H> {
    pub command: Command,
    pub waiter: Waiter<H>,
}

/// Grants of one key decided and not yet applied: how many, with the
/// permits and mode they share.
#[derive(Debug, Clone, Copy)]
struct OnTheWay {
    count: usize,
    permits: u32,
    mode: LockMode,
}

/// A key's permits, mode and grants, held and on their way.
#[derive(Debug, Clone, Copy)]
struct Shape {
    permits: u32,
    mode: LockMode,
    count: usize,
}

/// The wait queues and the rules that join them to a table.
#[derive(Debug)]
pub struct LockRules<H> {
    queues: WaitQueues<H>,
    /// Keys whose hand-overs are decided and not yet applied.
    granting: FastMap<Key, OnTheWay>,
    /// Hand-overs decided and not yet applied, over every key.
    granting_total: usize,
    quota: Quota,
}

impl<H> Default for LockRules<H> {
    fn default() -> Self {
        LockRules {
            queues: WaitQueues::new(),
            granting: FastMap::default(),
            granting_total: 0,
            quota: Quota::default(),
        }
    }
}

impl<H> LockRules<H> {
    pub fn new() -> Self {
        Self::default()
    }

    /// The caps on grants and waiters from now on. Lowering them below
    /// what is held or queued refuses new acquires until the state is
    /// back under them; nothing held or queued is dropped.
    pub fn set_quota(&mut self, quota: Quota) {
        self.quota = quota;
    }

    pub fn quota(&self) -> Quota {
        self.quota
    }

    /// Whether an acquire of `key` with `options` may go on: it names the
    /// key's permits if the key has holders, grants on their way or
    /// waiters; one that would be granted at once finds room for one more
    /// grant (counting those decided and not yet applied), one that would
    /// wait room for one more waiter. Call it before
    /// [`LockRules::grant_at_once`] or [`LockRules::queue`]; a refused
    /// acquire changes nothing.
    pub fn admit(
        &self,
        table: &LockTable,
        key: &Key,
        options: &AcquireOptions,
    ) -> Result<(), Refusal> {
        if let Some(permits) = self.permits_of(table, key) {
            if permits != options.permits {
                return Err(Refusal::Permits(permits));
            }
        }
        if self.grants_at_once(table, key, options) {
            let held = table.len().saturating_add(self.granting_total);
            return if held < self.quota.max_locks {
                Ok(())
            } else {
                Err(Refusal::TooManyLocks)
            };
        }
        if self.queues.len() < self.quota.max_waiters {
            Ok(())
        } else {
            Err(Refusal::TooManyWaiters)
        }
    }

    /// The permits `key` has while it has holders, grants on their way or
    /// waiters; `None` while it has none.
    pub fn permits_of(&self, table: &LockTable, key: &Key) -> Option<u32> {
        self.shape(table, key, None)
            .map(|shape| shape.permits)
            .or_else(|| self.queues.options_of(key).map(|o| o.permits))
    }

    /// The key's grants held (but the one with `released`, if given) and
    /// on their way; `None` if it has none.
    fn shape(&self, table: &LockTable, key: &Key, released: Option<Token>) -> Option<Shape> {
        let on_the_way = self.granting.get(key);
        let held = table.grants(key);
        let gone = released.is_some_and(|t| held.is_some_and(|g| g.holder(t).is_some()));
        let held_count = held.map_or(0, |g| g.len()) - usize::from(gone);
        // Grants on their way were decided after the held ones: when the
        // two differ in mode, the held ones are being released.
        let (permits, mode) = match (held, on_the_way) {
            (_, Some(w)) => (w.permits, w.mode),
            (Some(g), None) if held_count > 0 => (g.permits(), g.mode()),
            _ => return None,
        };
        Some(Shape {
            permits,
            mode,
            count: held_count + on_the_way.map_or(0, |w| w.count),
        })
    }

    /// Whether a grant of `key` with `options` could be decided now: the
    /// key has room for it (its grants held, but `released`, and on their
    /// way), and a fresh token is left to give.
    fn has_room(
        &self,
        table: &LockTable,
        key: &Key,
        options: &AcquireOptions,
        released: Option<Token>,
    ) -> bool {
        let tokens_left = table
            .last_token()
            .checked_add(self.granting_total as u64)
            .is_some_and(|t| t < Token::MAX);
        tokens_left
            && self
                .shape(table, key, released)
                .is_none_or(|s| has_room(s.permits, s.mode, s.count, options))
    }

    /// Whether `key` is free: not held, no grant of it on its way, and a
    /// fresh token left to give.
    pub fn is_free(&self, table: &LockTable, key: &Key) -> bool {
        self.shape(table, key, None).is_none()
            && self.has_room(table, key, &AcquireOptions::default(), None)
    }

    /// Whether an acquire of `key` with `options` would be granted at once:
    /// nobody waits for the key, and it has room.
    fn grants_at_once(&self, table: &LockTable, key: &Key, options: &AcquireOptions) -> bool {
        !self.queues.has_waiters(key) && self.has_room(table, key, options, None)
    }

    /// First come, first served: an acquire of a key with room for it that
    /// nobody waits for is granted at once (this grant, for the caller to
    /// apply); any other waits, since a newcomer never overtakes a waiter.
    pub fn grant_at_once(
        &self,
        table: &LockTable,
        key: &Key,
        lease_ms: u64,
        options: &AcquireOptions,
    ) -> Option<Command> {
        self.grants_at_once(table, key, options)
            .then(|| grant_command(key, lease_ms, options))
    }

    /// Queues an acquire at the back of its key's line. `wait_ms == 0`
    /// waits without limit, else until `now + wait_ms`.
    pub fn queue(&mut self, acquire: Acquire, now: Millis, handle: H) -> WaiterId {
        let wait_ms = acquire.wait_ms;
        let deadline = (wait_ms > 0).then(|| now.saturating_add(wait_ms));
        let Acquire { key, options, .. } = acquire;
        self.queues
            .push(key, acquire.lease_ms, deadline, options, handle)
    }

    /// Who gets `key` next at `now`: the oldest waiter still in time, if
    /// the key has room for it. Waiters out of time met on the way leave as
    /// [`Event::TimedOut`] (they must never be granted). `None` if nobody
    /// waits in time or the head waiter has no room; the caller asks again
    /// until `None`, as a key may pass to several waiters at once (free
    /// permits, or shared waiters at the head of the line).
    pub fn hand_on(
        &mut self,
        table: &LockTable,
        key: &Key,
        now: Millis,
        events: &mut Vec<Event<H>>,
    ) -> Option<Handover<H>> {
        self.next_waiter(table, key, None, now, events)
    }

    /// As [`LockRules::hand_on`] for a key whose grant with `token` the
    /// caller releases before the grants (a Raft leader puts them in one
    /// log entry, so a hand-over costs one commit). Whatever applies in
    /// between, an expiry or a duplicate release of the same grant, only
    /// makes room sooner.
    pub fn hand_on_behind_release(
        &mut self,
        table: &LockTable,
        key: &Key,
        token: Token,
        now: Millis,
        events: &mut Vec<Event<H>>,
    ) -> Option<Handover<H>> {
        self.next_waiter(table, key, Some(token), now, events)
    }

    fn next_waiter(
        &mut self,
        table: &LockTable,
        key: &Key,
        released: Option<Token>,
        now: Millis,
        events: &mut Vec<Event<H>>,
    ) -> Option<Handover<H>> {
        // Those out of time at the head of the line leave now, granted
        // or not: the head is then a waiter in time.
        let mut timed_out = Vec::new();
        let head = self
            .queues
            .front(key, now, &mut timed_out)
            .map(|w| w.options.clone());
        events.extend(timed_out.into_iter().map(timed_out_event));
        let options = head?;
        if !self.has_room(table, key, &options, released) {
            return None;
        }
        let waiter = self.queues.pop_next(key, now, &mut Vec::new())?;
        let on_the_way = self.granting.entry(key.clone()).or_insert(OnTheWay {
            count: 0,
            permits: options.permits,
            mode: options.mode,
        });
        on_the_way.count += 1;
        self.granting_total += 1;
        let command = grant_command(key, waiter.lease_ms, &waiter.options);
        Some(Handover { command, waiter })
    }

    /// A hand-over's grant applied with `outcome`: the key is no longer on
    /// its way. `Ok`: the waiter's grant. `Err`: the table refused it (the
    /// key was taken by a grant the rules did not decide, e.g. one still
    /// in the log from an earlier leadership) and the waiter is given back.
    pub fn grant_applied(
        &mut self,
        waiter: Waiter<H>,
        outcome: Outcome,
    ) -> Result<Event<H>, Waiter<H>> {
        self.grant_dropped(&waiter.key);
        Self::grant_outcome(waiter, outcome)
    }

    /// What a grant applied for `waiter` gives it (see
    /// [`LockRules::grant_applied`]), for a grant these rules did not
    /// decide (one of an earlier leadership).
    pub fn grant_outcome(waiter: Waiter<H>, outcome: Outcome) -> Result<Event<H>, Waiter<H>> {
        match outcome {
            Outcome::Granted { token } => Ok(Event::Granted {
                id: waiter.id,
                handle: waiter.handle,
                key: waiter.key,
                token,
            }),
            _ => Err(waiter),
        }
    }

    /// A waiter whose grant the table refused waits again, at the back of
    /// its key's line (the key is taken, so it is handed on when freed).
    pub fn requeue(&mut self, waiter: Waiter<H>) -> WaiterId {
        self.queues.push(
            waiter.key,
            waiter.lease_ms,
            waiter.deadline,
            waiter.options,
            waiter.handle,
        )
    }

    /// A hand-over's grant will not be applied for its waiter (its
    /// proposal failed): it is no longer on its way.
    pub fn grant_dropped(&mut self, key: &Key) {
        if let Some(on_the_way) = self.granting.get_mut(key) {
            on_the_way.count -= 1;
            self.granting_total -= 1;
            if on_the_way.count == 0 {
                self.granting.remove(key);
            }
        }
    }

    /// Every hand-over on its way is forgotten (the table was replaced, or
    /// its user stopped deciding grants).
    pub fn forget_grants(&mut self) {
        self.granting.clear();
        self.granting_total = 0;
    }

    /// Waiters whose wait ran out by `now` (deadline <= now) leave, as
    /// [`Event::TimedOut`], soonest deadline first. Timeouts come before
    /// the expiries of the same moment: a waiter whose time is up is never
    /// granted a key freed then.
    pub fn time_out(&mut self, now: Millis, events: &mut Vec<Event<H>>) {
        let mut timed_out = Vec::new();
        self.queues.take_timed_out(now, &mut timed_out);
        events.extend(timed_out.into_iter().map(timed_out_event));
    }

    /// The first lease of `table` that has run out by `now`, as the Expire
    /// command that ends it.
    pub fn due_expiry(table: &LockTable, now: Millis) -> Option<Command> {
        table
            .next_expiry()
            .filter(|(at, _, _)| *at <= now)
            .map(|(_, key, token)| Command::Expire {
                key: key.clone(),
                token,
            })
    }

    /// The expiry that a release, renewal or value set of `key`'s grant
    /// with `token` at `now` must apply instead, if that grant's lease has
    /// ended by then and its expiry is not yet applied. A lease ends at
    /// its end, not when its expiry happens to be applied: past it, the
    /// request finds no live grant (it is answered as for one never
    /// granted), and the key passes to its next waiter rather than back
    /// to a holder who may have paused past its lease.
    pub fn lapsed(table: &LockTable, key: &Key, token: Token, now: Millis) -> Option<Command> {
        table
            .grant_of(key, token)
            .filter(|holder| holder.expires_at <= now)
            .map(|_| Command::Expire {
                key: key.clone(),
                token,
            })
    }

    /// The earliest of the next waiter deadline and `lease`, the end of the
    /// lease the user expires next: the one timer to arm.
    pub fn next_deadline(&self, lease: Option<Millis>) -> Option<Millis> {
        match (self.queues.next_deadline(), lease) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// A waiter leaves (its connection closed); whether it was queued.
    /// Nothing is handed on here: see [`LockRules::withdraw`].
    pub fn cancel(&mut self, id: WaiterId) -> bool {
        self.withdraw(id).is_some()
    }

    /// A waiter leaves (its connection closed); its key if it was queued.
    /// A waiter that leaves the head of a line may let the next one in (an
    /// exclusive waiter ahead of shared ones on a shared key): the caller
    /// hands the key on if [`LockRules::head_has_room`] says so.
    pub fn withdraw(&mut self, id: WaiterId) -> Option<Key> {
        self.queues.cancel(id).map(|w| w.key)
    }

    /// Whether `key`'s oldest waiter still in time at `now` has room: the
    /// key must be handed on.
    pub fn head_has_room(&self, table: &LockTable, key: &Key, now: Millis) -> bool {
        self.queues
            .first_in_time(key, now)
            .is_some_and(|head| self.has_room(table, key, &head.options, None))
    }

    /// Every queued waiter, taken out oldest first (a node that stops
    /// serving redirects them all).
    pub fn drain_waiters(&mut self) -> Vec<Waiter<H>> {
        self.queues.drain_all()
    }

    pub fn waiter_count(&self) -> usize {
        self.queues.len()
    }

    /// Acquires queued on `key`.
    pub fn waiting_on(&self, key: &Key) -> usize {
        self.queues.waiting_on(key)
    }

    /// The keys that have live waiters.
    pub fn waited_on(&self) -> Vec<Key> {
        self.queues.keys().cloned().collect()
    }

    /// Whether a grant of `key` is decided and not yet applied.
    pub fn is_granting(&self, key: &Key) -> bool {
        self.granting.contains_key(key)
    }

    /// Hand-overs decided and not yet applied.
    pub fn granting_count(&self) -> usize {
        self.granting_total
    }

    /// Checks the queues, that no key's head waiter has room (call it
    /// where the user's rules say that must hold), and that every waiter of
    /// a key names the key's permits.
    pub fn validate(&self, table: &LockTable) -> Result<(), Broken> {
        self.validate_but(table, &[])
    }

    /// [`LockRules::validate`], but for the keys in `stalled`, whose head
    /// may have room until the user hands them on.
    pub fn validate_but(&self, table: &LockTable, stalled: &[Key]) -> Result<(), Broken> {
        self.queues.validate()?;
        let on_the_way: usize = self.granting.values().map(|w| w.count).sum();
        ensure(on_the_way == self.granting_total, || {
            format!(
                "{on_the_way} grants on their way, {} counted",
                self.granting_total
            )
        })?;
        for key in self.queues.keys() {
            let mut waiters = self.queues.waiters_of(key);
            let Some(head) = waiters.next() else {
                continue;
            };
            let waits = stalled.contains(key) || !self.has_room(table, key, &head.options, None);
            ensure(waits, || {
                format!(
                    "{key:?}'s head waiter has room, with {} live waiters",
                    self.queues.waiting_on(key)
                )
            })?;
            let permits = self
                .shape(table, key, None)
                .map_or(head.options.permits, |s| s.permits);
            ensure(
                std::iter::once(head)
                    .chain(waiters)
                    .all(|w| w.options.permits == permits),
                || format!("{key:?}'s waiters name other permits than its {permits}"),
            )?;
        }
        Ok(())
    }

    /// Whether a full check after each change is cheap enough for a debug
    /// build (see [`crate::invariant::FULL_CHECK_UP_TO`]).
    pub fn small(&self, table: &LockTable) -> bool {
        let limit = crate::invariant::FULL_CHECK_UP_TO;
        self.queues.len() <= limit && table.small()
    }
}

/// The grant of `key` for `options`: the 1.1 command for a plain one, so
/// that what a node journals for a plain key stays what 1.1 nodes read.
fn grant_command(key: &Key, lease_ms: u64, options: &AcquireOptions) -> Command {
    if options.is_plain() {
        Command::Grant {
            key: key.clone(),
            lease_ms,
        }
    } else {
        Command::GrantWith {
            key: key.clone(),
            lease_ms,
            options: options.clone(),
        }
    }
}

fn timed_out_event<H>(w: Waiter<H>) -> Event<H> {
    Event::TimedOut {
        id: w.id,
        handle: w.handle,
        key: w.key,
    }
}

#[cfg(test)]
#[path = "rules_tests.rs"]
mod tests;
