//! What a node makes of its peers' heartbeats: a standby chooses whom to
//! follow and notices lost commands or handoffs; an active steps down for a
//! higher-priority active, keeps its tokens above a lower one's, and hands
//! over to a higher-priority standby that holds its state.

use baton_core::Millis;

use super::super::messages::{Heartbeat, NodeIndex, PeerRole, PriorityMessage};
use super::roles::Role;
use super::PriorityNode;

impl<H> PriorityNode<H> {
    pub(super) fn on_heartbeat(&mut self, from: NodeIndex, heartbeat: Heartbeat, now: Millis) {
        self.seen_token = self.seen_token.max(heartbeat.last_token);
        match self.role {
            Role::Standby(_) => self.standby_heard(from, &heartbeat, now),
            Role::Active => self.active_heard(from, &heartbeat, now),
            // Only the successor's `HandoffTaken` ends a handoff.
            Role::HandingOff(_) => {}
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
        if self.role.is_active() {
            self.maybe_yield(now);
        }
    }

    fn standby_heard(&mut self, from: NodeIndex, heartbeat: &Heartbeat, now: Millis) {
        let me = self.config.me;
        match heartbeat.role {
            PeerRole::Active => self.follow_if_better(from, heartbeat, now),
            PeerRole::Standby => {
                if let Some(standby) = self
                    .role
                    .standby_mut()
                    .filter(|s| s.following == Some(from))
                {
                    tracing::info!(
                        active = super::roles::addr_in(&self.config.peers, from),
                        "active stepped down"
                    );
                    standby.unfollow();
                }
            }
            PeerRole::HandingOff if heartbeat.following == Some(me) => {
                self.answer_announced_handoff(from);
            }
            PeerRole::HandingOff => {}
        }
    }

    /// `from` says it hands the role to this node. Its handoff comes before
    /// that heartbeat on the link; if it never arrived (a link that broke,
    /// or one still being dialled, dropped it), say so, and if it did but
    /// our answer was lost, say that again: without an answer it would
    /// wait out its handoff timeout.
    fn answer_announced_handoff(&mut self, from: NodeIndex) {
        let from_addr = super::roles::addr_in(&self.config.peers, from);
        if self.took_handoff_from == Some(from) {
            // We took it (and may have handed the role on since). Also
            // the usual case of the heartbeat sent right behind the
            // handoff: not worth a warning.
            tracing::debug!(from = from_addr, "handoff taken earlier; saying so again");
            self.outbox.push((from, PriorityMessage::HandoffTaken));
        } else if self.refused_from != Some(from) {
            tracing::warn!(from = from_addr, "handoff announced but not received");
            self.refused_from = Some(from);
            self.outbox.push((from, PriorityMessage::HandoffRefused));
        }
    }

    /// A standby hears an active: it follows it if it follows nobody, a
    /// lower-priority node, or one that is dead or no longer active.
    fn follow_if_better(&mut self, from: NodeIndex, heartbeat: &Heartbeat, now: Millis) {
        let Some(following) = self.role.standby().map(|s| s.following) else {
            debug_assert!(false, "follow_if_better on a {:?}", self.role.kind());
            return;
        };
        let better = match following {
            None => true,
            // A followed node that is handing off, or no longer says it
            // is active, yields to one that is.
            Some(current) => {
                from < current
                    || !self.is_live(current, now)
                    || self.peers[current]
                        .heartbeat
                        .as_ref()
                        .is_some_and(|hb| hb.role != PeerRole::Active)
            }
        };
        let (term, seq) = (self.term, self.seq);
        let Some(standby) = self.role.standby_mut() else {
            debug_assert!(false, "the standby's role changed under it");
            return;
        };
        if following != Some(from) && better {
            tracing::info!(
                active = super::roles::addr_in(&self.config.peers, from),
                "following"
            );
            standby.following = Some(from);
            standby.resync(now);
        }
        // Commands travel on the same link before the heartbeat that
        // counts them: a gap means some were lost. More than it counts
        // (its numbers went backwards) cannot come from a sound active:
        // start over from its table.
        if standby.following == Some(from)
            && standby.synced
            && (heartbeat.term != term || heartbeat.seq != seq)
        {
            standby.resync(now);
        }
    }

    fn active_heard(&mut self, from: NodeIndex, heartbeat: &Heartbeat, now: Millis) {
        if heartbeat.role != PeerRole::Active {
            // A standby may report the tokens of another active (a split
            // healing): grant above them, in our own block.
            self.raise_floor(heartbeat.last_token);
            if heartbeat.role == PeerRole::HandingOff && heartbeat.following == Some(self.config.me)
            {
                // A graceful stop at a heal hands its table to this active.
                self.answer_announced_handoff(from);
            }
            return;
        }
        if from < self.config.me {
            tracing::warn!(
                other = self.addr(from),
                "a higher-priority active; stepping down"
            );
            // Our grants go with us: the winner merges the keys it does not
            // hold itself.
            self.send_handoff(from, now);
            self.step_down(Some(from), now, "a higher-priority active serves");
        } else {
            // It steps down when it hears us; until then it may grant: stay
            // above anything it can have issued.
            let floor = self.floor_above_known(heartbeat.last_token, now);
            self.raise_floor(floor);
            let beat = self.heartbeat();
            self.outbox.push((from, PriorityMessage::Heartbeat(beat)));
        }
    }
}
