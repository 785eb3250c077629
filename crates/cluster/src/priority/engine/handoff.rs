//! Handing the active role over: to a higher-priority node that came back,
//! or at a graceful stop to any node that can be reached, an active one
//! included (it merges the table it is given).
//!
//! The successor answers every handoff: `HandoffTaken` once it serves the
//! table, `HandoffRefused` if it cannot take it (it just resumed from a
//! pause). Only `HandoffTaken` lets the sender stand down for good: a
//! successor that was already active heartbeats "active" before and after
//! the handoff, so its heartbeats prove nothing. Without an answer within
//! a failure timeout the sender stands by, or serves on if the successor
//! has been silent since (see `handoff_timed_out`).

use baton_core::{LockTable, Millis, TableSnapshot, Token};

use super::super::messages::{NodeIndex, PeerRole, PriorityMessage};
use super::super::token_floor::BLOCK;
use super::roles::{HandingOff, Role, Standby};
use baton_server::token_floor::restart_floor;

use super::PriorityNode;

impl<H> PriorityNode<H> {
    /// An active hands over to a higher-priority standby that holds its
    /// state (a node that came back).
    pub(super) fn maybe_yield(&mut self, now: Millis) {
        let me = self.config.me;
        let successor = (0..me).find(|&p| {
            self.is_live(p, now)
                && self.peers[p].synced
                && now >= self.peers[p].refused_handoff_until
                && self.peers[p].heartbeat.as_ref().is_some_and(|hb| {
                    hb.role == PeerRole::Standby && hb.following == Some(me) && hb.term == self.term
                })
        });
        if let Some(successor) = successor {
            self.hand_over(successor, now, "a higher-priority node is ready");
        }
    }

    /// Graceful stop: hands the active role to a live peer. Best the first
    /// standby in priority order that follows this node or nobody yet (the
    /// handoff carries the whole table, and a standby that joined a moment
    /// ago may not have said whom it follows: passing it over would make
    /// the successor hand the role straight back to it), then an active
    /// one (after a heal two may serve: it merges the table, so no lock is
    /// lost), then any live standby. False if this node is not active or
    /// no peer can take the role (none live, or each refused just now).
    pub fn handle_begin_handoff(&mut self, now: Millis) -> bool {
        let successor = self.successor(now);
        if let Some(successor) = successor {
            self.hand_over(successor, now, "graceful stop");
        }
        self.checked();
        successor.is_some()
    }

    /// The peer a graceful stop would hand the role to now (see
    /// [`Self::handle_begin_handoff`]); none if this node is not active.
    pub fn successor(&self, now: Millis) -> Option<NodeIndex> {
        if !self.role.is_active() {
            return None;
        }
        let me = self.config.me;
        let ready =
            |node: &Self, p: NodeIndex, want: &dyn Fn(PeerRole, Option<NodeIndex>) -> bool| {
                node.is_live(p, now)
                    && now >= node.peers[p].refused_handoff_until
                    && node.peers[p]
                        .heartbeat
                        .as_ref()
                        .is_some_and(|hb| want(hb.role, hb.following))
            };
        let following_me = |role, following: Option<NodeIndex>| {
            role == PeerRole::Standby && following.is_none_or(|f| f == me)
        };
        let active = |role, _| role == PeerRole::Active;
        let standby = |role, _| role == PeerRole::Standby;
        self.others()
            .find(|&p| ready(self, p, &following_me))
            .or_else(|| self.others().find(|&p| ready(self, p, &active)))
            .or_else(|| self.others().find(|&p| ready(self, p, &standby)))
    }

    /// Whether any peer has been heard within a failure timeout: a stop
    /// that found no successor yet may find one soon.
    pub fn has_live_peer(&self, now: Millis) -> bool {
        self.others().any(|p| self.is_live(p, now))
    }

    fn hand_over(&mut self, to: NodeIndex, now: Millis, why: &'static str) {
        self.flush_journal();
        // The successor may take the role, grant and die before anyone
        // hears its floor; if this node serves again it must start above
        // whatever floor the successor can have taken from this table.
        self.seen_token = self.seen_token.max(self.successor_floor_bound(now));
        self.send_handoff(to, now);
        self.move_waiters(Some(to));
        let handing = HandingOff { to, started: now };
        self.set_role(Role::HandingOff(handing), why);
        // Right behind the handoff, on the same links: the peers stop
        // sending clients here, and a successor that lost the handoff (a
        // broken link) says so at once.
        self.beat(now);
    }

    /// Above any floor a successor can take from this node's table until
    /// the handoff times out: its margin over what it knows, or its wall
    /// floor, rounded into its blocks.
    fn successor_floor_bound(&self, now: Millis) -> Token {
        let known = self.service.table().last_token().max(self.seen_token);
        let later = now.saturating_add(self.config.failure_timeout_ms);
        let nodes = self.peers.len() as u64 + 1;
        restart_floor(self.wall(later), Some(known)).saturating_add(nodes.saturating_mul(BLOCK))
    }

    pub(super) fn on_handoff(&mut self, from: NodeIndex, table: &TableSnapshot, now: Millis) {
        // Whatever becomes of it, the sender no longer serves: a client
        // sent there comes back here, so this node must not send it there.
        if let Some(hb) = self.peers[from].heartbeat.as_mut() {
            hb.role = PeerRole::HandingOff;
        }
        let refuse = match self.role {
            Role::HandingOff(_) => {
                tracing::warn!(
                    from = super::roles::addr_in(&self.config.peers, from),
                    "handoff offered while handing off; refused"
                );
                true
            }
            _ if self.recently_resumed(now) => {
                // It may have waited out our pause, and its sender may have
                // given up and promoted again since: taking it would serve a
                // stale table. The sender serves on.
                tracing::warn!(
                    from = super::roles::addr_in(&self.config.peers, from),
                    "handoff received around a pause; refused"
                );
                true
            }
            _ => false,
        };
        if refuse {
            self.refused_from = Some(from);
            self.outbox.push((from, PriorityMessage::HandoffRefused));
            return;
        }
        // Tokens this node issued or heard of stay known after it takes
        // another's table.
        self.seen_token = self.seen_token.max(self.service.table().last_token());
        self.seen_token = self.seen_token.max(table.last_token);
        let why = if self.role.is_active() {
            tracing::info!(
                from = self.addr(from),
                "merging the table of an active that stops"
            );
            let merged = merge(self.service.table().snapshot(now), table);
            self.service.replace_table(LockTable::restore(&merged, now));
            "merged a handoff"
        } else {
            tracing::info!(from = self.addr(from), "taking over by handoff");
            self.service.replace_table(LockTable::restore(table, now));
            "took a handoff"
        };
        // A new term either way: the standbys resync with the whole table.
        self.promote(now, why);
        self.handoffs.taken += 1;
        self.took_handoff_from = Some(from);
        self.outbox.push((from, PriorityMessage::HandoffTaken));
    }

    /// The successor's answer to this node's handoff.
    pub(super) fn on_handoff_answer(&mut self, from: NodeIndex, taken: bool, now: Millis) {
        // A late or stray answer (the handoff timed out, or went to
        // another): nothing of ours waits for it.
        let Role::HandingOff(HandingOff { to, .. }) = self.role else {
            return;
        };
        if from != to {
            return;
        }
        if taken {
            let mut standby = Standby::following(Some(to), now);
            standby.handed_off_to = Some(to);
            self.handoffs.given += 1;
            self.set_role(Role::Standby(standby), "handoff taken up");
        } else {
            // Nobody took the role: this node still holds the newest state
            // and nobody promoted while it said it was handing off.
            tracing::info!(
                successor = super::roles::addr_in(&self.config.peers, to),
                "handoff refused; serving on"
            );
            self.serve_on(to, now, "handoff refused; serving on");
        }
    }

    /// A handoff to `to` ended without `HandoffTaken`: this node serves
    /// again, and offers `to` nothing more for a failure timeout.
    pub(super) fn serve_on(&mut self, to: NodeIndex, now: Millis, why: &'static str) {
        self.peers[to].refused_handoff_until = now.saturating_add(self.config.failure_timeout_ms);
        // The successor may still have taken the table and granted (its
        // "taken" lost, then the role handed on): serve above any floor it
        // can have used, never from the old last token. If it serves, the
        // two actives meet as after a split: the lower-priority one hands
        // its table to the other, which merges it.
        self.set_role(Role::Active, why);
        self.raise_floor(self.seen_token);
        self.version += 1;
        self.beat(now);
    }
}

/// `ours` with every lock of `theirs` on a key `ours` leaves free. A key
/// both hold was granted twice during a split; the receiving active keeps
/// its own grant, the one its clients have been fenced with.
fn merge(mut ours: TableSnapshot, theirs: &TableSnapshot) -> TableSnapshot {
    let held: std::collections::HashSet<_> = ours.locks.iter().map(|l| l.key.clone()).collect();
    ours.locks.extend(
        theirs
            .locks
            .iter()
            .filter(|l| !held.contains(&l.key))
            .cloned(),
    );
    ours.last_token = ours.last_token.max(theirs.last_token);
    ours
}
