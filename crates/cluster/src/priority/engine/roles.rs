//! The node's roles, each with the state only it has, and the one door
//! every change of role goes through ([`PriorityNode::set_role`]), which
//! logs it: promotion, stepping down, handing over, a handoff taken,
//! refused or timed out.

use baton_core::{Event, Millis, NotServing, Token};

use super::super::messages::NodeIndex;
use super::{NodeRole, PriorityNode, TOKEN_MARGIN};

/// A role and what only that role has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Role {
    /// Serves clients; the per-peer replication state is in `PeerView`.
    Active,
    Standby(Standby),
    HandingOff(HandingOff),
}

/// What only a standby has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Standby {
    /// The active it replicates, if it heard one.
    pub(super) following: Option<NodeIndex>,
    /// The table is a faithful copy of the followed active's (never
    /// without one to follow).
    pub(super) synced: bool,
    /// No full-sync request before this.
    pub(super) next_sync_request: Millis,
    /// The successor that took this node's handoff, when that is how it
    /// became a standby.
    pub(super) handed_off_to: Option<NodeIndex>,
}

/// What only a node handing its role over has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct HandingOff {
    pub(super) to: NodeIndex,
    /// When the handoff was sent: it is given up a failure timeout later.
    pub(super) started: Millis,
}

impl Standby {
    /// A standby that follows `following` (unsynced: it asks for a copy
    /// from `now`).
    pub(super) fn following(following: Option<NodeIndex>, now: Millis) -> Standby {
        Standby {
            following,
            synced: false,
            next_sync_request: now,
            handed_off_to: None,
        }
    }

    /// Starts over from a full copy, asked for at once.
    pub(super) fn resync(&mut self, now: Millis) {
        self.synced = false;
        self.next_sync_request = now;
    }

    /// Follows nobody (and so holds no faithful copy of anybody).
    pub(super) fn unfollow(&mut self) {
        self.following = None;
        self.synced = false;
    }
}

impl Role {
    pub(super) fn kind(&self) -> NodeRole {
        match self {
            Role::Active => NodeRole::Active,
            Role::Standby(_) => NodeRole::Standby,
            Role::HandingOff(h) => NodeRole::HandingOff { to: h.to },
        }
    }

    pub(super) fn is_active(&self) -> bool {
        matches!(self, Role::Active)
    }

    pub(super) fn standby(&self) -> Option<&Standby> {
        match self {
            Role::Standby(standby) => Some(standby),
            _ => None,
        }
    }

    pub(super) fn standby_mut(&mut self) -> Option<&mut Standby> {
        match self {
            Role::Standby(standby) => Some(standby),
            _ => None,
        }
    }
}

impl<H> PriorityNode<H> {
    /// The one way the role changes; `why` goes to the log with the change.
    pub(super) fn set_role(&mut self, role: Role, why: &'static str) {
        let (from, to) = (self.role.kind(), role.kind());
        if from != to {
            let (node, from, to) = (
                self.addr(self.config.me),
                self.describe(&self.role),
                self.describe(&role),
            );
            tracing::info!(node, from, to, term = self.term, "{why}: {from} -> {to}");
        }
        self.role = role;
    }

    /// Node `index`'s client address, for the log.
    pub fn addr(&self, index: NodeIndex) -> &str {
        addr_in(&self.config.peers, index)
    }

    /// A role in words, naming the nodes by their addresses.
    fn describe(&self, role: &Role) -> String {
        match role {
            Role::Active => "active".into(),
            Role::HandingOff(h) => format!("handing off to {}", self.addr(h.to)),
            Role::Standby(standby) => match standby.following {
                Some(active) => format!("standby following {}", self.addr(active)),
                None => "standby".into(),
            },
        }
    }

    /// Takes the active role with a new term: a token floor above every
    /// token this node knows of, in its own blocks.
    pub(super) fn promote(&mut self, now: Millis, why: &'static str) {
        let known = self.service.table().last_token().max(self.seen_token);
        // In this node's own blocks: a token nobody else can grant.
        let floor = self.floor_above_known(known, now);
        debug_assert!(
            floor >= known.min(Token::MAX - TOKEN_MARGIN),
            "floor {floor} below {known}"
        );
        debug_assert!(
            floor == Token::MAX || self.blocks.owns(floor + 1),
            "floor {floor} is not in this node's blocks"
        );
        self.service.raise_token_floor(floor);
        self.version += 1;
        // Standbys get the floor with the snapshot they will ask for.
        self.service.drain_journal();
        self.term = floor;
        self.seq = 0;
        for peer in &mut self.peers {
            peer.synced = false;
        }
        self.set_role(Role::Active, why);
        self.beat(now);
    }

    /// Gives up the active role and follows `to`, if
    /// anyone: the waiters are sent there, the unsent commands dropped
    /// (the standbys resync from the next active).
    pub(super) fn step_down(&mut self, to: Option<NodeIndex>, now: Millis, why: &'static str) {
        self.move_waiters(to);
        self.service.drain_journal();
        self.quiet_until = now.saturating_add(self.config.failure_timeout_ms);
        self.set_role(Role::Standby(Standby::following(to, now)), why);
    }

    /// Every queued acquire is told to go to `to` (or to look for the
    /// active itself).
    pub(super) fn move_waiters(&mut self, to: Option<NodeIndex>) {
        for waiter in self.service.drain_waiters() {
            self.events.push_back(Event::Moved {
                id: waiter.id,
                handle: waiter.handle,
                key: waiter.key,
                to: NotServing::redirect(to),
            });
        }
    }
}

/// Node `index`'s address in `peers`, for the log (usable while the role
/// is borrowed).
pub(super) fn addr_in(peers: &[String], index: NodeIndex) -> &str {
    peers.get(index).map_or("?", String::as_str)
}
