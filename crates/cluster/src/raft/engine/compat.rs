//! The engine's former method names, for callers not yet moved to the
//! `handle_*`/`poll_*` names (the shell's closures and the Raft
//! simulation, both being rewritten): each forwards to its new name.
//! Delete this file once nothing calls them.

use baton_core::{
    AcquireOutcome, Event, Key, Millis, NotServing, Outcome, TableSnapshot, Token, WaiterId,
};

use super::{Committed, RaftEngine, RaftRole};
use crate::raft::types::{NodeId, Proposal};

impl<H> RaftEngine<H> {
    /// [`RaftEngine::handle_acquire`].
    pub fn acquire(
        &mut self,
        key: Key,
        wait_ms: u64,
        lease_ms: u64,
        now: Millis,
        handle: H,
        events: &mut Vec<Event<H>>,
    ) -> Result<AcquireOutcome, NotServing> {
        self.handle_acquire(key, wait_ms, lease_ms, now, handle, events)
    }

    /// The release alone; [`RaftEngine::grant_behind_release`] adds the
    /// hand-over ([`RaftEngine::handle_release`] does both).
    pub fn release(
        &mut self,
        key: &Key,
        token: Token,
        reply: Option<H>,
    ) -> Result<Option<Outcome>, NotServing> {
        let proposed = self.propose_release(key, token, reply);
        self.debug_validate();
        proposed
    }

    /// The hand-over behind a release just proposed by
    /// [`RaftEngine::release`].
    pub fn grant_behind_release(&mut self, key: &Key, now: Millis, events: &mut Vec<Event<H>>) {
        let token = self.table.holder(key).map(|h| h.token);
        self.hand_on(key, token, now, events);
        self.debug_validate();
    }

    /// [`RaftEngine::handle_renew`].
    pub fn renew(
        &mut self,
        key: &Key,
        token: Token,
        lease_ms: u64,
        reply: H,
    ) -> Result<Option<Outcome>, NotServing> {
        self.handle_renew(key, token, lease_ms, reply)
    }

    /// [`RaftEngine::handle_cancel`].
    pub fn cancel(&mut self, id: WaiterId) {
        self.handle_cancel(id)
    }

    /// [`RaftEngine::handle_tick`].
    pub fn tick(&mut self, now: Millis, events: &mut Vec<Event<H>>) {
        self.handle_tick(now, events)
    }

    /// [`RaftEngine::handle_role`].
    pub fn set_role(&mut self, role: RaftRole, now: Millis, events: &mut Vec<Event<H>>) {
        self.handle_role(role, now, events)
    }

    /// [`RaftEngine::handle_proposal_failed`] at the latest time an input
    /// brought.
    pub fn proposal_failed(
        &mut self,
        tags: &[u64],
        leader: Option<NodeId>,
        events: &mut Vec<Event<H>>,
    ) {
        let now = self.latest_now;
        self.handle_proposal_failed(tags, leader, now, events)
    }

    /// [`RaftEngine::poll_proposal`].
    pub fn take_proposal(&mut self) -> Option<(Proposal, Vec<u64>)> {
        self.poll_proposal()
    }

    /// [`RaftEngine::handle_committed`].
    pub fn apply_entry(&mut self, entry: Committed<'_>, now: Millis, events: &mut Vec<Event<H>>) {
        self.handle_committed(entry, now, events)
    }

    /// [`RaftEngine::handle_snapshot`]; a serving leader never installs
    /// one, so no waiter is handed on here.
    pub fn restore(&mut self, snapshot: &TableSnapshot, now: Millis) {
        let mut events = Vec::new();
        self.handle_snapshot(snapshot, now, &mut events);
        debug_assert!(events.is_empty(), "a snapshot handed keys on");
    }
}
