//! The named inputs of a Raft node beyond the [`LockNode`] trait, and the
//! commands they leave for the shell. The shell feeds openraft's metrics,
//! the outcome of each command it ran and the time passing; openraft's
//! state machine hands in committed entries and snapshots. Each is one
//! method, called through [`SharedLocks::with`](baton_server::SharedLocks::with)
//! as the server's call protocol says (see `baton_server::LockNode`), with
//! the time as an argument; the shell then runs [`RaftLockNode::take_commands`]
//! and sleeps until [`RaftLockNode::poll_timeout`] at most.
//!
//! [`LockNode`]: baton_server::LockNode

use std::time::Duration;

use baton_core::{Key, Millis, TableSnapshot};
use baton_server::Events;
use openraft::TokioInstant;

use super::command::RaftCommand;
use super::contact::{LeaderContact, CHECK_EVERY};
use super::lock_node::RaftLockNode;
use super::observe::{self, LogIndexes, Metrics, ServerMetrics};
use super::reads;
use crate::raft::engine::RaftRole;
use crate::raft::members::Members;
use crate::raft::removal;
use crate::raft::types::{Entry, LogId, NodeId, StoredMembership};

impl RaftLockNode {
    /// The commands the inputs so far left for the shell, oldest first.
    pub fn take_commands(&mut self) -> Vec<RaftCommand> {
        std::mem::take(&mut self.commands)
    }

    /// When the node next wants [`RaftLockNode::handle_tick`] (with fresh
    /// metrics): to re-check a leader's quorum, or to ask for leader
    /// contact. `None` before the first metrics.
    pub fn poll_timeout(&self) -> Option<TokioInstant> {
        match (self.next_check, self.next_contact_ask) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// openraft's metrics at `at`: `server` as just published, `full` as
    /// they stand (they may lag `server` by a step). Sets the role to serve
    /// in (a leader without a majority steps down), the membership, what
    /// `S` shows, and hands the lead over from a stuck follower.
    pub fn handle_metrics(
        &mut self,
        server: &ServerMetrics,
        full: &Metrics,
        at: TokioInstant,
        now: Millis,
        events: &mut Events,
    ) {
        let membership = &server.membership_config;
        if self.members_seen != *membership.log_id() {
            self.members_seen = *membership.log_id();
            let members = Members::of(membership.membership());
            self.drive(events, |engine, _| engine.handle_members(members, now));
        }
        let mut role = self.roles.role(server, full, at);
        self.check_removed(&server.membership_config);
        if self.removed && matches!(role, RaftRole::Leader { .. }) {
            // A leader that holds a membership without itself lets the
            // others carry on; it serves no more.
            role = RaftRole::Candidate;
        }
        self.set_role(role, now, events);
        self.shown.term = full.current_term;
        self.shown.progress = observe::replication(full);
        self.shown.silent = observe::silent_followers(
            full,
            at,
            self.times.silent_after,
            self.roles.leading_since(),
        );
        self.shown.indexes = LogIndexes::of(full);
        self.check_stuck(full, at);
        self.next_check = Some(at + self.times.check_every);
        self.plan(at);
    }

    /// A member said its committed membership at `at` leaves this node
    /// out (see [`crate::raft::removal`]); taken into account at the next
    /// metrics.
    pub fn handle_removal_notice(&mut self, at: Option<LogId>) {
        self.told_removed = at;
    }

    /// Whether this node is removed, logged once when it becomes so.
    fn check_removed(&mut self, own: &StoredMembership) {
        let removed = removal::removed(self.engine.me(), own, self.told_removed);
        if removed && !self.removed {
            tracing::warn!(
                "this node was removed from the cluster's membership: it serves no more and redirects clients; stop it, or wipe its data directory and add it again (baton member add)"
            );
        } else if !removed && self.removed {
            tracing::info!("this node is a member of the cluster again");
        }
        self.removed = removed;
    }

    /// The role to serve in; a node that no longer serves sends the
    /// queries not yet in a round where the lead is.
    fn set_role(&mut self, role: crate::raft::RaftRole, now: Millis, events: &mut Events) {
        if self.engine.role() != role {
            self.count_role_change();
        }
        self.drive(events, |engine, ev| engine.handle_role(role, now, ev));
        if let Err(to) = self.engine.check_serving() {
            let addr = self.redirect(to);
            for read in self.reads.take_unanswered() {
                events.push(reads::answer(read, Err(addr.clone())));
            }
            self.watches.redirect_all(addr, events);
        }
    }

    /// Hands the lead over when a follower that answers heartbeats gets no
    /// entries although it lags: to the most up-to-date other follower that
    /// answers (a leader handing over sends no heartbeats, so a target that
    /// cannot hear it costs an election timeout).
    fn check_stuck(&mut self, full: &Metrics, at: TokioInstant) {
        let Some(stuck) = self.stuck.stuck(full, at) else {
            return;
        };
        let within = self.times.stuck_after;
        let to = observe::replication(full)
            .into_iter()
            .filter(|p| p.node != stuck.node && p.node != self.engine.me())
            .filter(|p| observe::answers(full, p.node, at, within))
            .min_by_key(|p| p.lag)
            .map(|p| p.node);
        if let Some(to) = to {
            self.commands.push(RaftCommand::TransferLead { to, stuck });
        }
    }

    /// Time passed to `at`: asks for leader contact when due, and proposes
    /// or holds what waits.
    pub fn handle_tick(&mut self, at: TokioInstant) {
        match self.next_contact_ask {
            None => self.next_contact_ask = Some(at + CHECK_EVERY),
            Some(due) if due <= at && !self.asking_contact => {
                self.asking_contact = true;
                self.next_contact_ask = Some(at + CHECK_EVERY);
                self.commands.push(RaftCommand::AskLeaderContact);
            }
            Some(_) => {}
        }
        self.plan(at);
    }

    /// The leader last reached this node `age` ago (`None`: never).
    pub fn handle_leader_heard(&mut self, age: Option<Duration>, now: Millis) {
        self.asking_contact = false;
        self.contact = LeaderContact {
            heard_at: age.map(|a| now.saturating_sub(a.as_millis() as u64)),
            stale_after_ms: self.times.contact_stale_after.as_millis() as u64,
        };
    }

    /// The entry with these tags is done, `took` after it was proposed:
    /// in the log, or not (`Err`, with the leader if known).
    pub fn handle_proposal_done(
        &mut self,
        tags: &[u64],
        took: Duration,
        result: Result<(), Option<NodeId>>,
        at: TokioInstant,
        now: Millis,
        events: &mut Events,
    ) {
        self.entry_in_flight = false;
        self.group.handle_entry_done(took);
        if let Err(leader) = result {
            self.drive(events, |engine, ev| {
                engine.handle_proposal_failed(tags, leader, now, ev)
            });
            self.answer_settled_reads(now, events);
        }
        self.plan(at);
    }

    /// The hold under way ran to its bound: the proposal goes now.
    pub fn handle_hold_over(&mut self) {
        if self.returns.holding() {
            self.returns.end_hold();
            self.propose();
        }
    }

    /// The round of queries ended: answered from the table if the lead was
    /// `confirmed` (the table then holds everything committed before they
    /// arrived), else with `M` to whoever leads now.
    pub fn handle_read_confirmed(
        &mut self,
        confirmed: bool,
        at: TokioInstant,
        now: Millis,
        events: &mut Events,
    ) {
        let addr = self
            .engine
            .check_serving()
            .err()
            .map(|to| self.redirect(to));
        for (mark, read) in self.reads.end_round() {
            match (&addr, confirmed) {
                (None, true) => self.reads.wait_for_writes((mark, read)),
                (Some(addr), _) => events.push(reads::answer(read, Err(addr.clone()))),
                (None, false) => events.push(reads::answer(read, Err(None))),
            }
        }
        self.answer_settled_reads(now, events);
        self.plan(at);
    }

    /// Answers the confirmed reads whose connection's earlier writes (and
    /// any other before their mark) are done: the table holds them now.
    pub(super) fn answer_settled_reads(&mut self, now: Millis, events: &mut Events) {
        let engine = &self.engine;
        for read in self.reads.take_settled(|mark| engine.settled_below(mark)) {
            let state = engine.query(read.key(), now);
            events.push(reads::answer(read, Ok(state)));
        }
    }

    /// Committed entries, in log order, applied at `at`.
    pub fn handle_committed(
        &mut self,
        entries: &[Entry],
        at: TokioInstant,
        now: Millis,
        events: &mut Events,
    ) {
        let before = events.len();
        self.drive(events, |engine, ev| {
            for entry in entries {
                engine.handle_committed(entry.into(), now, ev);
            }
        });
        // Each event answers one client: those are the requests a hold
        // expects back (see `group_commit`).
        let answered = (events.len() - before) as u64;
        self.returns.answered(answered, at);
        self.answer_settled_reads(now, events);
        if !self.watches.is_empty() {
            self.answer_watches(Some(changed_keys(entries)), now, events);
        }
    }

    /// The table now, for a snapshot.
    pub fn table_snapshot(&self, now: Millis) -> TableSnapshot {
        self.engine.snapshot(now)
    }

    /// Replaces the table with an installed snapshot's (a leader hands
    /// on the keys it frees).
    pub fn handle_snapshot(&mut self, snapshot: &TableSnapshot, now: Millis, events: &mut Events) {
        self.drive(events, |engine, ev| {
            engine.handle_snapshot(snapshot, now, ev)
        });
        // Any key may have changed.
        self.answer_watches(None, now, events);
    }

    /// Answers the pending watches of the `changed` keys (`None`: of
    /// every key) whose client saw another state than the table now
    /// holds: the committed state, which needs no read round.
    fn answer_watches(&mut self, changed: Option<Vec<Key>>, now: Millis, events: &mut Events) {
        let engine = &self.engine;
        self.watches
            .after_changes(changed, |key| engine.query(key, now), events);
    }

    /// Starts a round of queries, and proposes the next entry or holds it:
    /// one entry is in flight at a time, so while it commits the commands
    /// that arrive gather into the next (see `group_commit`).
    fn plan(&mut self, at: TokioInstant) {
        if self.reads.round_due() {
            self.reads.start_round();
            self.commands.push(RaftCommand::ConfirmLead);
        }
        if self.entry_in_flight || self.returns.holding() || !self.engine.has_output() {
            return;
        }
        match self.returns.start_hold(&self.group, at) {
            Some(at_most) => self.commands.push(RaftCommand::HoldProposal { at_most }),
            None => self.propose(),
        }
    }

    /// Proposes the next entry, if there is one.
    pub(super) fn propose(&mut self) {
        if let Some((proposal, tags)) = self.engine.poll_proposal() {
            self.entry_in_flight = true;
            self.commands.push(RaftCommand::Propose { proposal, tags });
        }
    }
}

/// The keys the commands of `entries` name: every key whose holders or
/// values may have changed (a command that changed nothing is harmless:
/// a watch is answered only if its key's state differs from what its
/// client saw).
fn changed_keys(entries: &[Entry]) -> Vec<Key> {
    entries
        .iter()
        .filter_map(|entry| match &entry.payload {
            openraft::EntryPayload::Normal(proposal) => Some(proposal),
            _ => None,
        })
        .flat_map(|proposal| proposal.commands.iter())
        .filter_map(|tagged| tagged.command.key().cloned())
        .collect()
}
