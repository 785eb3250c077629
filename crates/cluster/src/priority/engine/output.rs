//! What a priority node sends its peers: heartbeats, snapshots, the
//! commands it applied, all through one outbox the shell drains in order,
//! every message within the message limit (tables and batches in pieces).

use baton_core::Millis;

use super::super::messages::{Heartbeat, NodeIndex, PeerRole, PriorityMessage, TablePart};
use super::pieces::{command_batches, table_parts};
use super::roles::{HandingOff, Role};
use super::PriorityNode;

impl<H> PriorityNode<H> {
    pub(super) fn heartbeat(&self) -> Heartbeat {
        Heartbeat {
            role: match self.role {
                Role::Active => PeerRole::Active,
                Role::Standby(_) => PeerRole::Standby,
                Role::HandingOff(_) => PeerRole::HandingOff,
            },
            term: self.term,
            seq: self.seq,
            last_token: self.service.table().last_token().max(self.seen_token),
            following: match &self.role {
                // Handing off: names the successor.
                Role::HandingOff(HandingOff { to, .. }) => Some(*to),
                Role::Active => None,
                // Just resumed, this node would refuse a handoff: it does
                // not offer itself as a successor yet.
                Role::Standby(standby) => standby
                    .following
                    .filter(|_| !self.recently_resumed(self.last_tick)),
            },
        }
    }

    pub(super) fn send_heartbeats(&mut self) {
        self.flush_journal();
        let beat = self.heartbeat();
        for p in 0..self.peers.len() {
            if p != self.config.me {
                self.outbox
                    .push((p, PriorityMessage::Heartbeat(beat.clone())));
            }
        }
    }

    /// The table, in pieces, to a standby that asked for it; commands of
    /// this term follow it.
    pub(super) fn send_snapshot(&mut self, to: NodeIndex, now: Millis) {
        self.flush_journal();
        let (term, seq) = (self.term, self.seq);
        self.send_table(to, now, |part| PriorityMessage::SnapshotPart {
            term,
            seq,
            part,
        });
        self.peers[to].synced = true;
    }

    /// The final table, in pieces, to the node that takes the role (or,
    /// for an active that steps down, merges it).
    pub(super) fn send_handoff(&mut self, to: NodeIndex, now: Millis) {
        self.flush_journal();
        self.send_table(to, now, |part| PriorityMessage::HandoffPart { part });
    }

    fn send_table(
        &mut self,
        to: NodeIndex,
        now: Millis,
        wrap: impl Fn(TablePart) -> PriorityMessage,
    ) {
        debug_assert!(
            to != self.config.me && to < self.peers.len(),
            "table to {to}"
        );
        let table = self.service.table().snapshot(now);
        let id = self.next_table;
        self.next_table = self.next_table.wrapping_add(1);
        for part in table_parts(table, id, self.message_limit, wrap) {
            self.outbox.push((to, part));
        }
    }

    /// Moves the commands applied since the last call into the outbox, in
    /// batches within the message limit, for every synced standby.
    pub(super) fn flush_journal(&mut self) {
        if !self.service.has_journal() {
            return;
        }
        let commands = self.service.drain_journal();
        self.version += 1;
        let first_seq = self.seq;
        self.seq += commands.len() as u64;
        if !self.role.is_active() {
            debug_assert!(
                commands.is_empty(),
                "{} commands journaled while not serving",
                commands.len()
            );
            return;
        }
        let batches = command_batches(self.term, first_seq, commands, self.message_limit);
        // Every synced standby gets the same batches: their bytes are
        // shared, not copied.
        for p in 0..self.peers.len() {
            if p != self.config.me && self.peers[p].synced {
                for batch in &batches {
                    self.outbox.push((p, batch.clone()));
                }
            }
        }
    }

    /// Whether [`Self::poll_transmits`] has something.
    pub fn has_transmits(&self) -> bool {
        !self.outbox.is_empty() || self.service.has_journal()
    }

    /// Everything for the peers, in order: (addressee, message).
    pub fn poll_transmits(&mut self) -> Vec<(NodeIndex, PriorityMessage)> {
        self.flush_journal();
        self.checked();
        std::mem::take(&mut self.outbox)
    }
}
