//! Client requests: only an active serves them; any other role answers
//! with where to go instead ([`NotServing`]).

use baton_core::{
    Acquire, AcquireOutcome, HolderValue, Key, KeyState, Millis, NotServing, Outcome, Refusal,
    Token, WaiterId,
};

use super::super::messages::{NodeIndex, MAX_TABLE_LOCKS};
use super::super::token_floor::MAX_WAITERS;
use super::PriorityNode;

/// Whether an acquire is past the engine's own bounds, which hold whatever
/// the quota: it is then refused as the quota refuses
/// (`E A <key> too many ...`, docs/protocol.md "Limits"), not redirected.
fn past_bounds(waiters: usize, locks: usize, adds_none: bool) -> Option<Refusal> {
    if waiters >= MAX_WAITERS {
        // One call grants at most one token per waiter, plus one: the
        // bound keeps every call inside one token block.
        return Some(Refusal::TooManyWaiters);
    }
    if locks >= MAX_TABLE_LOCKS && !adds_none {
        // A table no standby could take in (reassembly stops there).
        return Some(Refusal::TooManyLocks);
    }
    None
}

impl<H> PriorityNode<H> {
    /// Whether this node serves at `now`: a pause first steps it down, a
    /// late heartbeat goes out, and the token floor makes room for the
    /// grants the request can make.
    fn serving(&mut self, now: Millis) -> Result<(), NotServing> {
        self.check_pause(now);
        if self.role.is_active() && now >= self.next_heartbeat {
            // The timer runs late on a node busy with clients; its requests
            // still keep the heartbeats going, so the node does not step
            // down for a stall of its own making.
            self.beat(now);
        }
        if self.role.is_active() {
            self.make_room(now);
            Ok(())
        } else {
            Err(NotServing::redirect(self.redirect_target()))
        }
    }

    /// A client asks for a key: a plain lock, a permit of a semaphore, a
    /// shared grant, a value; `handle` comes back in its events.
    pub fn handle_acquire(
        &mut self,
        acquire: Acquire,
        now: Millis,
        handle: H,
    ) -> Result<AcquireOutcome, NotServing> {
        let result = self.serving(now).map(|()| {
            let table = self.service.table();
            // A plain acquire of a held key adds no grant; any other may.
            let adds_none = table.holder(&acquire.key).is_some() && acquire.options.is_plain();
            match past_bounds(self.service.waiter_count(), table.len(), adds_none) {
                Some(refusal) => AcquireOutcome::Refused(refusal),
                None => self.service.acquire(acquire, now, handle),
            }
        });
        self.checked();
        result
    }

    /// A client gives `key` back; the next waiter may be granted it.
    pub fn handle_release(
        &mut self,
        key: &Key,
        token: Token,
        now: Millis,
    ) -> Result<Outcome, NotServing> {
        let result = self.serving(now).map(|()| {
            let outcome = self.service.release(key, token, now, &mut self.scratch);
            self.take_scratch();
            outcome
        });
        self.checked();
        result
    }

    /// A client extends its lease of `key`; one that ended already is
    /// not renewed, and the key passes on (see [`baton_core::LockService::renew`]).
    pub fn handle_renew(
        &mut self,
        key: &Key,
        token: Token,
        lease_ms: u64,
        now: Millis,
    ) -> Result<Outcome, NotServing> {
        let result = self.serving(now).map(|()| {
            let outcome = self
                .service
                .renew(key, token, lease_ms, now, &mut self.scratch);
            self.take_scratch();
            outcome
        });
        self.checked();
        result
    }

    /// A client sets (`None`: clears) the value of its grant of `key`.
    pub fn handle_set_value(
        &mut self,
        key: &Key,
        token: Token,
        value: Option<HolderValue>,
        now: Millis,
    ) -> Result<Outcome, NotServing> {
        let result = self.serving(now).map(|()| {
            let outcome = self
                .service
                .set_value(key, token, value, now, &mut self.scratch);
            self.take_scratch();
            outcome
        });
        self.checked();
        result
    }

    /// The keys whose holders or values changed since the last call (for
    /// the watches of the active); `None` after a table taken in whole
    /// (a merge after a split): any key may have.
    pub fn drain_changed_keys(&mut self) -> Option<Vec<Key>> {
        self.service.drain_changed_keys()
    }

    /// `Q <key>` as the active sees it, or nothing on another role: the
    /// state a watch is answered with.
    pub fn key_state(&self, key: &Key, now: Millis) -> Option<KeyState> {
        self.role.is_active().then(|| self.service.query(key, now))
    }

    /// How many acquires wait for `key` (an operator's listing; changes nothing).
    pub fn key_waiters(&self, key: &Key, now: Millis) -> u64 {
        self.service.query(key, now).waiters
    }

    /// Whether `peer` was heard within a failure timeout (an operator's view).
    pub fn peer_live(&self, peer: NodeIndex, now: Millis) -> bool {
        self.is_live(peer, now)
    }

    /// `Q <key>`: the key's grant and waiters, on the active node only.
    pub fn handle_query(&mut self, key: &Key, now: Millis) -> Result<KeyState, NotServing> {
        self.serving(now).map(|()| self.service.query(key, now))
    }

    /// A client stopped waiting (its connection closed).
    pub fn handle_cancel(&mut self, id: WaiterId) {
        self.service.cancel(id);
        self.checked();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The engine's bounds answer as the quota does, `E A <key> too many
    /// ...`; an acquire of a key already held adds no lock.
    #[test]
    fn past_the_bounds_an_acquire_is_refused_like_the_quota() {
        assert_eq!(past_bounds(0, 0, false), None);
        assert_eq!(
            past_bounds(MAX_WAITERS - 1, MAX_TABLE_LOCKS - 1, false),
            None
        );
        assert_eq!(
            past_bounds(MAX_WAITERS, 0, true),
            Some(Refusal::TooManyWaiters)
        );
        assert_eq!(
            past_bounds(0, MAX_TABLE_LOCKS, false),
            Some(Refusal::TooManyLocks)
        );
        assert_eq!(past_bounds(0, MAX_TABLE_LOCKS, true), None);
    }
}
