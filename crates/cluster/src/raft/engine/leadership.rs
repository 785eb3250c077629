//! What happens to a leader's requests when its leadership ends (lost,
//! or stepped down for want of a majority) or a proposal fails: waiters
//! and requests that never reached the log are redirected at once; those
//! in the log wait a while for their entry, which the next leader may
//! commit, and are redirected if it does not come.

use baton_core::{Key, Millis};
use baton_proto::{Op, Response};

use super::{EngineEvent, Pending, RaftEngine, RaftRole};
use crate::raft::types::NodeId;

/// How long requests of an ended leadership wait for their entry to be
/// applied under the next leader before they are redirected, at most: a
/// few default election timeouts, and short enough that a leader cut off
/// from its majority answers them within the protocol's 3 s (it steps
/// down one election timeout after its last majority, then waits this
/// long). See [`RaftEngine::set_orphan_wait`].
pub const ORPHAN_WAIT_MS: Millis = 1_500;

impl<H> RaftEngine<H> {
    /// How long requests in the log of an ended leadership wait for their
    /// entry before they are redirected ([`ORPHAN_WAIT_MS`] unless set):
    /// shorter with longer election timeouts, to keep within the
    /// answer-time rule.
    pub fn set_orphan_wait(&mut self, ms: Millis) {
        self.orphan_wait_ms = ms;
    }

    /// A proposal did not make it into the log (this node no longer leads):
    /// its requests are sent to the leader.
    pub fn proposal_failed(
        &mut self,
        tags: &[u64],
        leader: Option<NodeId>,
        events: &mut Vec<EngineEvent<H>>,
    ) {
        let to = self.addr(leader);
        for tag in tags {
            if let Some(pending) = self.take_pending(*tag) {
                self.abandon(pending, to.clone(), events);
            }
        }
    }

    /// Answers a request whose command will not be applied for it.
    pub(super) fn abandon(
        &mut self,
        pending: Pending<H>,
        to: Option<String>,
        events: &mut Vec<EngineEvent<H>>,
    ) {
        match pending {
            Pending::Grant(waiter) => {
                self.granting.remove(&waiter.key);
                events.push(EngineEvent::Moved {
                    id: waiter.id,
                    handle: waiter.handle,
                    key: waiter.key,
                    to,
                });
            }
            Pending::Release { key, reply } => {
                if let Some(handle) = reply {
                    events.push(moved_reply(handle, Op::Release, key, to));
                }
            }
            Pending::Renew { key, reply } => {
                events.push(moved_reply(reply, Op::Renew, key, to));
            }
            Pending::Expire { key, token } => {
                self.expiring.remove(&(key, token));
            }
        }
    }

    /// The node's place in the group changed. A leader that stops leading
    /// (or starts a new term) sends every waiter to whoever leads now, and
    /// every request that never reached the log. Requests already in the
    /// log wait for their entry: if the next leader commits it, this node
    /// applies it too and answers with the real outcome, instead of sending
    /// the client to retry a change that was made (a release answered
    /// `N R`, a grant held by nobody until its lease ends).
    pub fn set_role(&mut self, role: RaftRole, now: Millis, events: &mut Vec<EngineEvent<H>>) {
        if role == self.role {
            return;
        }
        let was_leading = matches!(self.role, RaftRole::Leader { .. });
        self.role = role;
        if was_leading {
            let to = self.redirect_target();
            for waiter in self.queues.drain_all() {
                events.push(EngineEvent::Moved {
                    id: waiter.id,
                    handle: waiter.handle,
                    key: waiter.key,
                    to: to.clone(),
                });
            }
            let unproposed: Vec<u64> = self.outbox.drain(..).map(|c| c.tag).collect();
            let expiries: Vec<u64> = self
                .pending
                .iter()
                .filter(|(_, p)| matches!(p, Pending::Expire { .. }))
                .map(|(tag, _)| *tag)
                .collect();
            for tag in unproposed.into_iter().chain(expiries) {
                if let Some(pending) = self.take_pending(tag) {
                    self.abandon(pending, to.clone(), events);
                }
            }
            if !self.pending.is_empty() {
                self.orphans = Some((now.saturating_add(self.orphan_wait_ms), self.next_tag));
            }
            self.granting.clear();
            self.expiring.clear();
        }
    }

    /// Redirects the requests of an ended leadership whose entries were
    /// not applied in time: they were lost with that leader's log tail.
    pub(super) fn settle_orphans(&mut self, now: Millis, events: &mut Vec<EngineEvent<H>>) {
        let Some((deadline, bound)) = self.orphans else {
            return;
        };
        if now < deadline {
            return;
        }
        self.orphans = None;
        let to = self.redirect_target();
        let lost: Vec<u64> = self
            .pending
            .keys()
            .filter(|t| **t < bound)
            .copied()
            .collect();
        for tag in lost {
            if let Some(pending) = self.take_pending(tag) {
                self.abandon(pending, to.clone(), events);
            }
        }
    }
}

fn moved_reply<H>(handle: H, op: Op, key: Key, to: Option<String>) -> EngineEvent<H> {
    EngineEvent::Reply {
        handle,
        response: Response::Moved { op, key, addr: to },
    }
}
