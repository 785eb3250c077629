//! The Raft engine seen by the server: requests in client terms, answers
//! as the server's events, and the committed log applied under the
//! server's mutex.

use baton_core::{
    Event, Key, LockTable, Millis, NotServing, Outcome, Quota, TableSnapshot, Token, WaiterId,
};
use baton_proto::{Mode, Role};
use baton_server::{
    Answer, LockNode, LockRequest, Mailbox, NodeEvent, NodeStatus, NodeTally, Served, SharedLocks,
};

use super::contact::LeaderContact;
use super::engine::{RaftEngine, RaftRole};
use super::group_commit::Returns;
use super::observe::{self, PeerProgress};
use super::reads::PendingReads;
use super::state_machine::TableHost;
use super::types::{Entry, Proposal};

#[derive(Debug)]
pub struct RaftLockNode {
    engine: RaftEngine<Mailbox>,
    scratch: Vec<Event<Mailbox>>,
    /// openraft's metrics, read when `S`, `/metrics` or `/v1/cluster`
    /// asks: the term, the followers' replication, the log's indexes.
    observed: Option<observe::MetricsView>,
    /// `Q` requests waiting for the lead to be confirmed.
    reads: PendingReads,
    /// For the metrics: changes of role.
    tally: NodeTally,
    /// When a follower last heard its leader (for `/health`).
    contact: LeaderContact,
    /// Requests in and answers out, for the pump's group commit.
    returns: std::sync::Arc<Returns>,
}

impl RaftLockNode {
    pub fn new(engine: RaftEngine<Mailbox>) -> RaftLockNode {
        RaftLockNode {
            engine,
            scratch: Vec::new(),
            observed: None,
            reads: PendingReads::default(),
            tally: NodeTally::default(),
            contact: LeaderContact::default(),
            returns: std::sync::Arc::default(),
        }
    }

    pub fn engine(&self) -> &RaftEngine<Mailbox> {
        &self.engine
    }

    /// Where `S`, `/metrics` and `/v1/cluster` read openraft's view: read
    /// when asked, not pushed at every change (openraft publishes after
    /// every step of its loop).
    pub fn observe(&mut self, view: observe::MetricsView) {
        self.observed = Some(view);
    }

    /// The term and the followers' replication (none before `observe`).
    fn progress(&self) -> (u64, Vec<PeerProgress>) {
        self.observed
            .as_ref()
            .map_or((0, Vec::new()), observe::MetricsView::progress)
    }

    /// The leader was last heard `age` ago (`None`: never), and is
    /// stale after `stale_after` (see [`super::contact`]).
    pub fn leader_heard(
        &mut self,
        age: Option<std::time::Duration>,
        stale_after: std::time::Duration,
        now: Millis,
    ) {
        self.contact = LeaderContact {
            heard_at: age.map(|a| now.saturating_sub(a.as_millis() as u64)),
            stale_after_ms: stale_after.as_millis() as u64,
        };
    }

    /// Counts a change of role (metrics).
    pub(super) fn count_role_change(&mut self) {
        self.tally.role_changed();
    }

    /// The next batch of commands to propose as one log entry, with their tags.
    pub fn take_proposal(&mut self) -> Option<(Proposal, Vec<u64>)> {
        self.engine.poll_proposal()
    }

    /// Runs `f` on the engine and turns the events it made into the
    /// server's (nodes by address, not index).
    pub fn drive<R>(
        &mut self,
        events: &mut Vec<NodeEvent>,
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

    /// The book of requests and answers the pump holds proposals on.
    pub fn returns(&self) -> std::sync::Arc<Returns> {
        self.returns.clone()
    }

    /// The read task's wake-up, for the shell.
    pub fn reads_ready(&self) -> std::sync::Arc<tokio::sync::Notify> {
        self.reads.ready()
    }

    pub(super) fn reads_mut(&mut self) -> &mut PendingReads {
        &mut self.reads
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
        events: &mut Vec<NodeEvent>,
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
        if self.reads.push(key.clone(), reply_to.clone()) {
            Served::Later
        } else {
            // Too many queries wait already: `M Q <key> -` has the client
            // ask again shortly, which bounds the queue.
            Served::Redirect(None)
        }
    }
}

/// Why a Raft node refuses protocol 1.2's semaphores, shared locks,
/// values and watches (`E <op> <key> ...`): its log has no commands for
/// them yet.
const RAFT_SERVES_1_1: &str =
    "raft mode does not serve permits, shared locks, values or watches yet";

impl LockNode for RaftLockNode {
    fn handle(
        &mut self,
        request: LockRequest<'_>,
        now: Millis,
        reply_to: &Mailbox,
        events: &mut Vec<NodeEvent>,
    ) -> Served<Answer> {
        self.returns.request_in();
        match request {
            LockRequest::Acquire { options, .. } if !options.is_plain() => {
                Served::Done(Answer::Refused(RAFT_SERVES_1_1.to_owned()))
            }
            LockRequest::SetValue { .. } | LockRequest::Watch { .. } => {
                Served::Done(Answer::Refused(RAFT_SERVES_1_1.to_owned()))
            }
            LockRequest::Acquire {
                key,
                wait_ms,
                lease_ms,
                ..
            } => {
                let result = self.drive(events, |engine, ev| {
                    engine.handle_acquire(key.clone(), wait_ms, lease_ms, now, reply_to.clone(), ev)
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
                let proposed = self
                    .engine
                    .handle_renew(key, token, lease_ms, reply_to.clone());
                self.late(proposed)
            }
            LockRequest::Query { key } => self.query(key, reply_to),
        }
    }

    fn release_unreceived(
        &mut self,
        key: &Key,
        token: Token,
        now: Millis,
        events: &mut Vec<NodeEvent>,
    ) {
        self.returns.request_in();
        // A node that no longer serves has nothing to release.
        let _ = self.release(key, token, None, now, events);
    }

    fn cancel(&mut self, id: WaiterId) {
        self.engine.handle_cancel(id);
    }

    fn tick(&mut self, now: Millis, events: &mut Vec<NodeEvent>) {
        self.drive(events, |engine, ev| engine.handle_tick(now, ev));
    }

    fn next_deadline(&self) -> Option<Millis> {
        self.engine.next_deadline()
    }

    fn set_quota(&mut self, quota: Quota) {
        self.engine.set_quota(quota);
    }

    fn status(&self) -> NodeStatus {
        let engine = &self.engine;
        NodeStatus {
            // A leader still catching up with its own first entry does not
            // serve yet, so it does not claim to.
            role: match engine.role() {
                RaftRole::Leader { .. } if engine.serving() => Role::Leader,
                RaftRole::Leader { .. } => Role::Candidate,
                RaftRole::Follower { .. } => Role::Follower,
                RaftRole::Candidate => Role::Candidate,
            },
            mode: Mode::Raft,
            active: engine.redirect_target(),
            token: engine.table().last_token(),
            locks: engine.table().len() as u64,
            waiters: engine.waiter_count() as u64,
            // Only a leader knows its followers' progress; a stepped-down
            // one still shows it, which is what an operator wants to see.
            extra: {
                let (term, progress) = self.progress();
                observe::status_fields(term, &progress)
            },
        }
    }

    fn has_output(&self) -> bool {
        self.engine.has_output()
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
        let indexes = self
            .observed
            .as_ref()
            .map(observe::MetricsView::indexes)
            .unwrap_or_default();
        baton_server::NodeCounters {
            // The engine counts the expiries it applies from the log.
            expiries: self.engine.expiries(),
            commit_index: indexes.committed,
            applied_index: indexes.applied,
            ..self.tally.counters()
        }
    }

    fn members(&self, _now: Millis) -> Vec<baton_server::inspect::Member> {
        super::inspect::members(&self.engine, &self.progress().1)
    }

    fn health_issue(&self, now: Millis) -> Option<String> {
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
        self.with(|node, now, events| node.apply_committed(entries, now, events));
    }

    fn snapshot(&self) -> TableSnapshot {
        self.with(|node, now, _| node.table_snapshot(now))
    }

    fn restore(&self, snapshot: &TableSnapshot) {
        self.with(|node, now, events| node.restore_table(snapshot, now, events));
    }
}
