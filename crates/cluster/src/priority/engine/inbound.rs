//! What a node does with its peers' messages: each is checked against the
//! sanity bounds first (`sanity`), tables are put together from their
//! pieces (`reassembly`), and full-sync requests are answered at most once
//! per peer per interval.

use baton_core::{Command, Event, LockTable, Millis};

use super::super::messages::{
    Heartbeat, NodeIndex, PeerRole, PriorityMessage, TablePart, Term, MAX_TABLE_LOCKS,
};
use super::reassembly::{assemble, Assembled, TableKind};
use super::{NodeRole, PriorityNode, TOKEN_MARGIN};

/// Snapshots an active sends one peer back to back before the snapshot
/// interval holds it to one per interval.
pub const SNAPSHOT_BURST: u64 = 2;

impl<H> PriorityNode<H> {
    pub fn on_message(
        &mut self,
        from: NodeIndex,
        message: PriorityMessage,
        now: Millis,
        events: &mut Vec<Event<H>>,
    ) {
        if from >= self.peers.len() || from == self.config.me {
            return;
        }
        if let Err(why) = self.check_message(from, &message, now) {
            // Nothing of it is taken, not even as a sign of life.
            self.note_refusal(from, &why, now);
            return;
        }
        // Messages that waited out a pause come before the first tick.
        self.check_pause(now, events);
        self.peers[from].last_heard = Some(now);
        match message {
            PriorityMessage::Heartbeat(heartbeat) => {
                self.on_heartbeat(from, heartbeat, now, events)
            }
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
        if self.role != NodeRole::Active {
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
        if self.role != NodeRole::Standby || self.following != Some(from) {
            self.drop_incoming_snapshot(from);
            return;
        }
        // The rest is on its way: asking again now would start a new copy
        // over this one, and a table that takes longer to cross than the
        // interval would never arrive whole.
        let again = now.saturating_add(2 * self.config.heartbeat_ms);
        self.next_sync_request = self.next_sync_request.max(again);
        let kind = TableKind::Snapshot { term, seq };
        let table = match assemble(&mut self.peers[from].incoming, kind, part, now) {
            Assembled::Partial => return,
            Assembled::Complete(table) => table,
            Assembled::Gap => {
                // A piece lost with a broken link: ask again.
                tracing::debug!(active = from, "snapshot incomplete; asking again");
                self.next_sync_request = now;
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
        self.synced = true;
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
        let standby = self.role == NodeRole::Standby;
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
        commands: &[Command],
        now: Millis,
    ) {
        if self.role != NodeRole::Standby || self.following != Some(from) || !self.synced {
            return;
        }
        debug_assert!(self.following != Some(self.config.me));
        if term != self.term || first_seq > self.seq {
            // Something was lost in between: start over from a full copy.
            self.synced = false;
            self.next_sync_request = now;
            return;
        }
        // A batch from before our copy (its first commands already in it)
        // applies only what it adds.
        let already = usize::try_from(self.seq - first_seq).unwrap_or(usize::MAX);
        for command in commands.iter().skip(already) {
            self.service.apply_replicated(command, now);
            self.version += 1;
            self.seq += 1;
        }
    }

    pub(super) fn on_heartbeat(
        &mut self,
        from: NodeIndex,
        heartbeat: Heartbeat,
        now: Millis,
        events: &mut Vec<Event<H>>,
    ) {
        let me = self.config.me;
        self.seen_token = self.seen_token.max(heartbeat.last_token);
        match self.role {
            NodeRole::Standby => {
                if heartbeat.role == PeerRole::Active {
                    let better = match self.following {
                        None => true,
                        // A followed node that is handing off, or no longer
                        // says it is active, yields to one that is.
                        Some(current) => {
                            from < current
                                || !self.is_live(current, now)
                                || self.peers[current]
                                    .heartbeat
                                    .as_ref()
                                    .is_some_and(|hb| hb.role != PeerRole::Active)
                        }
                    };
                    if self.following != Some(from) && better {
                        tracing::info!(active = from, "following");
                        self.following = Some(from);
                        self.synced = false;
                        self.next_sync_request = now;
                    }
                    // Commands travel on the same link before the heartbeat
                    // that counts them: a gap means some were lost. More
                    // than it counts (its numbers went backwards) cannot
                    // come from a sound active: start over from its table.
                    if self.following == Some(from)
                        && self.synced
                        && (heartbeat.term != self.term || heartbeat.seq != self.seq)
                    {
                        self.synced = false;
                        self.next_sync_request = now;
                    }
                } else if self.following == Some(from) && heartbeat.role == PeerRole::Standby {
                    tracing::info!(active = from, "active stepped down");
                    self.following = None;
                } else if heartbeat.role == PeerRole::HandingOff
                    && heartbeat.following == Some(me)
                    && self.took_handoff_from == Some(from)
                {
                    // We took it (and may have handed the role on since):
                    // our answer was lost. Say it again.
                    tracing::warn!(from, "handoff taken earlier; saying so again");
                    self.outbox.push((from, PriorityMessage::HandoffTaken));
                } else if heartbeat.role == PeerRole::HandingOff
                    && heartbeat.following == Some(me)
                    && self.refused_from != Some(from)
                {
                    // It hands the role to us, but its handoff, which comes
                    // before this heartbeat on the link, never arrived (a
                    // broken link dropped it): tell it we did not take it.
                    tracing::warn!(from, "handoff announced but not received");
                    self.refused_from = Some(from);
                    self.outbox.push((from, PriorityMessage::HandoffRefused));
                }
            }
            NodeRole::Active => {
                if heartbeat.role == PeerRole::Active {
                    if from < me {
                        tracing::warn!(other = from, "a higher-priority active; stepping down");
                        // Our grants go with us: the winner merges the
                        // keys it does not hold itself.
                        self.send_handoff(from, now);
                        self.step_down(Some(from), now, events);
                    } else {
                        // It steps down when it hears us; until then it may
                        // grant: stay above anything it can have issued.
                        let floor = self
                            .blocks
                            .floor_at_or_above(heartbeat.last_token.saturating_add(TOKEN_MARGIN))
                            .max(self.own_wall_floor(now));
                        self.raise_floor(floor);
                        let beat = self.heartbeat();
                        self.outbox.push((from, PriorityMessage::Heartbeat(beat)));
                    }
                } else {
                    // A standby may report the tokens of another active (a
                    // split healing): grant above them, in our own block.
                    self.raise_floor(heartbeat.last_token);
                }
            }
            // Only the successor's `HandoffTaken` ends a handoff.
            NodeRole::HandingOff { .. } => {}
        }
        if heartbeat.role != PeerRole::HandingOff {
            if self.refused_from == Some(from) {
                self.refused_from = None;
            }
            if self.took_handoff_from == Some(from) {
                self.took_handoff_from = None;
            }
        }
        self.peers[from].heartbeat = Some(heartbeat);
        if self.role == NodeRole::Active {
            self.maybe_yield(now, events);
        }
    }

    /// A link to `peer` broke: what was sent on it may be lost, and what
    /// was coming from it may never be complete.
    pub fn on_link_down(&mut self, peer: NodeIndex) {
        if let Some(view) = self.peers.get_mut(peer) {
            view.synced = false;
            // Its request for a snapshot that the break lost is answered
            // at once.
            view.snapshot_allowance_at = 0;
            view.incoming = None;
        }
    }
}
