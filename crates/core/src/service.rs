//! The lock service of the node that serves clients directly (a single node,
//! or the active node of the priority cluster): the lock table plus the wait
//! queues, with the rules that join them — first come, first served, and a
//! freed key passes at once to the oldest waiter still in time.
//!
//! Invariant kept by every method: a key that is free has no live waiters,
//! because whatever frees a key hands it on in the same call.

use crate::event::Event;
use crate::invariant::{debug_check, Broken};
use crate::query::KeyState;
use crate::quota::{Quota, Refusal};
use crate::rules::LockRules;
use crate::table::{Command, LockTable, Outcome};
use crate::waiters::{Waiter, WaiterId};
use crate::{Key, Millis, Token};

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
    journal: Option<Vec<Command>>,
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
        }
    }

    /// The single door to the table, so the journal sees every change.
    /// Commands that changed nothing (a stale release, a refused grant) are
    /// left out of the journal: replaying them would change nothing either.
    fn apply(&mut self, cmd: Command, now: Millis) -> Outcome {
        let floor_before = self.table.last_token();
        let outcome = self.table.apply(&cmd, now);
        let changed = match outcome {
            Outcome::Granted { .. } | Outcome::Released | Outcome::Renewed => true,
            Outcome::Expired { existed } => existed,
            Outcome::Noop => self.table.last_token() != floor_before,
            Outcome::GrantRejected | Outcome::NotFound => false,
        };
        if changed {
            if let Some(journal) = &mut self.journal {
                journal.push(cmd);
            }
        }
        outcome
    }

    /// wait_ms == 0 means wait without limit; else deadline = now + wait_ms.
    /// Key free AND no live waiters on it -> Grant applied now -> Granted.
    /// Otherwise queued (FIFO: a new acquire never overtakes queued waiters).
    /// Past the quota, refused with nothing changed.
    /// The handle is dropped when granted at once.
    pub fn acquire(
        &mut self,
        key: Key,
        wait_ms: u64,
        lease_ms: u64,
        now: Millis,
        handle: H,
    ) -> AcquireOutcome {
        if let Err(refusal) = self.rules.admit(&self.table, &key) {
            return AcquireOutcome::Refused(refusal);
        }
        if let Some(grant) = self.rules.grant_at_once(&self.table, &key, lease_ms) {
            if let Outcome::Granted { token } = self.apply(grant, now) {
                self.debug_validate();
                return AcquireOutcome::Granted { token };
            }
            debug_assert!(false, "a free key refused a grant");
        }
        let id = self.rules.queue(key, wait_ms, lease_ms, now, handle);
        self.debug_validate();
        AcquireOutcome::Queued { id }
    }

    /// Release; on success the key passes AT ONCE to the oldest live waiter
    /// (new Grant, Event::Granted pushed to `events`); waiters found timed out
    /// on the way are pushed as Event::TimedOut.
    pub fn release(
        &mut self,
        key: &Key,
        token: Token,
        now: Millis,
        events: &mut Vec<Event<H>>,
    ) -> Outcome {
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

    pub fn renew(&mut self, key: &Key, token: Token, lease_ms: u64, now: Millis) -> Outcome {
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
        let queued = self.rules.cancel(id);
        self.debug_validate();
        queued
    }

    /// Does everything due at `now`: waiters whose deadline <= now time out
    /// (Event::TimedOut) FIRST, then leases with expires_at <= now expire
    /// (Expire command) and pass to the oldest live waiter (Event::Granted).
    pub fn tick(&mut self, now: Millis, events: &mut Vec<Event<H>>) {
        self.rules.time_out(now, events);
        // One expiry at a time: handing a key on changes the index being read.
        // Each round removes a lease or a waiter, so the loop ends.
        while let Some(expire) = LockRules::<H>::due_expiry(&self.table, now) {
            let Command::Expire { key, .. } = &expire else {
                break;
            };
            let key = key.clone();
            self.apply(expire, now);
            self.hand_on(&key, now, events);
        }
        self.debug_validate();
    }

    /// Grants the just-freed `key` to its oldest waiter still in time, at once.
    fn hand_on(&mut self, key: &Key, now: Millis, events: &mut Vec<Event<H>>) {
        let Some(handover) = self.rules.hand_on(&self.table, key, now, events) else {
            return;
        };
        let outcome = self.apply(handover.command, now);
        match self.rules.grant_applied(handover.waiter, outcome) {
            Ok(granted) => events.push(granted),
            Err(waiter) => {
                // The rules decide grants only for free keys, and this one
                // applied at once: a refusal means they fell out of step
                // with the table. Answering the waiter beats losing it.
                debug_assert!(false, "a hand-over of a free key was refused");
                events.push(Event::TimedOut {
                    id: waiter.id,
                    handle: waiter.handle,
                    key: waiter.key,
                });
            }
        }
    }

    /// Earliest of the next lease expiry and the next waiter deadline: the one timer to arm.
    pub fn next_deadline(&self) -> Option<Millis> {
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
    /// table is appended to a journal, in the order applied. All commands
    /// of one call share that call's `now`.
    pub fn enable_journal(&mut self) {
        self.journal.get_or_insert_with(Vec::new);
    }

    /// The commands journaled since the last drain; empty when disabled.
    pub fn drain_journal(&mut self) -> Vec<Command> {
        self.journal
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
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
    }

    /// Whether commands wait in the journal to be replicated.
    pub fn has_journal(&self) -> bool {
        self.journal.as_ref().is_some_and(|j| !j.is_empty())
    }

    /// Takes every queued waiter out, oldest first (a node that stops
    /// serving redirects them all).
    pub fn drain_waiters(&mut self) -> Vec<Waiter<H>> {
        self.rules.drain_waiters()
    }

    /// Checks the table, the queues, and that a free key has no live
    /// waiters. Holds after every call but [`LockService::apply_replicated`]
    /// and [`LockService::replace_table`], which change the table under
    /// the waiters (a standby has none; a successor keeps them).
    pub fn validate(&self) -> Result<(), Broken> {
        self.table.validate()?;
        self.rules.validate(&self.table)?;
        crate::invariant::ensure(self.rules.granting_count() == 0, || {
            "a hand-over left undone".to_string()
        })
    }

    fn debug_validate(&self) {
        debug_check(self.rules.small(&self.table), || self.validate());
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test
mod tests {
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
        let t = granted(s.acquire(key("a"), 0, 100, 5, 1));
        assert_eq!(t, 1);
        assert_eq!(s.waiter_count(), 0);
        assert_eq!(s.table().holder(&key("a")).map(|h| h.expires_at), Some(105));
        assert_eq!(s.next_deadline(), Some(105));
    }

    #[test]
    fn release_hands_the_key_to_waiters_in_order() {
        let mut s = LockService::<u32>::new();
        let t1 = granted(s.acquire(key("a"), 0, 100, 0, 1));
        let w2 = queued(s.acquire(key("a"), 0, 200, 1, 2));
        let w3 = queued(s.acquire(key("a"), 0, 300, 2, 3));
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
        let t1 = granted(s.acquire(key("a"), 0, 100, 0, 1));
        let w2 = queued(s.acquire(key("a"), 0, 100, 0, 2));
        let mut events = Vec::new();
        s.release(&key("a"), t1, 1, &mut events);
        // The key passed to w2 inside release, so a newcomer queues.
        let w3 = queued(s.acquire(key("a"), 0, 100, 1, 3));
        assert!(w3 > w2);
        assert_eq!(summary(&events), vec![(w2, 2, "a".into(), Some(2))]);
    }

    #[test]
    fn stale_release_and_renew_change_nothing() {
        let mut s = LockService::<u32>::new();
        let t1 = granted(s.acquire(key("a"), 0, 100, 0, 1));
        queued(s.acquire(key("a"), 0, 100, 0, 2));
        s.enable_journal();
        let before = s.table().clone();
        let mut events = Vec::new();
        assert_eq!(
            s.release(&key("a"), t1 + 1, 5, &mut events),
            Outcome::NotFound
        );
        assert_eq!(s.release(&key("b"), t1, 5, &mut events), Outcome::NotFound);
        assert_eq!(s.renew(&key("a"), t1 + 1, 500, 5), Outcome::NotFound);
        assert!(events.is_empty());
        assert_eq!(s.table(), &before);
        assert_eq!(s.waiter_count(), 1);
        assert!(s.drain_journal().is_empty());
        assert_eq!(s.renew(&key("a"), t1, 500, 5), Outcome::Renewed);
        assert_eq!(s.table().holder(&key("a")).map(|h| h.expires_at), Some(505));
    }

    #[test]
    fn a_timed_out_waiter_is_never_granted() {
        let mut s = LockService::<u32>::new();
        let t1 = granted(s.acquire(key("a"), 0, 100, 0, 1));
        let w2 = queued(s.acquire(key("a"), 10, 100, 0, 2));
        let w3 = queued(s.acquire(key("a"), 0, 100, 0, 3));
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
        granted(s.acquire(key("a"), 0, 50, 0, 1));
        let w2 = queued(s.acquire(key("a"), 50, 100, 0, 2));
        let w3 = queued(s.acquire(key("a"), 60, 100, 0, 3));
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
    fn tick_expires_chains_of_short_leases() {
        let mut s = LockService::<u32>::new();
        granted(s.acquire(key("a"), 0, 10, 0, 1));
        let w2 = queued(s.acquire(key("a"), 0, 10, 0, 2));
        let w3 = queued(s.acquire(key("a"), 0, 100, 0, 3));
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
        let t1 = granted(s.acquire(key("a"), 0, 100, 0, 1));
        let w2 = queued(s.acquire(key("a"), 0, 100, 0, 2));
        let w3 = queued(s.acquire(key("a"), 0, 100, 0, 3));
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
        let t1 = granted(s.acquire(key("a"), 0, 100, 0, 1));
        let w2 = queued(s.acquire(key("a"), 0, 100, 0, 2));
        let w3 = queued(s.acquire(key("a"), 0, 100, 0, 3));
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
        granted(s.acquire(key("a"), 0, 100, 0, 1));
        assert_eq!(s.next_deadline(), Some(100));
        queued(s.acquire(key("a"), 40, 100, 0, 2));
        assert_eq!(s.next_deadline(), Some(40));
        queued(s.acquire(key("a"), 0, 100, 0, 3));
        assert_eq!(s.next_deadline(), Some(40));
        let mut events = Vec::new();
        s.tick(40, &mut events);
        assert_eq!(s.next_deadline(), Some(100));
    }

    #[test]
    fn the_journal_replays_into_an_equal_table() {
        let mut s = LockService::<u32>::new();
        assert!(s.drain_journal().is_empty());
        granted(s.acquire(key("x"), 0, 5, 0, 0));
        assert!(s.drain_journal().is_empty());
        s.enable_journal();
        let mut replica = s.table().clone();
        let mut events = Vec::new();
        let mut steps: Vec<(Millis, Vec<Command>)> = Vec::new();
        let t = granted(s.acquire(key("a"), 0, 100, 1, 1));
        steps.push((1, s.drain_journal()));
        queued(s.acquire(key("a"), 0, 70, 2, 2));
        steps.push((2, s.drain_journal()));
        s.raise_token_floor(50);
        steps.push((3, s.drain_journal()));
        s.release(&key("a"), t, 4, &mut events);
        steps.push((4, s.drain_journal()));
        s.renew(&key("a"), 51, 30, 5);
        steps.push((5, s.drain_journal()));
        s.tick(40, &mut events);
        steps.push((40, s.drain_journal()));
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
        let w = queued(s.acquire(key("a"), 0, 10, 0, 1));
        assert_eq!(granted(s.acquire(key("b"), 0, 10, 0, 2)), 2);
        let mut events = Vec::new();
        s.tick(100, &mut events);
        assert_eq!(summary(&events), vec![(w, 1, "a".into(), Some(3))]);
    }

    #[test]
    fn drain_waiters_takes_everyone_out() {
        let mut s = LockService::<u32>::new();
        granted(s.acquire(key("a"), 0, 100, 0, 1));
        let w2 = queued(s.acquire(key("a"), 10, 100, 0, 2));
        let w3 = queued(s.acquire(key("a"), 0, 100, 0, 3));
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
        let w = queued(s.acquire(key("a"), 5, 100, 0, 1));
        let mut events = Vec::new();
        s.tick(5, &mut events);
        assert_eq!(summary(&events), vec![(w, 1, "a".into(), None)]);
    }
}
