//! What a priority node sends its peers: heartbeats, snapshots, the
//! commands it applied, all through one outbox the shell drains in order.

use baton_core::Millis;

use super::super::messages::{Heartbeat, NodeIndex, PeerRole, PriorityMessage};
use super::{NodeRole, PriorityNode};

impl<H> PriorityNode<H> {
    pub(super) fn heartbeat(&self) -> Heartbeat {
        Heartbeat {
            role: match self.role {
                NodeRole::Active => PeerRole::Active,
                NodeRole::Standby => PeerRole::Standby,
                NodeRole::HandingOff { .. } => PeerRole::HandingOff,
            },
            term: self.term,
            seq: self.seq,
            last_token: self.service.table().last_token().max(self.seen_token),
            following: match self.role {
                // Handing off: names the successor.
                NodeRole::HandingOff { to } => Some(to),
                // Just resumed, this node would refuse a handoff: it does
                // not offer itself as a successor yet.
                _ => self
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

    pub(super) fn send_snapshot(&mut self, to: NodeIndex, now: Millis) {
        self.flush_journal();
        let table = self.service.table().snapshot(now);
        self.outbox.push((
            to,
            PriorityMessage::Snapshot {
                term: self.term,
                seq: self.seq,
                table,
            },
        ));
        self.peers[to].synced = true;
    }

    /// Moves the commands applied since the last call into the outbox, one
    /// batch for every synced standby.
    pub(super) fn flush_journal(&mut self) {
        if !self.service.has_journal() {
            return;
        }
        let commands = self.service.drain_journal();
        self.version += 1;
        let first_seq = self.seq;
        self.seq += commands.len() as u64;
        if self.role != NodeRole::Active {
            return;
        }
        for p in 0..self.peers.len() {
            if p != self.config.me && self.peers[p].synced {
                let batch = PriorityMessage::Commands {
                    term: self.term,
                    first_seq,
                    commands: commands.clone(),
                };
                self.outbox.push((p, batch));
            }
        }
    }

    pub fn has_output(&self) -> bool {
        !self.outbox.is_empty() || self.service.has_journal()
    }

    /// Everything for the peers, in order.
    pub fn take_output(&mut self) -> Vec<(NodeIndex, PriorityMessage)> {
        self.flush_journal();
        std::mem::take(&mut self.outbox)
    }
}
