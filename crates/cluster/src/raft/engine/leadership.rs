//! Changes of role, each through [`RaftEngine::handle_role`], and what
//! happens to a leader's requests when its leadership ends (lost, or
//! stepped down for want of a majority) or a proposal fails: waiters and
//! requests that never reached the log are redirected at once; those in
//! the log wait a while for their entry, which the next leader may
//! commit, and are redirected if it does not come.

use baton_core::{Change, Event, Key, Millis, NotServing};

use super::{Leading, Pending, RaftEngine, RaftRole, Standing, EXPIRY_RETRY_MS};
use crate::raft::members::Members;
use crate::raft::types::NodeId;

/// How long requests of an ended leadership wait for their entry to be
/// applied under the next leader before they are redirected, at most: a
/// few default election timeouts, and short enough that a leader cut off
/// from its majority answers them within the protocol's 3 s (it steps
/// down one election timeout after its last majority, then waits this
/// long). See [`RaftEngine::set_orphan_wait`].
pub const ORPHAN_WAIT_MS: Millis = 1_500;

/// How long a request may wait for its entry, from its proposal, on any
/// node in any role: then it is answered `M`, so that it is answered
/// within the protocol's 3 s. A leader that hears a majority but commits
/// nothing (the simulation found one: a follower answering
/// heartbeats while the entries did not reach it) steps down late or
/// never, and only this bound answers its requests. An acquire's grant is
/// proposed by the end of its wait at the latest, so it is answered by
/// then plus this.
pub const ANSWER_BUDGET_MS: Millis = 2_500;

/// Ended leaderships whose requests may wait at once, at most: a node
/// steps down at most once per election timeout (it must lead again
/// first), so a few cover an orphan wait; past them, the newest group
/// takes the next one's requests, with its earlier deadline (a shorter
/// wait, still within the answer-time rule).
pub const MAX_ORPHAN_GROUPS: usize = 8;

impl<H> RaftEngine<H> {
    /// How long requests in the log of an ended leadership wait for their
    /// entry before they are redirected ([`ORPHAN_WAIT_MS`] unless set):
    /// shorter with longer election timeouts, to keep within the
    /// answer-time rule.
    pub fn set_orphan_wait(&mut self, ms: Millis) {
        self.orphan_wait_ms = ms;
    }

    /// A proposal did not make it into the log (this node no longer leads):
    /// its requests are sent to the leader. A grant of this leadership
    /// frees its key for the next waiter (if this node still serves, else
    /// the change of role sends them away too).
    pub fn handle_proposal_failed(
        &mut self,
        tags: &[u64],
        leader: Option<NodeId>,
        now: Millis,
        events: &mut Vec<Event<H>>,
    ) {
        self.saw(now);
        self.token_floor_failed(tags);
        let to = NotServing::redirect(leader.and_then(|n| usize::try_from(n).ok()));
        for tag in tags {
            let current = self.of_this_leadership(*tag);
            let Some(pending) = self.take_pending(*tag) else {
                continue;
            };
            let freed = match (&pending, &mut self.standing) {
                (Pending::Grant(waiter), Standing::Leader(leading)) if current => {
                    leading.rules.grant_dropped(&waiter.key);
                    Some(waiter.key.clone())
                }
                (Pending::Expire { .. }, Standing::Leader(leading)) => {
                    leading.expiries_resume_at = now.saturating_add(EXPIRY_RETRY_MS);
                    None
                }
                _ => None,
            };
            self.abandon(pending, to, events);
            if let Some(key) = freed {
                self.hand_on(&key, None, now, events);
            }
        }
        self.debug_validate();
    }

    /// Answers a request whose command will not be applied for it.
    fn abandon(&mut self, pending: Pending<H>, to: NotServing, events: &mut Vec<Event<H>>) {
        match pending {
            Pending::Grant(waiter) => events.push(Event::Moved {
                id: waiter.id,
                handle: waiter.handle,
                key: waiter.key,
                to,
            }),
            Pending::Release { key, reply } => {
                if let Some(handle) = reply {
                    events.push(moved_answer(handle, Change::Release, key, to));
                }
            }
            Pending::Renew { key, reply, .. } => {
                events.push(moved_answer(reply, Change::Renew, key, to));
            }
            Pending::SetValue { key, reply } => {
                events.push(moved_answer(reply, Change::SetValue, key, to));
            }
            Pending::Expire { key, token } => {
                if let Standing::Leader(leading) = &mut self.standing {
                    leading.expiring.remove(&(key, token));
                }
            }
        }
    }

    /// The node's place in the group changed: the one door for every
    /// change of role. A leader that stops leading (or starts a new term)
    /// sends every waiter to whoever leads now, and every request that
    /// never reached the log. Requests already in the log wait for their
    /// entry: if the next leader commits it, this node applies it too and
    /// answers with the real outcome, instead of sending the client to
    /// retry a change that was made (a release answered `N R`, a grant
    /// held by nobody until its lease ends). A new leader proposes its
    /// token floor first; told its role again (the shell does at every
    /// quorum check), it proposes again a floor that missed the log.
    pub fn handle_role(&mut self, role: RaftRole, now: Millis, events: &mut Vec<Event<H>>) {
        self.saw(now);
        let before = self.role();
        if role == before {
            self.propose_token_floor(now);
            return;
        }
        self.log_role_change(before, role);
        let standing = match role {
            RaftRole::Follower { leader } => Standing::Follower { leader },
            RaftRole::Candidate => Standing::Candidate,
            RaftRole::Leader { term } => {
                Standing::Leader(Box::new(Leading::new(term, self.next_tag, self.quota)))
            }
        };
        if let Standing::Leader(ended) = std::mem::replace(&mut self.standing, standing) {
            self.end_leadership(*ended, now, events);
        }
        self.propose_token_floor(now);
        self.give_back_unclaimed();
        self.debug_validate();
    }

    fn end_leadership(&mut self, mut ended: Leading<H>, now: Millis, events: &mut Vec<Event<H>>) {
        let to = self.not_serving();
        for waiter in ended.rules.drain_waiters() {
            events.push(Event::Moved {
                id: waiter.id,
                handle: waiter.handle,
                key: waiter.key,
                to,
            });
        }
        let unproposed = ended.outbox.iter().map(|c| c.tag);
        let expiries = self
            .pending
            .iter()
            .filter(|(_, p)| matches!(p, Pending::Expire { .. }))
            .map(|(tag, _)| *tag);
        let answered: Vec<u64> = unproposed.chain(expiries).collect();
        for tag in answered {
            if let Some(pending) = self.take_pending(tag) {
                self.abandon(pending, to, events);
            }
        }
        if self.pending.is_empty() {
            return;
        }
        let deadline = now.saturating_add(self.orphan_wait_ms);
        let full = self.orphans.len() >= MAX_ORPHAN_GROUPS;
        match self.orphans.back_mut() {
            Some(newest) if full => newest.1 = self.next_tag,
            _ => self.orphans.push_back((deadline, self.next_tag)),
        }
    }

    /// Redirects the requests of an ended leadership whose entries were
    /// not applied in time: they were lost with that leader's log tail.
    pub(super) fn settle_orphans(&mut self, now: Millis, events: &mut Vec<Event<H>>) {
        while let Some(&(deadline, bound)) = self.orphans.front() {
            if now < deadline {
                return;
            }
            self.orphans.pop_front();
            self.redirect_below(bound, events);
        }
    }

    /// Answers `M` to every request that waited its whole answer budget
    /// for its entry. If the entry applies later, nobody waits for it: a
    /// grant is then given back, a release or renewal stands unanswered.
    pub(super) fn answer_overdue(&mut self, now: Millis, events: &mut Vec<Event<H>>) {
        let overdue: Vec<u64> = self
            .answer_by
            .iter()
            .take_while(|&&(deadline, _)| deadline <= now)
            .map(|&(_, tag)| tag)
            .collect();
        if overdue.is_empty() {
            return;
        }
        tracing::debug!(
            requests = overdue.len(),
            "requests waited their answer budget for their entries"
        );
        // As if their proposal had failed: the entry may still apply, and
        // that path already gives such a grant back.
        self.handle_proposal_failed(&overdue, None, now, events);
    }

    /// Drops the answered requests at the front of `answer_by`.
    pub(super) fn forget_answered(&mut self) {
        while let Some(&(_, tag)) = self.answer_by.front() {
            if self.pending.contains_key(&tag) {
                return;
            }
            self.answer_by.pop_front();
        }
    }

    /// Redirects every pending request with a tag below `bound`.
    fn redirect_below(&mut self, bound: u64, events: &mut Vec<Event<H>>) {
        let to = self.not_serving();
        let lost: Vec<u64> = self
            .pending
            .keys()
            .filter(|t| **t < bound)
            .copied()
            .collect();
        for tag in lost {
            if let Some(pending) = self.take_pending(tag) {
                self.abandon(pending, to, events);
            }
        }
    }
}

fn moved_answer<H>(handle: H, change: Change, key: Key, to: NotServing) -> Event<H> {
    Event::Answered {
        handle,
        key,
        change,
        answer: Err(to),
    }
}

impl<H> RaftEngine<H> {
    /// A change that involves a leader (one leading, one known or lost) at
    /// info, once per change, naming nodes by their addresses; the back
    /// and forth of a node cut off from its majority (candidate, follower
    /// of nobody, candidate...) at debug, so a partition does not fill the
    /// log.
    fn log_role_change(&self, before: RaftRole, after: RaftRole) {
        // A leader the membership does not name yet (a node that joined
        // hears from it before the log reaches it) is logged once it does
        // (see `log_leader_named`).
        let leaderless = |role: RaftRole| match role {
            RaftRole::Candidate => true,
            RaftRole::Follower { leader } => leader.and_then(|l| self.members.addr_of(l)).is_none(),
            RaftRole::Leader { .. } => false,
        };
        // A joined node that has not seen a membership yet does not know
        // its address: its lines carry no `node`.
        let node = self.own_addr.as_deref();
        let (from, to) = (self.describe(before), self.describe(after));
        match (leaderless(before) && leaderless(after), node) {
            (true, Some(node)) => tracing::debug!(node, from, to, "raft role changed"),
            (true, None) => tracing::debug!(from, to, "raft role changed"),
            (false, Some(node)) => {
                tracing::info!(node, from, to, "raft role changed: {from} -> {to}")
            }
            (false, None) => tracing::info!(from, to, "raft role changed: {from} -> {to}"),
        }
    }

    /// A follower whose leader the membership `before` did not name, and
    /// the current one does, logs its role now.
    pub(super) fn log_leader_named(&self, before: &Members) {
        let role = self.role();
        let RaftRole::Follower { leader: Some(id) } = role else {
            return;
        };
        if before.addr_of(id).is_none() && self.members.addr_of(id).is_some() {
            self.log_role_change(RaftRole::Follower { leader: None }, role);
        }
    }

    /// A role in words, with the leader's address.
    fn describe(&self, role: RaftRole) -> String {
        match role {
            RaftRole::Leader { term } => format!("leader (term {term})"),
            RaftRole::Candidate => "candidate".into(),
            RaftRole::Follower { leader: None } => "follower of no known leader".into(),
            RaftRole::Follower { leader: Some(id) } => {
                let addr = usize::try_from(id).ok().and_then(|i| self.addr_of(i));
                format!(
                    "follower of {}",
                    addr.unwrap_or_else(|| format!("node {id}"))
                )
            }
        }
    }
}
