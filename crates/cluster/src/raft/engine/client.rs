//! Client requests at the Raft engine: only the serving leader takes
//! them, as commands it proposes and answers once they apply; any other
//! node answers with where to go instead ([`NotServing`]).

use baton_core::{
    Acquire, AcquireOutcome, Command, Event, HolderValue, Key, Millis, NotServing, Outcome, Token,
    WaiterId,
};

use super::{Pending, RaftEngine, Standing};

impl<H> RaftEngine<H> {
    /// Queues an acquire (a plain lock, permits, shared, a value); the
    /// grant, if any, comes once the log applies it (a `GrantWith` for
    /// options other than a plain lock's, as the rules decide).
    pub fn handle_acquire(
        &mut self,
        acquire: Acquire,
        now: Millis,
        handle: H,
        events: &mut Vec<Event<H>>,
    ) -> Result<AcquireOutcome, NotServing> {
        self.saw(now);
        self.check_serving()?;
        let admitted = self
            .leading()
            .map(|l| l.rules.admit(&self.table, &acquire.key, &acquire.options));
        if let Some(Err(refusal)) = admitted {
            return Ok(AcquireOutcome::Refused(refusal));
        }
        let Some(leading) = self.serving_mut() else {
            return Err(self.not_serving());
        };
        let key = acquire.key.clone();
        let id = leading.rules.queue(acquire, now, handle);
        self.hand_on(&key, None, now, events);
        self.debug_validate();
        Ok(AcquireOutcome::Queued { id })
    }

    /// Proposes a release and, right behind it in the same entry, the
    /// grant of the key to its next waiter (the rules' hand-over behind a
    /// release). `Ok(None)`: the answer comes as an [`Event::Answered`];
    /// `Ok(Some(outcome))`: known at once, because no applied grant
    /// carries that token, or the grant's lease has ended by `now` (its
    /// expiry is proposed instead: see `lapsed`).
    pub fn handle_release(
        &mut self,
        key: &Key,
        token: Token,
        reply: Option<H>,
        now: Millis,
        events: &mut Vec<Event<H>>,
    ) -> Result<Option<Outcome>, NotServing> {
        self.saw(now);
        self.check_serving()?;
        if self.lapsed(key, token, now, events) {
            self.debug_validate();
            return Ok(Some(Outcome::NotFound));
        }
        let proposed = self.propose_release(key, token, reply)?;
        if proposed.is_none() {
            self.hand_on(key, Some(token), now, events);
        }
        self.debug_validate();
        Ok(proposed)
    }

    /// The release alone (see [`RaftEngine::handle_release`]), without the
    /// hand-over behind it, so a test can
    /// see the key handed on when the release applies.
    #[cfg(test)]
    pub(crate) fn propose_release_alone(
        &mut self,
        key: &Key,
        token: Token,
        reply: Option<H>,
    ) -> Result<Option<Outcome>, NotServing> {
        let proposed = self.propose_release(key, token, reply);
        self.debug_validate();
        proposed
    }

    fn propose_release(
        &mut self,
        key: &Key,
        token: Token,
        reply: Option<H>,
    ) -> Result<Option<Outcome>, NotServing> {
        self.check_serving()?;
        // A token a client holds was applied here before this node could
        // serve, so a mismatch now is final.
        if self.table.grant_of(key, token).is_none() {
            return Ok(Some(Outcome::NotFound));
        }
        let command = Command::Release {
            key: key.clone(),
            token,
        };
        let key = key.clone();
        self.propose(command, Pending::Release { key, reply });
        Ok(None)
    }

    /// Proposes a renewal; answers as [`RaftEngine::handle_release`] (a
    /// lease that has ended is not renewed: the key passes on).
    pub fn handle_renew(
        &mut self,
        key: &Key,
        token: Token,
        lease_ms: u64,
        reply: H,
        now: Millis,
        events: &mut Vec<Event<H>>,
    ) -> Result<Option<Outcome>, NotServing> {
        let command = Command::Renew {
            key: key.clone(),
            token,
            lease_ms,
        };
        let pending = Pending::Renew {
            key: key.clone(),
            token,
            reply,
        };
        self.propose_for_grant(key, token, command, pending, now, events)
    }

    /// Proposes setting (`None`: clearing) the value of `key`'s grant with
    /// `token`; answers as [`RaftEngine::handle_release`].
    pub fn handle_set_value(
        &mut self,
        key: &Key,
        token: Token,
        value: Option<HolderValue>,
        reply: H,
        now: Millis,
        events: &mut Vec<Event<H>>,
    ) -> Result<Option<Outcome>, NotServing> {
        let command = Command::SetValue {
            key: key.clone(),
            token,
            value,
        };
        let pending = Pending::SetValue {
            key: key.clone(),
            reply,
        };
        self.propose_for_grant(key, token, command, pending, now, events)
    }

    /// Proposes `command`, a change of `key`'s grant with `token`, for
    /// `pending`; answered at once `NotFound` if no applied grant has that
    /// token (one a client holds was applied before this node could
    /// serve, so a mismatch is final), or if its lease has ended by `now`.
    fn propose_for_grant(
        &mut self,
        key: &Key,
        token: Token,
        command: Command,
        pending: Pending<H>,
        now: Millis,
        events: &mut Vec<Event<H>>,
    ) -> Result<Option<Outcome>, NotServing> {
        self.saw(now);
        self.check_serving()?;
        if self.table.grant_of(key, token).is_none() || self.lapsed(key, token, now, events) {
            self.debug_validate();
            return Ok(Some(Outcome::NotFound));
        }
        self.propose(command, pending);
        self.debug_validate();
        Ok(None)
    }

    /// A queued acquire's connection closed.
    pub fn handle_cancel(&mut self, id: WaiterId) {
        if let Standing::Leader(leading) = &mut self.standing {
            leading.rules.cancel(id);
        }
        self.debug_validate();
    }
}
