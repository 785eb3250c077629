//! The work a serving leader makes for itself when leases run out: it
//! proposes their expiries in bounded batches, soonest first, the next
//! batch as earlier ones apply (paced by the log, not by the timer). However many leases lapse together, a
//! client's command waits behind at most [`MAX_EXPIRIES_IN_FLIGHT`]
//! expiries, and no input of the engine walks more than that many.
//! The other work a leader makes for itself is bounded by what applies:
//! each applied release or expiry hands its key to the waiters it has
//! room for (at most its permits, or its waiters), and each
//! grant whose client is gone is given back by one release.

use baton_core::{Command, Event, Key, LockRules, Millis, Token};

use super::{Pending, RaftEngine, Standing, MAX_BATCH};

/// Most expiries a leader has on their way at once (in its outbox or in
/// the log, not yet applied): two entries, one committing while the next
/// waits in the outbox, so the log does not idle between two batches.
/// Expiries are work the leader makes for itself, as many as leases lapse
/// together (a fleet that lost its network at once).
/// Proposed all at once, they would fill the outbox ahead of every
/// client's command, and each input would skip them all to find the next
/// lease to arm the timer for, under the node's one lock. Bounded, a
/// client's command waits behind at most this many, each input's work
/// stays small, and the rest are proposed as these apply.
pub const MAX_EXPIRIES_IN_FLIGHT: usize = 2 * MAX_BATCH;

/// How long a leader waits before it proposes expiries again after the
/// log refused one. openraft refuses at once while it hands the lead over
/// (or its lease ran out) yet still reports itself leader: retried at
/// every tick, the expiries would keep the node busy doing nothing until
/// the role changes.
pub const EXPIRY_RETRY_MS: Millis = 50;

impl<H> RaftEngine<H> {
    /// Proposes the expiry of leases run out by `now`, as many as the
    /// bound leaves room for.
    pub(super) fn propose_expiries(&mut self, now: Millis) {
        for (key, token) in self.expiries_to_propose(Some(now), self.expiry_room()) {
            if let Standing::Leader(leading) = &mut self.standing {
                leading.expiring.insert((key.clone(), token));
            }
            let command = Command::Expire {
                key: key.clone(),
                token,
            };
            self.propose(command, Pending::Expire { key, token });
        }
    }

    /// Whether a request naming `key`'s grant with `token` at `now` finds
    /// it lapsed: its lease has ended, though its expiry has not applied.
    /// The leader decides so once, here, and proposes the expiry (unless
    /// it is on its way already) with the grants of the key's next
    /// waiters behind it in the same entry, as for a release; every node
    /// applies that expiry, none decides with its own clock. A renewal of
    /// the grant already in the log was decided while the lease ran: the
    /// grant is not lapsed, and the request goes in the log behind it.
    pub(super) fn lapsed(
        &mut self,
        key: &Key,
        token: Token,
        now: Millis,
        events: &mut Vec<Event<H>>,
    ) -> bool {
        if self.renewing.contains_key(&(key.clone(), token)) {
            return false;
        }
        let Some(expire) = LockRules::<H>::lapsed(&self.table, key, token, now) else {
            return false;
        };
        let Standing::Leader(leading) = &mut self.standing else {
            return false;
        };
        if leading.expiring.insert((key.clone(), token)) {
            let key = key.clone();
            self.propose(
                expire,
                Pending::Expire {
                    key: key.clone(),
                    token,
                },
            );
            self.hand_on(&key, Some(token), now, events);
        }
        true
    }

    /// When the next expiry is to be proposed: the end of the soonest
    /// lease. None while expiries are on their way: the next are proposed
    /// as those apply ([`RaftEngine::handle_committed`]), or at the retry
    /// once the log refused them, so no input walks past them to arm the
    /// timer.
    pub(super) fn next_expiry(&self) -> Option<Millis> {
        if !self.leading()?.expiring.is_empty() {
            return None;
        }
        let (key, token) = self.expiries_to_propose(None, 1).pop()?;
        let holder = self.table.grant_of(&key, token)?;
        let resume = self.leading().map_or(0, |l| l.expiries_resume_at);
        Some(holder.expires_at.max(resume))
    }

    /// How many more expiries the leader may propose now (see
    /// [`MAX_EXPIRIES_IN_FLIGHT`]).
    fn expiry_room(&self) -> usize {
        self.leading().map_or(0, |l| {
            MAX_EXPIRIES_IN_FLIGHT.saturating_sub(l.expiring.len())
        })
    }

    /// Up to `most` of the leases due by `now` (of every lease if `None`)
    /// that the serving leader should expire, soonest first: not already
    /// expiring, and no renewal of the grant pending. A renewal already in
    /// the log (sent before the lease ran out, held up by a stall) goes
    /// first: an expiry behind it would remove the lock it renewed. Once
    /// it applies the lease is new, or, if it never commits, the expiry
    /// comes next tick. The walk skips at most the expiries on their way
    /// and the grants being renewed.
    fn expiries_to_propose(&self, now: Option<Millis>, most: usize) -> Vec<(Key, Token)> {
        let Some(leading) = self.leading().filter(|_| self.serving()) else {
            return Vec::new();
        };
        if most == 0 || now.is_some_and(|now| now < leading.expiries_resume_at) {
            return Vec::new();
        }
        let due = self.table.due_expiries(now.unwrap_or(Millis::MAX));
        let wanted = due.filter(|(key, token)| {
            !leading.expiring.contains(&((*key).clone(), *token))
                && !self.renewing.contains_key(&((*key).clone(), *token))
        });
        wanted.take(most).map(|(k, t)| (k.clone(), t)).collect()
    }
}
