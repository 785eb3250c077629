//! Time: heartbeats, failure detection, promotion of the best live node,
//! lease expiry and waits, and the pause check (a node that did not run
//! for a while may have been replaced).

use baton_core::Millis;

use super::super::messages::{NodeIndex, PeerRole, PriorityMessage};
use super::roles::{HandingOff, Role, Standby};
use super::PriorityNode;

impl<H> PriorityNode<H> {
    /// Heartbeats, failure detection, promotion, lease expiry and waits:
    /// everything due at `now`.
    pub fn handle_tick(&mut self, now: Millis) {
        self.check_pause(now);
        self.last_tick = now;
        self.drop_stale_tables(now);
        self.enforce_bar(now);
        match &self.role {
            Role::Active => {
                self.make_room(now);
                self.service.tick(now, &mut self.scratch);
                self.take_scratch();
                self.maybe_yield(now);
            }
            Role::Standby(_) => self.standby_tick(now),
            &Role::HandingOff(HandingOff { to, started }) => {
                if now.saturating_sub(started) > self.config.failure_timeout_ms {
                    self.handoff_timed_out(to, started, now);
                }
            }
        }
        if now >= self.next_heartbeat {
            self.beat(now);
        }
        self.checked();
    }

    /// No answer from the successor `to` within a failure timeout of the
    /// handoff `started`.
    fn handoff_timed_out(&mut self, to: NodeIndex, started: Millis, now: Millis) {
        let successor = super::roles::addr_in(&self.config.peers, to);
        let heard_since = self.peers[to].last_heard.is_some_and(|t| t >= started);
        if self.recently_resumed(now) || heard_since {
            // This node stalled while handing off (the others may have
            // promoted meanwhile), or the successor's link to it works and
            // its answer, "taken" perhaps, was lost: if it serves, follow
            // it.
            tracing::warn!(successor, "handoff not taken up; standing by");
            self.quiet_until = self.quiet_until.max(now);
            let standby = Standby::following(None, now);
            self.set_role(Role::Standby(standby), "handoff timed out");
        } else {
            // Nothing came back from the successor since the handoff: it
            // is out of reach, as in a split, and may never have had the
            // table. Standing by would drop this node's table (a graceful
            // stop would exit holding locks nobody else knows of); serving
            // on keeps it, and a stop offers it again.
            tracing::warn!(
                successor,
                "handoff not taken up, successor silent; serving on"
            );
            self.serve_on(to, now, "handoff timed out; serving on");
        }
    }

    pub(super) fn beat(&mut self, now: Millis) {
        self.send_heartbeats();
        self.last_beat = now;
        self.next_heartbeat = now.saturating_add(self.config.heartbeat_ms);
    }

    /// When `handle_tick` next has work.
    pub fn poll_timeout(&self) -> Millis {
        let mut next = self.next_heartbeat;
        match &self.role {
            Role::Active => {
                if let Some(at) = self.service.next_deadline() {
                    next = next.min(at);
                }
            }
            Role::Standby(standby) => match standby.following {
                Some(active) => {
                    if let Some(heard) = self.peers[active].last_heard {
                        let dead_at = heard.saturating_add(self.config.failure_timeout_ms + 1);
                        next = next.min(dead_at);
                    }
                }
                None => next = next.min(self.quiet_until),
            },
            Role::HandingOff(_) => {}
        }
        next
    }

    /// A process that did not run for a failure timeout may have been
    /// replaced: step down before granting anything more.
    pub(super) fn check_pause(&mut self, now: Millis) {
        // An active that sent no heartbeat for a failure timeout may have
        // been replaced. A node that is not active ticks at least every
        // heartbeat: a longer gap already leaves it with a stale view of
        // its peers.
        let active = self.role.is_active();
        let (gap, stalled) = if active {
            let gap = now.saturating_sub(self.last_beat.max(self.last_tick));
            (gap, gap > self.config.failure_timeout_ms)
        } else {
            let gap = now.saturating_sub(self.last_tick);
            (gap, gap > 2 * self.config.heartbeat_ms)
        };
        if !stalled {
            return;
        }
        self.resumed_at = Some(now);
        if active {
            tracing::warn!(
                gap_ms = gap,
                "did not run for a failure timeout; stepping down"
            );
            self.step_down(None, now, "stalled");
        } else {
            // Every peer looks dead because their heartbeats of the pause
            // are still unread: listen again before promoting.
            self.quiet_until = self
                .quiet_until
                .max(now.saturating_add(self.config.failure_timeout_ms));
        }
    }

    fn standby_tick(&mut self, now: Millis) {
        let following = self.following();
        if let Some(active) = following.filter(|&a| !self.is_live(a, now)) {
            tracing::info!(active = self.addr(active), "active is silent");
            if let Some(standby) = self.role.standby_mut() {
                standby.unfollow();
            }
        }
        let interval = 2 * self.config.heartbeat_ms;
        let Some(standby) = self.role.standby_mut() else {
            debug_assert!(false, "standby_tick on a {:?}", self.role.kind());
            return;
        };
        match standby.following {
            Some(active) => {
                if !standby.synced && now >= standby.next_sync_request {
                    standby.next_sync_request = now.saturating_add(interval);
                    self.outbox.push((active, PriorityMessage::SyncRequest));
                }
            }
            None => {
                if now >= self.quiet_until
                    && self.is_best_candidate(now)
                    && self.barred(now).is_none()
                {
                    self.promote(now, "no live active; the best candidate promotes");
                }
            }
        }
    }

    /// With no active around: am I the live node with the newest state,
    /// the highest priority among equals?
    fn is_best_candidate(&self, now: Millis) -> bool {
        let me = self.config.me;
        let mut best = (self.term, std::cmp::Reverse(me));
        for p in self.others() {
            if !self.is_live(p, now) {
                continue;
            }
            let Some(hb) = &self.peers[p].heartbeat else {
                continue;
            };
            if hb.role != PeerRole::Standby {
                // Someone already serves or is handing over: wait for it.
                return false;
            }
            best = best.max((hb.term, std::cmp::Reverse(p)));
        }
        best.1 .0 == me
    }
}
