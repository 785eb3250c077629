//! The named inputs of a Raft node beyond the [`LockNode`] trait: what the
//! shell learns from openraft (a change of role, a proposal that failed)
//! and what openraft's state machine hands the table (committed entries,
//! snapshots). Each is one method, called through
//! [`SharedLocks::with`](baton_server::SharedLocks::with) as the server's
//! call protocol says (see `baton_server::LockNode`): no engine code is
//! written in the shell's closures.
//!
//! [`LockNode`]: baton_server::LockNode

use baton_core::{Key, Millis, TableSnapshot};
use baton_server::Mailbox;
use baton_server::NodeEvent;

use crate::raft::engine::RaftRole;
use crate::raft::members::Members;
use crate::raft::node::lock_node::RaftLockNode;
use crate::raft::node::reads;
use crate::raft::types::{Entry, NodeId};

impl RaftLockNode {
    /// openraft's view of this node changed: the role to serve in (a
    /// leader without a majority steps down).
    pub fn role_changed(&mut self, role: RaftRole, now: Millis, events: &mut Vec<NodeEvent>) {
        if self.engine().role() != role {
            self.count_role_change();
        }
        self.drive(events, |engine, ev| engine.handle_role(role, now, ev));
        if let Err(to) = self.engine().check_serving() {
            // Queries not yet sent for confirmation go where the lead is.
            let addr = self.redirect(to);
            for (key, reply_to) in self.reads_mut().take() {
                events.push(reads::answer(key, reply_to, Err(addr.clone())));
            }
        }
    }

    /// The log holds a new membership: redirects and `/v1/cluster` follow it.
    pub fn members_changed(&mut self, members: Members) {
        self.drive(&mut Vec::new(), |engine, _| engine.set_members(members));
    }

    /// The queries to confirm the lead for, all that wait.
    pub fn take_reads(&mut self) -> Vec<(Key, Mailbox)> {
        self.reads_mut().take()
    }

    /// Answers `reads`: from the table if the lead was `confirmed` (the
    /// table then holds everything committed before they arrived), else
    /// with `M` to whoever leads now.
    pub fn answer_reads(
        &mut self,
        reads: Vec<(Key, Mailbox)>,
        confirmed: bool,
        now: Millis,
        events: &mut Vec<NodeEvent>,
    ) {
        let addr = self
            .engine()
            .check_serving()
            .err()
            .map(|to| self.redirect(to));
        for (key, reply_to) in reads {
            let state = match (&addr, confirmed) {
                (None, true) => Ok(self.engine().query(&key, now)),
                (Some(addr), _) => Err(addr.clone()),
                (None, false) => Err(None),
            };
            events.push(reads::answer(key, reply_to, state));
        }
    }

    /// The batch with these tags did not make it into the log; `leader`
    /// leads instead, if known.
    pub fn proposal_failed(
        &mut self,
        tags: &[u64],
        leader: Option<NodeId>,
        now: Millis,
        events: &mut Vec<NodeEvent>,
    ) {
        self.drive(events, |engine, ev| {
            engine.handle_proposal_failed(tags, leader, now, ev)
        });
    }

    /// Committed entries, in log order.
    pub fn apply_committed(&mut self, entries: &[Entry], now: Millis, events: &mut Vec<NodeEvent>) {
        let before = events.len();
        self.drive(events, |engine, ev| {
            for entry in entries {
                engine.handle_committed(entry.into(), now, ev);
            }
        });
        // Each event answers one client: those are the requests the pump
        // expects back (see `group_commit`).
        let answered = (events.len() - before) as u64;
        self.returns()
            .answered(answered, tokio::time::Instant::now());
    }

    /// The table now, for a snapshot.
    pub fn table_snapshot(&self, now: Millis) -> TableSnapshot {
        self.engine().snapshot(now)
    }

    /// Replaces the table with an installed snapshot's (a leader hands
    /// on the keys it frees).
    pub fn restore_table(
        &mut self,
        snapshot: &TableSnapshot,
        now: Millis,
        events: &mut Vec<NodeEvent>,
    ) {
        self.drive(events, |engine, ev| {
            engine.handle_snapshot(snapshot, now, ev)
        });
    }
}
