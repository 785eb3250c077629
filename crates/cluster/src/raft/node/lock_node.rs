//! The Raft node as the server sees it: requests in client terms, answers
//! as the server's events, and the committed log applied under the
//! server's mutex. Its inputs beyond [`LockNode`] and its commands to the
//! shell are in `inputs`.

use baton_core::{
    Event, Key, LockTable, Millis, NotServing, Outcome, Quota, StateTag, TableSnapshot, Token,
    WaiterId, WatchId,
};
use baton_proto::{Mode, Role};
use baton_server::{
    earliest, Answer, Events, Incoming, LockNode, LockRequest, Mailbox, NodeEvent, NodeStatus,
    NodeWatches, Served, SharedLocks,
};
use openraft::{Instant as _, TokioInstant};

use super::command::{NodeTimes, RaftCommand};
use super::contact::LeaderContact;
use super::group_commit::{GroupCommit, Returns};
use super::observe::{self, LogIndexes, PeerProgress, RoleWatch, StuckWatch};
use super::reads::{self, PendingReads, Read};
use crate::raft::engine::{RaftEngine, RaftRole};
use crate::raft::storage::state_machine::TableHost;
use crate::raft::types::{Entry, LogId};

/// The Raft node: the engine, and the node's decisions outside it (the
/// role to serve in, a stuck follower, leader contact, reads, group
/// commit), fed by named inputs, with [`RaftCommand`]s out.
#[derive(Debug)]
pub struct RaftLockNode {
    pub(super) engine: RaftEngine<Mailbox>,
    scratch: Vec<Event<Mailbox>>,
    /// Changes of role, for the metrics.
    role_changes: u64,
    pub(super) times: NodeTimes,
    pub(super) roles: RoleWatch,
    pub(super) stuck: StuckWatch,
    /// The membership the engine was last told of.
    pub(super) members_seen: Option<LogId>,
    /// What `S`, `/metrics` and `/v1/cluster` show of openraft's view, as
    /// of the last metrics: the term, the followers' replication, the
    /// log's indexes.
    pub(super) shown: Shown,
    /// When a follower last heard its leader (for `/health`).
    pub(super) contact: LeaderContact,
    /// When to ask the core for leader contact next, and whether an ask
    /// is under way.
    pub(super) next_contact_ask: Option<TokioInstant>,
    pub(super) asking_contact: bool,
    /// When the metrics are due again (`None`: at once).
    pub(super) next_check: Option<TokioInstant>,
    /// `Q` and `W` requests waiting for the lead to be confirmed.
    pub(super) reads: PendingReads,
    /// The serving leader's pending watches (a node that stops serving
    /// answers them `M W`).
    pub(super) watches: NodeWatches,
    /// How long entries take, which bounds a hold.
    pub(super) group: GroupCommit,
    /// Requests in and answers out, which a hold waits on.
    pub(super) returns: Returns,
    /// Whether a proposed entry is not yet done.
    pub(super) entry_in_flight: bool,
    pub(super) commands: Vec<RaftCommand>,
    /// This node is no longer a member (see [`crate::raft::removal`]),
    /// and the latest word of a member that said so.
    pub(super) removed: bool,
    pub(super) told_removed: Option<LogId>,
}

/// What the node shows of openraft's view (see [`RaftLockNode::counters`]).
#[derive(Debug, Default)]
pub(super) struct Shown {
    pub term: u64,
    pub progress: Vec<PeerProgress>,
    pub indexes: LogIndexes,
    /// On a leader, the followers that acknowledged no heartbeat for
    /// [`NodeTimes::silent_after`]: shown `down`.
    pub silent: Vec<crate::raft::types::NodeId>,
}

impl RaftLockNode {
    pub fn new(engine: RaftEngine<Mailbox>, times: NodeTimes) -> RaftLockNode {
        RaftLockNode {
            engine,
            scratch: Vec::new(),
            role_changes: 0,
            times,
            roles: RoleWatch::new(times.step_down_after),
            stuck: StuckWatch::new(times.stuck_after),
            members_seen: None,
            shown: Shown::default(),
            contact: LeaderContact::default(),
            next_contact_ask: None,
            asking_contact: false,
            next_check: None,
            reads: PendingReads::default(),
            watches: NodeWatches::default(),
            group: GroupCommit::new(),
            returns: Returns::default(),
            entry_in_flight: false,
            commands: Vec::new(),
            removed: false,
            told_removed: None,
        }
    }

    pub fn engine(&self) -> &RaftEngine<Mailbox> {
        &self.engine
    }

    /// Counts a change of role (metrics).
    pub(super) fn count_role_change(&mut self) {
        self.role_changes += 1;
    }

    /// Runs `f` on the engine and turns the events it made into the
    /// server's (nodes by address, not index).
    pub fn drive<R>(
        &mut self,
        events: &mut Events,
        f: impl FnOnce(&mut RaftEngine<Mailbox>, &mut Vec<Event<Mailbox>>) -> R,
    ) -> R {
        let result = f(&mut self.engine, &mut self.scratch);
        let engine = &self.engine;
        events.extend(
            self.scratch
                .drain(..)
                .map(|event| NodeEvent::from_event(event, |i| engine.addr_of(i))),
        );
        result
    }

    pub(super) fn redirect(&self, to: NotServing) -> Option<String> {
        to.serving.and_then(|i| self.engine.addr_of(i))
    }

    fn late(&self, result: Result<Option<Outcome>, NotServing>) -> Served<Answer> {
        match result {
            Ok(Some(outcome)) => Served::Done(Answer::Changed(outcome)),
            Ok(None) => Served::Later,
            Err(to) => Served::Redirect(self.redirect(to)),
        }
    }

    /// `reply_to` hears the late answer (`None`: nobody waits for it).
    fn release(
        &mut self,
        key: &Key,
        token: Token,
        reply_to: Option<&Mailbox>,
        now: Millis,
        events: &mut Events,
    ) -> Served<Answer> {
        // The next waiter's grant rides in the release's entry: the
        // engine's hand-over, the core's rule.
        let proposed = self.drive(events, |engine, ev| {
            engine.handle_release(key, token, reply_to.cloned(), now, ev)
        });
        self.late(proposed)
    }

    /// `Q <key>`: answered once the lead is confirmed (a linearizable read).
    fn query(&mut self, key: &Key, reply_to: &Mailbox) -> Served<Answer> {
        if let Err(to) = self.engine.check_serving() {
            return Served::Redirect(self.redirect(to));
        }
        let read = Read::Query {
            key: key.clone(),
            reply_to: reply_to.clone(),
        };
        self.read(read)
    }

    /// Queues a read for the next round: answered later, once the writes
    /// proposed before it are done too (see `reads`).
    fn read(&mut self, read: Read) -> Served<Answer> {
        match self.reads.push(self.engine.next_tag(), read) {
            Ok(()) => Served::Later,
            // Too many reads wait already: `M <op> <key> -` has the client
            // ask again shortly, which bounds the queue.
            Err(_) => Served::Redirect(None),
        }
    }

    /// `W <key>`: the leader's table is the committed state, but may be
    /// stale (another leader elected meanwhile). A client that saw another
    /// state is answered after a read round, as `Q` is. One that saw the
    /// table's state waits in the registry: a committed change applied
    /// here answers it (the log's state), and so would a stale table
    /// never, so nothing stale is reported; its wait running out is
    /// answered after a round (see `tick`), a step-down with `M W`.
    fn watch(
        &mut self,
        key: &Key,
        wait_ms: u64,
        seen: StateTag,
        now: Millis,
        reply_to: &Mailbox,
    ) -> Served<Answer> {
        if let Err(to) = self.engine.check_serving() {
            return Served::Redirect(self.redirect(to));
        }
        let state = self.engine.query(key, now);
        if state.tag() != seen {
            let read = Read::Watch {
                key: key.clone(),
                reply_to: reply_to.clone(),
            };
            return self.read(read);
        }
        Served::Done(self.watches.watch(key, wait_ms, seen, state, now, reply_to))
    }
}

impl LockNode for RaftLockNode {
    fn handle(&mut self, incoming: Incoming<'_>, events: &mut Events) -> Served<Answer> {
        // Counted first, as it arrives; a hold it ends proposes once the
        // request is in the engine's outbox, so that it rides along.
        let back = self.returns.request_in();
        let (now, reply_to) = (incoming.now, incoming.reply_to);
        let served = match incoming.request {
            LockRequest::Watch { key, wait_ms, seen } => {
                self.watch(key, wait_ms, seen, now, reply_to)
            }
            LockRequest::Acquire(acquire) => {
                let result = self.drive(events, |engine, ev| {
                    engine.handle_acquire(acquire.to_acquire(), now, reply_to.clone(), ev)
                });
                match result {
                    Ok(outcome) => Served::Done(Answer::Acquired(outcome)),
                    Err(to) => Served::Redirect(self.redirect(to)),
                }
            }
            LockRequest::Release { key, token } => {
                self.release(key, token, Some(reply_to), now, events)
            }
            LockRequest::Renew {
                key,
                token,
                lease_ms,
            } => {
                let proposed = self.drive(events, |engine, ev| {
                    engine.handle_renew(key, token, lease_ms, reply_to.clone(), now, ev)
                });
                self.late(proposed)
            }
            LockRequest::Query { key } => self.query(key, reply_to),
            LockRequest::SetValue { key, token, value } => {
                let proposed = self.drive(events, |engine, ev| {
                    let (value, to) = (value.cloned(), reply_to.clone());
                    engine.handle_set_value(key, token, value, to, now, ev)
                });
                self.late(proposed)
            }
        };
        if back {
            self.propose();
        }
        served
    }

    /// As a release nobody waits for: no late answer, which a hold would
    /// count as a client coming back (see `group_commit`).
    fn release_unreceived(&mut self, key: &Key, token: Token, now: Millis, events: &mut Events) {
        let back = self.returns.request_in();
        // A node that no longer serves has nothing to release.
        let _ = self.release(key, token, None, now, events);
        if back {
            self.propose();
        }
    }

    fn cancel(&mut self, id: WaiterId) {
        self.engine.handle_cancel(id);
    }

    fn cancel_watch(&mut self, id: WatchId) {
        self.watches.cancel(id);
    }

    /// Watches whose wait ran out are answered after a read round: their
    /// answer says the key did not change, which a leader deposed unawares
    /// cannot tell.
    fn tick(&mut self, now: Millis, events: &mut Events) {
        self.drive(events, |engine, ev| engine.handle_tick(now, ev));
        // Requests past their answer budget may have left the log's hands.
        self.answer_settled_reads(now, events);
        for watch in self.watches.take_due(now) {
            // Its answer reports no write of its own: it waits for none.
            if let Err(read) = self.reads.push(0, Read::WatchDue(watch)) {
                events.push(reads::answer(read, Err(None)));
            }
        }
    }

    fn next_deadline(&self) -> Option<Millis> {
        earliest(self.engine.poll_timeout(), self.watches.next_deadline())
    }

    fn set_quota(&mut self, quota: Quota) {
        self.engine.set_quota(quota);
        self.watches.set_max(quota.max_watches);
    }

    fn status(&self) -> NodeStatus {
        let engine = &self.engine;
        // A leader still catching up with its own first entry does not
        // serve yet, so it does not claim to.
        let role = match engine.role() {
            _ if self.removed => Role::Removed,
            RaftRole::Leader { .. } if engine.serving() => Role::Leader,
            RaftRole::Leader { .. } => Role::Candidate,
            RaftRole::Follower { .. } => Role::Follower,
            RaftRole::Candidate => Role::Candidate,
        };
        let (table, waiters) = (engine.table(), engine.waiter_count());
        NodeStatus {
            active: engine.redirect_target(),
            // Only a leader knows its followers' progress; a stepped-down
            // one still shows it, which is what an operator wants to see.
            extra: observe::status_fields(self.shown.term, &self.shown.progress),
            ..NodeStatus::of_table(role, Mode::Raft, table, waiters)
        }
    }

    /// Commands for the shell, or what makes some at its next turn: a
    /// proposal ready with none in flight or held, queries for a round.
    fn has_output(&self) -> bool {
        !self.commands.is_empty()
            || (self.engine.has_output() && !self.entry_in_flight && !self.returns.holding())
            || self.reads.round_due()
    }

    /// The leader's table, every change it applied (not a read confirmed
    /// with a majority, as `Q` is); any other node redirects.
    fn served_table(&self) -> Result<&LockTable, Option<String>> {
        match self.engine.check_serving() {
            Ok(()) => Ok(self.engine.table()),
            Err(to) => Err(self.redirect(to)),
        }
    }

    fn waiters_on(&self, key: &Key, _now: Millis) -> u64 {
        self.engine.waiting_on(key) as u64
    }

    fn counters(&self) -> baton_server::NodeCounters {
        let indexes = self.shown.indexes;
        baton_server::NodeCounters {
            // The engine counts the expiries it applies from the log.
            expiries: self.engine.expiries(),
            role_changes: self.role_changes,
            commit_index: indexes.committed,
            applied_index: indexes.applied,
            ..Default::default()
        }
    }

    fn members(&self, _now: Millis) -> Vec<baton_server::inspect::Member> {
        let mut members =
            super::inspect::members(&self.engine, &self.shown.progress, &self.shown.silent);
        if self.removed {
            // Its log may still list it; it is a member no more.
            for me in members.iter_mut().filter(|m| m.is_self) {
                me.state = "removed";
            }
        }
        members
    }

    fn health_issue(&self, now: Millis) -> Option<String> {
        if self.removed {
            return Some("removed from the cluster's membership: this node serves no more".into());
        }
        // Only a follower that names a leader can be wrong about it; a
        // leader without a majority steps down (see `observe`).
        match self.engine.role() {
            RaftRole::Follower { leader: Some(_) } => self.contact.issue(now),
            _ => None,
        }
    }
}

impl TableHost for SharedLocks<RaftLockNode> {
    fn apply(&self, entries: &[Entry]) {
        let at = TokioInstant::now();
        self.with(|node, now, events| node.handle_committed(entries, at, now, events));
    }

    fn snapshot(&self) -> TableSnapshot {
        self.with(|node, now, _| node.table_snapshot(now))
    }

    fn restore(&self, snapshot: &TableSnapshot) {
        self.with(|node, now, events| node.handle_snapshot(snapshot, now, events));
    }
}
