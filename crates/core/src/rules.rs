//! The lock rules, written once for every engine: who may take a key at
//! once, who is next when it is freed, which waits run out, what becomes
//! of a grant nobody holds. [`LockRules`] owns the wait queues and answers
//! over a [`LockTable`] its user owns; it never changes the table.
//!
//! Its answers are commands. [`crate::LockService`] applies them at once;
//! the Raft engine proposes them and applies them when the log commits
//! them. A grant decided and not yet applied keeps its key taken (no second
//! grant of it is decided meanwhile) until the user reports the grant
//! applied ([`LockRules::grant_applied`]) or given up ([`LockRules::grant_dropped`]).
//!
//! Invariant, checked by [`LockRules::validate`] where the user's rules
//! say it must hold: a key that is free (not held, no grant on its way,
//! tokens left) has no live waiters, because whatever frees a key hands it on.

use crate::event::Event;
use crate::invariant::{ensure, Broken};
use crate::quota::{Quota, Refusal};
use crate::table::{Command, LockTable, Outcome};
use crate::waiters::{WaitQueues, Waiter, WaiterId};
use crate::{FastSet, Key, Millis, Token};

/// The grant of a freed key to its next waiter: apply `command` to the
/// table (now, or when the log commits it), then tell the rules with
/// [`LockRules::grant_applied`] what it did.
#[derive(Debug)]
pub struct Handover<H> {
    pub command: Command,
    pub waiter: Waiter<H>,
}

/// The wait queues and the rules that join them to a table.
#[derive(Debug)]
pub struct LockRules<H> {
    queues: WaitQueues<H>,
    /// Keys whose hand-over is decided and not yet applied.
    granting: FastSet<Key>,
    quota: Quota,
}

impl<H> Default for LockRules<H> {
    fn default() -> Self {
        LockRules {
            queues: WaitQueues::new(),
            granting: FastSet::default(),
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

    /// Whether an acquire of `key` stays within the quota: one that would
    /// be granted at once must find room for one more grant (counting
    /// those decided and not yet applied), one that would wait room for
    /// one more waiter. Call it before [`LockRules::grant_at_once`] or
    /// [`LockRules::queue`]; a refused acquire changes nothing.
    pub fn admit(&self, table: &LockTable, key: &Key) -> Result<(), Refusal> {
        let at_once = self.is_free(table, key) && !self.queues.has_waiters(key);
        if at_once {
            let held = table.len().saturating_add(self.granting.len());
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

    /// Whether a grant of `key` could be decided now: not held, no grant
    /// of it on its way, and a fresh token left to give.
    pub fn is_free(&self, table: &LockTable, key: &Key) -> bool {
        table.holder(key).is_none()
            && !self.granting.contains(key)
            && table.last_token() < Token::MAX
    }

    /// First come, first served: an acquire of a free key nobody waits for
    /// is granted at once (this Grant, for the caller to apply); any other
    /// waits, since a newcomer never overtakes a waiter.
    pub fn grant_at_once(&self, table: &LockTable, key: &Key, lease_ms: u64) -> Option<Command> {
        (self.is_free(table, key) && !self.queues.has_waiters(key)).then(|| Command::Grant {
            key: key.clone(),
            lease_ms,
        })
    }

    /// Queues an acquire at the back of `key`'s line. `wait_ms == 0`
    /// waits without limit, else until `now + wait_ms`.
    pub fn queue(
        &mut self,
        key: Key,
        wait_ms: u64,
        lease_ms: u64,
        now: Millis,
        handle: H,
    ) -> WaiterId {
        let deadline = (wait_ms > 0).then(|| now.saturating_add(wait_ms));
        self.queues.push(key, lease_ms, deadline, handle)
    }

    /// Who gets `key`, free at `now`: the oldest waiter still in time.
    /// Waiters out of time met on the way leave as [`Event::TimedOut`]
    /// (they must never be granted). `None` if the key is not free or
    /// nobody waits in time.
    pub fn hand_on(
        &mut self,
        table: &LockTable,
        key: &Key,
        now: Millis,
        events: &mut Vec<Event<H>>,
    ) -> Option<Handover<H>> {
        if !self.is_free(table, key) {
            return None;
        }
        self.next_waiter(key, now, events)
    }

    /// As [`LockRules::hand_on`] for a key still held with `token`, whose
    /// release the caller orders before the grant (a Raft leader puts
    /// both in one log entry, so a hand-over costs one commit). Whatever
    /// applies in between, an expiry or a duplicate release of the same
    /// grant, only frees the key sooner.
    pub fn hand_on_behind_release(
        &mut self,
        table: &LockTable,
        key: &Key,
        token: Token,
        now: Millis,
        events: &mut Vec<Event<H>>,
    ) -> Option<Handover<H>> {
        let released = table.holder(key).is_none_or(|h| h.token == token);
        if !released || self.granting.contains(key) || table.last_token() == Token::MAX {
            return None;
        }
        self.next_waiter(key, now, events)
    }

    fn next_waiter(
        &mut self,
        key: &Key,
        now: Millis,
        events: &mut Vec<Event<H>>,
    ) -> Option<Handover<H>> {
        let mut timed_out = Vec::new();
        let next = self.queues.pop_next(key, now, &mut timed_out);
        events.extend(timed_out.into_iter().map(timed_out_event));
        let waiter = next?;
        self.granting.insert(key.clone());
        let command = Command::Grant {
            key: key.clone(),
            lease_ms: waiter.lease_ms,
        };
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
        self.granting.remove(&waiter.key);
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
        self.queues
            .push(waiter.key, waiter.lease_ms, waiter.deadline, waiter.handle)
    }

    /// A hand-over's grant will not be applied for its waiter (its
    /// proposal failed): the key is no longer on its way.
    pub fn grant_dropped(&mut self, key: &Key) {
        self.granting.remove(key);
    }

    /// Every hand-over on its way is forgotten (the table was replaced, or
    /// its user stopped deciding grants).
    pub fn forget_grants(&mut self) {
        self.granting.clear();
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

    /// The earliest of the next waiter deadline and `lease`, the end of the
    /// lease the user expires next: the one timer to arm.
    pub fn next_deadline(&self, lease: Option<Millis>) -> Option<Millis> {
        match (self.queues.next_deadline(), lease) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// A waiter leaves (its connection closed); whether it was queued.
    /// Nothing is handed on: a key with waiters is taken.
    pub fn cancel(&mut self, id: WaiterId) -> bool {
        self.queues.cancel(id).is_some()
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
        self.granting.contains(key)
    }

    /// Hand-overs decided and not yet applied.
    pub fn granting_count(&self) -> usize {
        self.granting.len()
    }

    /// Checks the queues, and that a free key has no live waiters (call it
    /// where the user's rules say that must hold).
    pub fn validate(&self, table: &LockTable) -> Result<(), Broken> {
        self.queues.validate()?;
        for key in self.queues.keys() {
            ensure(!self.is_free(table, key), || {
                format!(
                    "{key:?} is free with {} live waiters",
                    self.queues.waiting_on(key)
                )
            })?;
        }
        Ok(())
    }

    /// Whether a full check after each change is cheap enough for a debug
    /// build (see [`crate::invariant::FULL_CHECK_UP_TO`]).
    pub fn small(&self, table: &LockTable) -> bool {
        let limit = crate::invariant::FULL_CHECK_UP_TO;
        self.queues.len() <= limit && table.len() <= limit
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
