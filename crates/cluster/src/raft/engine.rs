//! The lock logic of one Raft node, without I/O: the lock table as the
//! committed log builds it, and on the leader the FIFO waiters and the
//! commands it proposes for them.
//!
//! Nothing changes the table but [`RaftEngine::apply_entry`]. A leader turns
//! requests into tagged commands in its outbox (the shell proposes them as
//! log entries) and answers each request when its command comes back
//! applied: a grant's token only exists once the log has assigned it.
//! Lease expiry, too, is a command the leader proposes; followers only keep
//! the time each lease ends, from their own clock, for the day they lead.

use std::collections::{HashMap, HashSet};

use baton_core::{
    AcquireOutcome, Command, Key, LockTable, Millis, Outcome, TableSnapshot, Token, WaitQueues,
    Waiter, WaiterId,
};
use baton_proto::{Op, Response};
use openraft::EntryPayload;

use super::types::{Entry, NodeId, Proposal, Tagged};

mod leadership;

pub use leadership::ORPHAN_WAIT_MS;

/// Most commands one log entry carries; more wait for the next entry.
pub const MAX_BATCH: usize = 1024;

/// What the node is in the Raft group, as far as serving goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RaftRole {
    /// Follows `leader` (or no one known yet: a learner or a fresh node).
    Follower {
        leader: Option<NodeId>,
    },
    Candidate,
    /// Leads `term`. It serves only once it has applied its own first entry
    /// of the term: from then on its table holds every committed change.
    Leader {
        term: u64,
    },
}

/// How a request or waiter ends, for the server to deliver.
#[derive(Debug)]
pub enum EngineEvent<H> {
    Granted {
        id: WaiterId,
        handle: H,
        key: Key,
        token: Token,
    },
    TimedOut {
        id: WaiterId,
        handle: H,
        key: Key,
    },
    Moved {
        id: WaiterId,
        handle: H,
        key: Key,
        to: Option<String>,
    },
    /// The late answer to a release or renewal.
    Reply {
        handle: H,
        response: Response,
    },
}

/// The node is not serving; redirect to this address (`None`: unknown).
pub type NotServing = Option<String>;

/// A request whose command is in the log's hands.
#[derive(Debug)]
enum Pending<H> {
    Grant(Waiter<H>),
    Release { key: Key, reply: Option<H> },
    Renew { key: Key, reply: H },
    Expire { key: Key, token: Token },
}

/// One node's lock engine. `H` answers a client (a connection's mailbox).
#[derive(Debug)]
pub struct RaftEngine<H> {
    me: NodeId,
    peers: Vec<String>,
    /// This process's name in the tags of the entries it proposes.
    origin: u64,
    table: LockTable,
    queues: WaitQueues<H>,
    role: RaftRole,
    /// The leader term whose first entry this node applied as its leader.
    own_entry_applied: Option<u64>,
    next_tag: u64,
    pending: HashMap<u64, Pending<H>>,
    /// Set when a leadership ended with requests in the log's hands: until
    /// the deadline, those with a tag below the bound wait for their entry
    /// (the next leader may well commit it); then they are redirected.
    orphans: Option<(Millis, u64)>,
    orphan_wait_ms: Millis,
    /// Keys with a grant proposed and not yet applied.
    granting: HashSet<Key>,
    /// Expiries proposed and not yet applied.
    expiring: HashSet<(Key, Token)>,
    /// Keys with renewals proposed and not yet applied, and how many: an
    /// expiry of such a key waits for them (see `tick`).
    renewing: HashMap<Key, u32>,
    outbox: Vec<Tagged>,
}

impl<H> RaftEngine<H> {
    /// `origin` must differ between two runs of the same node.
    pub fn new(me: NodeId, peers: Vec<String>, origin: u64) -> RaftEngine<H> {
        RaftEngine {
            me,
            peers,
            origin,
            table: LockTable::new(),
            queues: WaitQueues::new(),
            role: RaftRole::Follower { leader: None },
            own_entry_applied: None,
            next_tag: 1,
            pending: HashMap::new(),
            orphans: None,
            orphan_wait_ms: ORPHAN_WAIT_MS,
            granting: HashSet::new(),
            expiring: HashSet::new(),
            renewing: HashMap::new(),
            outbox: Vec::new(),
        }
    }

    pub fn table(&self) -> &LockTable {
        &self.table
    }

    pub fn role(&self) -> RaftRole {
        self.role
    }

    pub fn me(&self) -> NodeId {
        self.me
    }

    pub fn peers(&self) -> &[String] {
        &self.peers
    }

    pub fn waiter_count(&self) -> usize {
        self.queues.len()
    }

    /// Acquires queued on `key`.
    pub fn waiting_on(&self, key: &Key) -> usize {
        self.queues.waiting_on(key)
    }

    /// Whether this node is the leader and has caught up: it serves.
    pub fn serving(&self) -> bool {
        matches!(self.role, RaftRole::Leader { term } if self.own_entry_applied == Some(term))
    }

    fn addr(&self, node: Option<NodeId>) -> Option<String> {
        node.and_then(|n| usize::try_from(n).ok())
            .and_then(|i| self.peers.get(i).cloned())
    }

    /// Where a client should go instead of here.
    pub fn redirect_target(&self) -> Option<String> {
        match self.role {
            RaftRole::Follower { leader } => self.addr(leader),
            RaftRole::Candidate | RaftRole::Leader { .. } => None,
        }
    }

    fn check_serving(&self) -> Result<(), NotServing> {
        if self.serving() {
            Ok(())
        } else {
            Err(self.redirect_target())
        }
    }

    fn propose(&mut self, command: Command, pending: Pending<H>) {
        let tag = self.next_tag;
        self.next_tag += 1;
        self.outbox.push(Tagged { tag, command });
        if let Pending::Renew { key, .. } = &pending {
            *self.renewing.entry(key.clone()).or_default() += 1;
        }
        self.pending.insert(tag, pending);
    }

    /// The pending request of `tag`, no longer pending.
    fn take_pending(&mut self, tag: u64) -> Option<Pending<H>> {
        let pending = self.pending.remove(&tag)?;
        if let Pending::Renew { key, .. } = &pending {
            if let Some(count) = self.renewing.get_mut(key) {
                *count -= 1;
                if *count == 0 {
                    self.renewing.remove(key);
                }
            } else {
                debug_assert!(false, "a renewal of {key:?} pending but not counted");
            }
        }
        Some(pending)
    }

    /// Queues an acquire; the grant, if any, comes once the log applies it.
    pub fn acquire(
        &mut self,
        key: Key,
        wait_ms: u64,
        lease_ms: u64,
        now: Millis,
        handle: H,
        events: &mut Vec<EngineEvent<H>>,
    ) -> Result<AcquireOutcome, NotServing> {
        self.check_serving()?;
        let deadline = (wait_ms > 0).then(|| now.saturating_add(wait_ms));
        let id = self.queues.push(key.clone(), lease_ms, deadline, handle);
        self.grant_next(&key, now, events);
        Ok(AcquireOutcome::Queued { id })
    }

    /// Proposes the grant of `key` to its oldest live waiter, if the key is
    /// free and no grant of it is already on its way.
    fn grant_next(&mut self, key: &Key, now: Millis, events: &mut Vec<EngineEvent<H>>) {
        if self.table.holder(key).is_none() {
            self.grant_behind_release(key, now, events);
        }
    }

    /// Right after a release is proposed: the next waiter's grant goes into
    /// the same entry, behind the release, so a hand-over costs one commit
    /// instead of two. Nothing else can grant the key meanwhile (`granting`
    /// holds it), and whatever applies in between, an expiry or a duplicate
    /// release of the same grant, only frees the key sooner.
    pub fn grant_behind_release(
        &mut self,
        key: &Key,
        now: Millis,
        events: &mut Vec<EngineEvent<H>>,
    ) {
        if !self.serving() || self.granting.contains(key) {
            return;
        }
        let mut timed_out = Vec::new();
        let next = self.queues.pop_next(key, now, &mut timed_out);
        events.extend(timed_out.into_iter().map(|w| EngineEvent::TimedOut {
            id: w.id,
            handle: w.handle,
            key: w.key,
        }));
        if let Some(waiter) = next {
            self.granting.insert(key.clone());
            let command = Command::Grant {
                key: key.clone(),
                lease_ms: waiter.lease_ms,
            };
            self.propose(command, Pending::Grant(waiter));
        }
    }

    /// Proposes a release. `Ok(None)`: the answer comes as a
    /// [`EngineEvent::Reply`]; `Ok(Some(outcome))`: known at once, because no
    /// applied grant carries that token.
    pub fn release(
        &mut self,
        key: &Key,
        token: Token,
        reply: Option<H>,
    ) -> Result<Option<Outcome>, NotServing> {
        self.check_serving()?;
        // A token a client holds was applied here before this node could
        // serve, so a mismatch now is final.
        if self.table.holder(key).is_none_or(|h| h.token != token) {
            return Ok(Some(Outcome::NotFound));
        }
        let command = Command::Release {
            key: key.clone(),
            token,
        };
        self.propose(
            command,
            Pending::Release {
                key: key.clone(),
                reply,
            },
        );
        Ok(None)
    }

    /// Proposes a renewal; answers as [`RaftEngine::release`].
    pub fn renew(
        &mut self,
        key: &Key,
        token: Token,
        lease_ms: u64,
        reply: H,
    ) -> Result<Option<Outcome>, NotServing> {
        self.check_serving()?;
        if self.table.holder(key).is_none_or(|h| h.token != token) {
            return Ok(Some(Outcome::NotFound));
        }
        let command = Command::Renew {
            key: key.clone(),
            token,
            lease_ms,
        };
        self.propose(
            command,
            Pending::Renew {
                key: key.clone(),
                reply,
            },
        );
        Ok(None)
    }

    /// A queued acquire's connection closed.
    pub fn cancel(&mut self, id: WaiterId) {
        self.queues.cancel(id);
    }

    /// Times out waiters and, on the serving leader, proposes the expiry of
    /// every lease that has run out.
    pub fn tick(&mut self, now: Millis, events: &mut Vec<EngineEvent<H>>) {
        self.settle_orphans(now, events);
        let mut timed_out = Vec::new();
        self.queues.take_timed_out(now, &mut timed_out);
        events.extend(timed_out.into_iter().map(|w| EngineEvent::TimedOut {
            id: w.id,
            handle: w.handle,
            key: w.key,
        }));
        if !self.serving() {
            return;
        }
        let due: Vec<(Key, Token)> = self
            .table
            .due_expiries(now)
            .filter(|(key, token)| !self.expiring.contains(&((*key).clone(), *token)))
            .map(|(key, token)| (key.clone(), token))
            .collect();
        for (key, token) in due {
            // A renewal already in the log (sent before the lease ran out,
            // held up by a stall) goes first: an expiry behind it would
            // remove the lock it renewed. Once it applies the lease is
            // new, or, if it never commits, the expiry comes next tick.
            if self.renewal_pending(&key) {
                continue;
            }
            self.expiring.insert((key.clone(), token));
            let command = Command::Expire {
                key: key.clone(),
                token,
            };
            self.propose(command, Pending::Expire { key, token });
        }
    }

    /// Whether a renewal of `key` is proposed and not yet applied.
    fn renewal_pending(&self, key: &Key) -> bool {
        self.renewing.contains_key(key)
    }

    /// When [`RaftEngine::tick`] next has something to do.
    pub fn next_deadline(&self) -> Option<Millis> {
        let orphans = self.orphans.map(|(deadline, _)| deadline);
        let waiters = match (self.queues.next_deadline(), orphans) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if !self.serving() {
            return waiters;
        }
        let lease = self
            .table
            .due_expiries(Millis::MAX)
            .find(|(key, token)| {
                !self.expiring.contains(&((*key).clone(), *token)) && !self.renewal_pending(key)
            })
            .and_then(|(key, _)| self.table.holder(key))
            .map(|holder| holder.expires_at);
        match (waiters, lease) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    pub fn has_output(&self) -> bool {
        !self.outbox.is_empty()
    }

    /// The next batch of commands to propose as one log entry.
    pub fn take_proposal(&mut self) -> Option<(Proposal, Vec<u64>)> {
        if self.outbox.is_empty() {
            return None;
        }
        let rest = self.outbox.split_off(self.outbox.len().min(MAX_BATCH));
        let commands = std::mem::replace(&mut self.outbox, rest);
        let tags = commands.iter().map(|c| c.tag).collect();
        Some((
            Proposal {
                origin: self.origin,
                commands,
            },
            tags,
        ))
    }

    /// Applies one committed entry at `now`.
    pub fn apply_entry(&mut self, entry: &Entry, now: Millis, events: &mut Vec<EngineEvent<H>>) {
        match &entry.payload {
            EntryPayload::Normal(proposal) => {
                let mine = proposal.origin == self.origin;
                for tagged in &proposal.commands {
                    let pending = if mine {
                        self.take_pending(tagged.tag)
                    } else {
                        None
                    };
                    self.apply_command(&tagged.command, pending, mine, now, events);
                }
            }
            EntryPayload::Blank => {
                let leader = entry.log_id.leader_id;
                if leader.node_id == self.me {
                    self.own_entry_applied = Some(leader.term);
                }
            }
            EntryPayload::Membership(_) => {}
        }
    }

    fn apply_command(
        &mut self,
        command: &Command,
        pending: Option<Pending<H>>,
        mine: bool,
        now: Millis,
        events: &mut Vec<EngineEvent<H>>,
    ) {
        let outcome = self.table.apply(command, now);
        match (command, pending) {
            (Command::Grant { key, .. }, Some(Pending::Grant(waiter))) => {
                self.granting.remove(key);
                match outcome {
                    // Only the serving leader hands a grant out: its lease
                    // counts from this apply, as the leader's expiry will.
                    // A node that applies its own old grant after losing
                    // the lead may do so long after the leader that
                    // committed it started the lease (and granted newer
                    // tokens): its client would hold the key past the
                    // leader's expiry. It is sent away instead; the grant
                    // lapses with its lease (found by the simulation).
                    Outcome::Granted { token } if self.serving() => {
                        events.push(EngineEvent::Granted {
                            id: waiter.id,
                            handle: waiter.handle,
                            key: waiter.key,
                            token,
                        })
                    }
                    // Unreachable while grants are proposed only for free
                    // keys; the waiter goes back to wait its turn again.
                    Outcome::GrantRejected if self.serving() => {
                        self.queues.push(
                            waiter.key,
                            waiter.lease_ms,
                            waiter.deadline,
                            waiter.handle,
                        );
                    }
                    _ => events.push(EngineEvent::Moved {
                        id: waiter.id,
                        handle: waiter.handle,
                        key: waiter.key,
                        to: self.redirect_target(),
                    }),
                }
            }
            (Command::Grant { key, .. }, None) => {
                // Our own grant whose request was already answered (this
                // node lost and regained the lead meanwhile): nobody holds
                // it, so it is given back at once.
                if let (true, Outcome::Granted { token }) = (mine, outcome) {
                    if self.serving() {
                        let command = Command::Release {
                            key: key.clone(),
                            token,
                        };
                        self.propose(
                            command,
                            Pending::Release {
                                key: key.clone(),
                                reply: None,
                            },
                        );
                    }
                }
            }
            (
                Command::Release { .. },
                Some(Pending::Release {
                    key,
                    reply: Some(handle),
                }),
            ) => {
                let response = if outcome == Outcome::Released {
                    Response::Released { key }
                } else {
                    Response::NotHeld {
                        op: Op::Release,
                        key,
                    }
                };
                events.push(EngineEvent::Reply { handle, response });
            }
            (Command::Renew { .. }, Some(Pending::Renew { key, reply })) => {
                let response = if outcome == Outcome::Renewed && !self.serving() {
                    // As for a grant: the new lease counts from the
                    // leader's apply, which may be long past.
                    Response::Moved {
                        op: Op::Renew,
                        key,
                        addr: self.redirect_target(),
                    }
                } else if outcome == Outcome::Renewed {
                    Response::Renewed { key }
                } else {
                    Response::NotHeld { op: Op::Renew, key }
                };
                events.push(EngineEvent::Reply {
                    handle: reply,
                    response,
                });
            }
            (Command::Expire { key, token }, _) => {
                self.expiring.remove(&(key.clone(), *token));
            }
            _ => {}
        }
        let freed = matches!(
            outcome,
            Outcome::Released | Outcome::Expired { existed: true }
        );
        if freed {
            let key = match command {
                Command::Release { key, .. } | Command::Expire { key, .. } => Some(key.clone()),
                _ => None,
            };
            if let Some(key) = key {
                self.grant_next(&key, now, events);
            }
        }
    }

    /// A snapshot of the table at `now`.
    pub fn snapshot(&self, now: Millis) -> TableSnapshot {
        self.table.snapshot(now)
    }

    /// Replaces the table with a snapshot's (a snapshot installed from the
    /// leader, or the stored one at start).
    pub fn restore(&mut self, snapshot: &TableSnapshot, now: Millis) {
        self.table = LockTable::restore(snapshot, now);
        self.granting.clear();
        self.expiring.clear();
    }
}
