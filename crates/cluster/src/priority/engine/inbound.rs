//! What a node does with its peers' messages: each is checked against the
//! sanity bounds first (`sanity`), tables are put together from their
//! pieces (`reassembly`), and full-sync requests are answered at most once
//! per peer per interval. Heartbeats have their own module (`heartbeats`).

use baton_core::{EncodedCommands, LockTable, Millis};

use super::super::messages::{
    NodeIndex, PeerRole, PriorityMessage, TablePart, Term, MAX_TABLE_LOCKS,
};
use super::reassembly::{assemble, Assembled, TableKind};
use super::PriorityNode;

/// Snapshots an active sends one peer back to back before the snapshot
/// interval holds it to one per interval.
pub const SNAPSHOT_BURST: u64 = 2;

impl<H> PriorityNode<H> {
    /// A peer's message. One that names no peer as its sender is ignored
    /// (the shell admits only links whose hello names a peer).
    pub fn handle_message(&mut self, from: NodeIndex, message: PriorityMessage, now: Millis) {
        if from >= self.peers.len() || from == self.config.me {
            // The shell admits only links from peers; a caller that did not
            // check still changes nothing (a test sends such messages).
            return;
        }
        if let Err(why) = self.check_message(from, &message, now) {
            // Nothing of it is taken, not even as a sign of life.
            self.note_refusal(from, &why, now);
            self.peers[from].refusing = true;
            return;
        }
        // Messages that waited out a pause come before the first tick.
        self.check_pause(now);
        self.peers[from].last_heard = Some(now);
        self.peers[from].refusing = false;
        self.dispatch(from, message, now);
        self.checked();
    }

    /// Bytes came in on peer `from`'s link since its last whole message
    /// (a large frame, or many, still being received or decoded): the peer
    /// runs, and a busy active is not a dead one. Counts only for a peer
    /// whose last message was taken: bytes that end up refused are no sign
    /// of life.
    pub fn handle_link_progress(&mut self, from: NodeIndex, now: Millis) {
        if from == self.config.me {
            return;
        }
        let Some(peer) = self.peers.get_mut(from) else {
            return;
        };
        if peer.last_heard.is_none() || peer.refusing {
            return;
        }
        self.check_pause(now);
        let peer = &mut self.peers[from];
        peer.last_heard = Some(now);
        // A table piece too large to cross within a failure timeout on a
        // slow link is still on its way: the table is not stale.
        if let Some(table) = peer.incoming.as_mut() {
            table.updated_at = now;
        }
        self.checked();
    }

    fn dispatch(&mut self, from: NodeIndex, message: PriorityMessage, now: Millis) {
        match message {
            PriorityMessage::Heartbeat(heartbeat) => self.on_heartbeat(from, heartbeat, now),
            PriorityMessage::SyncRequest => self.on_sync_request(from, now),
            PriorityMessage::SnapshotPart { term, seq, part } => {
                self.on_snapshot_part(from, term, seq, part, now)
            }
            PriorityMessage::Commands {
                term,
                first_seq,
                commands,
            } => self.on_commands(from, term, first_seq, &commands, now),
            PriorityMessage::HandoffPart { part } => self.on_handoff_part(from, part, now),
            PriorityMessage::HandoffTaken => self.on_handoff_answer(from, true, now),
            PriorityMessage::HandoffRefused => self.on_handoff_answer(from, false, now),
        }
    }

    /// How often an active sends one peer a snapshot, sustained: a standby
    /// asks every two heartbeats until it has one, so a lost snapshot is
    /// replaced within a few heartbeats, while a peer that asks on and on
    /// (a bug, a flood) costs one table per interval.
    pub(super) fn snapshot_interval(&self) -> Millis {
        (4 * self.config.heartbeat_ms).max(200)
    }

    /// Answers a full-sync request unless the peer has used up its
    /// allowance: [`SNAPSHOT_BURST`] snapshots at once, then one per
    /// snapshot interval (a virtual-clock rate limit). The burst lets the
    /// rare legitimate repeats through at once (a standby that found a
    /// gap in its commands right after its first copy, a new term after a
    /// merge); anything sustained is held to the interval. Dropped
    /// requests are not answered later: the standby asks again.
    fn on_sync_request(&mut self, from: NodeIndex, now: Millis) {
        if !self.role.is_active() {
            return;
        }
        let interval = self.snapshot_interval();
        let slack = interval.saturating_mul(SNAPSHOT_BURST - 1);
        let allowance_at = self.peers[from].snapshot_allowance_at;
        if now.saturating_add(slack) < allowance_at {
            tracing::debug!(peer = from, "sync request over the allowance; dropped");
            return;
        }
        self.peers[from].snapshot_allowance_at = allowance_at.max(now).saturating_add(interval);
        self.send_snapshot(from, now);
    }

    fn on_snapshot_part(
        &mut self,
        from: NodeIndex,
        term: Term,
        seq: u64,
        part: TablePart,
        now: Millis,
    ) {
        let again = now.saturating_add(2 * self.config.heartbeat_ms);
        let Some(standby) = self
            .role
            .standby_mut()
            .filter(|s| s.following == Some(from))
        else {
            self.drop_incoming_snapshot(from);
            return;
        };
        // The rest is on its way: asking again now would start a new copy
        // over this one, and a table that takes longer to cross than the
        // interval would never arrive whole.
        standby.next_sync_request = standby.next_sync_request.max(again);
        let kind = TableKind::Snapshot { term, seq };
        let table = match assemble(&mut self.peers[from].incoming, kind, part, now) {
            Assembled::Partial => return,
            Assembled::Complete(table) => table,
            Assembled::Gap => {
                // A piece lost with a broken link: ask again.
                tracing::debug!(active = from, "snapshot incomplete; asking again");
                standby.next_sync_request = now;
                return;
            }
            Assembled::TooLarge => {
                self.warn_peer(
                    from,
                    now,
                    &format_args!("a snapshot grew past {MAX_TABLE_LOCKS} locks; dropped"),
                );
                return;
            }
        };
        // Tokens this node issued or heard of stay known (and in its
        // heartbeats) after it adopts another's table.
        self.seen_token = self.seen_token.max(self.service.table().last_token());
        self.service.replace_table(LockTable::restore(&table, now));
        self.term = term;
        self.seq = seq;
        if let Some(standby) = self.role.standby_mut() {
            standby.synced = true;
        }
        self.version += 1;
    }

    fn on_handoff_part(&mut self, from: NodeIndex, part: TablePart, now: Millis) {
        // Whatever becomes of it, the sender no longer serves: a client
        // sent there comes back here, so this node must not send it there.
        if let Some(hb) = self.peers[from].heartbeat.as_mut() {
            hb.role = PeerRole::HandingOff;
        }
        match assemble(
            &mut self.peers[from].incoming,
            TableKind::Handoff,
            part,
            now,
        ) {
            Assembled::Partial => {}
            Assembled::Complete(table) => self.on_handoff(from, &table, now),
            // Nothing is taken of a handoff short of a piece: the sender's
            // next heartbeat still announces it, and this node then says it
            // did not take it (as for a handoff lost whole).
            Assembled::Gap => {
                self.warn_peer(from, now, &"a handoff came short of a piece; not taken")
            }
            Assembled::TooLarge => self.warn_peer(
                from,
                now,
                &format_args!("a handoff table grew past {MAX_TABLE_LOCKS} locks; not taken"),
            ),
        }
    }

    /// Drops a table in progress from `peer` if it is a snapshot.
    fn drop_incoming_snapshot(&mut self, peer: NodeIndex) {
        let slot = &mut self.peers[peer].incoming;
        if slot
            .as_ref()
            .is_some_and(|t| matches!(t.kind, TableKind::Snapshot { .. }))
        {
            *slot = None;
        }
    }

    /// Drops tables in progress that no piece extended for a failure
    /// timeout (their sender died or gave up), and snapshots a non-standby
    /// will never take.
    pub(super) fn drop_stale_tables(&mut self, now: Millis) {
        let timeout = self.config.failure_timeout_ms;
        let standby = self.role.standby().is_some();
        for peer in &mut self.peers {
            let stale = peer.incoming.as_ref().is_some_and(|t| {
                now.saturating_sub(t.updated_at) > timeout
                    || !standby && matches!(t.kind, TableKind::Snapshot { .. })
            });
            if stale {
                peer.incoming = None;
            }
        }
    }

    fn on_commands(
        &mut self,
        from: NodeIndex,
        term: Term,
        first_seq: u64,
        commands: &EncodedCommands,
        now: Millis,
    ) {
        let (my_term, my_seq) = (self.term, self.seq);
        let Some(standby) = self
            .role
            .standby_mut()
            .filter(|s| s.following == Some(from) && s.synced)
        else {
            return;
        };
        if term != my_term || first_seq > my_seq {
            // Something was lost in between: start over from a full copy.
            standby.resync(now);
            return;
        }
        // A batch from before our copy (its first commands already in it)
        // applies only what it adds.
        let already = usize::try_from(self.seq - first_seq).unwrap_or(usize::MAX);
        for command in commands.iter().skip(already) {
            let Ok(command) = command else {
                // Cannot happen: a batch is written by an encoder or
                // checked whole by the link before it gets here. Should it
                // anyway, the copy can no longer be trusted.
                debug_assert!(false, "an unchecked batch: {command:?}");
                standby.resync(now);
                return;
            };
            self.service.apply_replicated(&command, now);
            self.version += 1;
            self.seq += 1;
        }
    }

    /// A link to `peer` broke: what was sent on it may be lost, and what
    /// was coming from it may never be complete.
    /// A peer out of range is ignored (a dead link's late report).
    pub fn handle_link_down(&mut self, peer: NodeIndex) {
        if let Some(view) = self.peers.get_mut(peer) {
            view.synced = false;
            // Its request for a snapshot that the break lost is answered
            // at once.
            view.snapshot_allowance_at = 0;
            view.incoming = None;
        }
        self.checked();
    }
}
