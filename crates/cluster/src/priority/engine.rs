//! The priority-failover engine: a pure state machine over the lock service.
//!
//! One shape, as in quinn-proto or openraft's engine: every input is a
//! `handle_*` call that takes the time (`handle_acquire`, `handle_release`,
//! `handle_renew`, `handle_cancel`, `handle_tick`, `handle_message`,
//! `handle_link_down`, `handle_link_refused`, `handle_nobody_listening`,
//! `handle_begin_handoff`);
//! every output is polled
//! (`poll_event` for waiters' [`Event`]s, `poll_transmits` for the peers'
//! messages, `poll_timeout` for when `handle_tick` next has work). No I/O,
//! no clock: the async shell, the unit tests and the simulation drive it
//! the same way (`super::driver`). After every input a debug build checks
//! the node's invariants ([`PriorityNode::validate`]).
//!
//! The sections live in submodules: client requests (`client`), time and
//! failure detection (`time`), roles, promotion and step-down (`roles`),
//! handoffs (`handoff`), token floors (`floors`), peers' messages
//! (`inbound`, `heartbeats`), peers that answer but refuse the link
//! (`refused`), what goes out (`output`), persistence (`persist`) and the
//! invariants (`validate`).
//!
//! The rules (heartbeats and failure detection, who follows and who
//! promotes, step-down and handoff, token floors and blocks, the bounds on
//! what even authenticated peers may send) are told in docs/cluster.md,
//! "What happens when" and "Why tokens keep rising, and never repeat".

mod client;
mod floors;
mod handoff;
mod heartbeats;
mod inbound;
mod output;
mod persist;
mod pieces;
mod reassembly;
mod refused;
mod roles;
mod sanity;
mod time;
mod validate;

use std::collections::VecDeque;

use baton_core::{Event, LockService, LockTable, LogGate, Millis, Quota, TableSnapshot, Token};

use super::messages::{Heartbeat, NodeIndex, PeerRole, PriorityMessage, Term, MAX_MESSAGE_BYTES};
use super::token_floor::TokenBlocks;
use reassembly::Incoming;
use roles::{Role, Standby};

pub use refused::{Barred, LinkRefused, REFUSAL_HOLD_MIN_MS};
pub use sanity::{Implausible, CLOCK_ALLOWANCE_MS, REFUSAL_LOG_EVERY_MS};
pub use validate::Broken;

/// The margin above known tokens and the wall-clock floor: one definition
/// for every mode (baton-server's `token_floor`).
pub use baton_server::token_floor::{wall_floor, TOKEN_MARGIN};

/// What a priority node keeps in `--data-dir` to survive a restart of
/// the whole cluster.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PersistedState {
    pub term: Term,
    pub seen_token: Token,
    pub table: TableSnapshot,
}

/// A [`PersistedState`] as nodes before protocol 1.2 wrote it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LegacyPersistedState {
    pub term: Term,
    pub seen_token: Token,
    pub table: baton_core::LegacyTableSnapshot,
}

impl From<LegacyPersistedState> for PersistedState {
    fn from(old: LegacyPersistedState) -> PersistedState {
        PersistedState {
            term: old.term,
            seen_token: old.seen_token,
            table: old.table.into(),
        }
    }
}

impl baton_server::StateFormat for PersistedState {
    type Legacy = LegacyPersistedState;
}

/// How a priority node is set up.
#[derive(Debug, Clone)]
pub struct PriorityConfig {
    /// This node's index in `peers`.
    pub me: NodeIndex,
    /// Every node's client address, in priority order.
    pub peers: Vec<String>,
    pub heartbeat_ms: u64,
    pub failure_timeout_ms: u64,
    /// Wall-clock time (ms since the Unix epoch) when `now` was 0.
    pub wall_at_zero: u64,
}

/// Which role a node has, as seen from outside (the state that goes with
/// each role stays inside the engine).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeRole {
    Active,
    Standby,
    HandingOff { to: NodeIndex },
}

/// Graceful handoffs, counted for the operator.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HandoffCounts {
    /// Handoffs of this node's active role that a successor took up.
    pub given: u64,
    /// Handoffs this node took (a table merged into an active one too).
    pub taken: u64,
}

#[derive(Debug, Clone, Default)]
struct PeerView {
    /// When a message of it, or bytes of one still on their way, last
    /// came in.
    last_heard: Option<Millis>,
    /// Its last message was refused: bytes of its link are then no sign
    /// of life (see `handle_link_progress`).
    refusing: bool,
    heartbeat: Option<Heartbeat>,
    /// (Active's view) it has our snapshot of this term and gets our commands.
    synced: bool,
    /// No handoff is offered to it before this: it refused one.
    refused_handoff_until: Millis,
    /// (Active's view) when its snapshot allowance is back to empty: each
    /// snapshot sent moves this a snapshot interval on (see
    /// `on_sync_request`).
    snapshot_allowance_at: Millis,
    /// A table it is sending in pieces, not complete yet.
    incoming: Option<Incoming>,
    /// Its messages refused since the last log line about them, and in all.
    refused: u64,
    refused_total: u64,
    refusal_log: LogGate<Millis>,
    /// Log lines about its refused messages (the tests count them).
    refusal_lines: u64,
    /// Its last refusal of this node's link, if any (`refused`).
    link_refused: Option<refused::Refusal>,
}

#[derive(Debug)]
pub struct PriorityNode<H> {
    config: PriorityConfig,
    /// The tokens this node may grant.
    blocks: TokenBlocks,
    /// The role, with what only that role has; changed only by `set_role`.
    role: Role,
    service: LockService<H>,
    term: Term,
    seq: u64,
    /// The highest token heard of in peers' heartbeats or held in a table
    /// this node gave up for a snapshot: an active it never synced with
    /// (one that took over and died quickly, the loser of a dual-active
    /// episode) may have granted above everything in its table.
    seen_token: Token,
    /// Bumped whenever the table may have changed, so a persister knows
    /// when to write it again.
    version: u64,
    peers: Vec<PeerView>,
    /// No promotion before this (start-up, after stepping down, after a
    /// pause in any role).
    quiet_until: Millis,
    last_tick: Millis,
    /// When this node last queued heartbeats for its peers: an active that
    /// has not for a failure timeout may have been replaced.
    last_beat: Millis,
    /// When this node last found it had stalled (see `check_pause`).
    resumed_at: Option<Millis>,
    /// The node whose handoff this one refused last, until it serves again.
    refused_from: Option<NodeIndex>,
    /// The node whose handoff this one took, until it says it no longer
    /// hands off: if our `HandoffTaken` was lost, its next heartbeat still
    /// announces the handoff, and it must hear "taken" again, never
    /// "refused" (it would serve on beside the node that took its table).
    took_handoff_from: Option<NodeIndex>,
    /// Graceful handoffs this node gave (taken up by a successor) and
    /// took, since it started (`baton_handoffs` in /metrics).
    handoffs: HandoffCounts,
    next_heartbeat: Millis,
    outbox: Vec<(NodeIndex, PriorityMessage)>,
    /// Waiters' events, oldest first, for `poll_event`.
    events: VecDeque<Event<H>>,
    /// The lock service writes its events here first.
    scratch: Vec<Event<H>>,
    /// The largest message this node sends ([`MAX_MESSAGE_BYTES`] unless a
    /// test sets less).
    message_limit: usize,
    /// The number of the next table this node sends in pieces.
    next_table: u64,
    /// When this node last logged why it may not serve (`refused`).
    barred_log: LogGate<Millis>,
}

impl<H> PriorityNode<H> {
    pub fn new(config: PriorityConfig, now: Millis) -> PriorityNode<H> {
        let mut service = LockService::new();
        service.enable_journal();
        service.track_changes();
        let peers = vec![PeerView::default(); config.peers.len()];
        let quiet_until = now.saturating_add(config.failure_timeout_ms);
        // Table numbers of one process never meet those of an earlier one
        // (the clock has moved on by then, and numbers rise by one a table).
        let next_table = wall_floor(config.wall_at_zero.saturating_add(now));
        let node = PriorityNode {
            blocks: TokenBlocks::new(config.me, config.peers.len()),
            config,
            role: Role::Standby(Standby::following(None, now)),
            service,
            term: 0,
            seq: 0,
            seen_token: 0,
            version: 0,
            peers,
            quiet_until,
            last_tick: now,
            last_beat: now,
            resumed_at: None,
            refused_from: None,
            took_handoff_from: None,
            handoffs: HandoffCounts::default(),
            next_heartbeat: now,
            outbox: Vec::new(),
            events: VecDeque::new(),
            scratch: Vec::new(),
            message_limit: MAX_MESSAGE_BYTES,
            next_table,
            barred_log: LogGate::default(),
        };
        node.checked();
        node
    }

    /// Makes every message this node sends at most `bytes` long (at most
    /// [`MAX_MESSAGE_BYTES`]), so that tests and simulations can send
    /// tables and command batches in many pieces. A piece always carries
    /// one item, even one larger than this.
    pub fn set_message_limit(&mut self, bytes: usize) {
        self.message_limit = bytes.min(MAX_MESSAGE_BYTES);
    }

    /// The caps on grants and waiters while this node is active.
    pub fn set_quota(&mut self, quota: Quota) {
        self.service.set_quota(quota);
    }

    pub fn config(&self) -> &PriorityConfig {
        &self.config
    }

    pub fn role(&self) -> NodeRole {
        self.role.kind()
    }

    /// The active this standby follows (none for other roles).
    pub fn following(&self) -> Option<NodeIndex> {
        self.role.standby().and_then(|s| s.following)
    }

    pub fn table(&self) -> &LockTable {
        self.service.table()
    }

    pub fn waiter_count(&self) -> usize {
        self.service.waiter_count()
    }

    /// Grants whose lease ran out here while this node was the active
    /// (a standby's table changes by replication), since it started.
    pub fn expiries(&self) -> u64 {
        self.service.expiries()
    }

    pub fn term(&self) -> Term {
        self.term
    }

    /// Where a client of this node should go instead, if anywhere. Never
    /// to a node that may send the client back: a node handing off sends
    /// clients nowhere (`-`: no active until the successor takes over); a
    /// standby sends them only to the node it follows, while that node says
    /// it serves or hands off, and not after refusing its handoff.
    pub fn redirect_target(&self) -> Option<NodeIndex> {
        // Active: it serves. Handing off: nobody serves until the successor
        // has the handoff, and until then the successor sends clients here.
        let standby = self.role.standby()?;
        standby.following.filter(|&f| {
            self.peers[f]
                .heartbeat
                .as_ref()
                .is_some_and(|hb| match hb.role {
                    PeerRole::Active => true,
                    PeerRole::HandingOff => self.refused_from != Some(f),
                    PeerRole::Standby => false,
                })
        })
    }

    /// The graceful handoffs given and taken since the node started.
    pub fn handoffs(&self) -> HandoffCounts {
        self.handoffs
    }

    /// Set once a handoff this node started has been taken up (until it
    /// serves again).
    pub fn handed_off_to(&self) -> Option<NodeIndex> {
        self.role.standby().and_then(|s| s.handed_off_to)
    }

    /// The next waiter event, oldest first.
    pub fn poll_event(&mut self) -> Option<Event<H>> {
        self.events.pop_front()
    }

    fn wall(&self, now: Millis) -> u64 {
        self.config.wall_at_zero.saturating_add(now)
    }

    /// Within a failure timeout of finding it had stalled.
    fn recently_resumed(&self, now: Millis) -> bool {
        self.resumed_at
            .is_some_and(|at| now.saturating_sub(at) <= self.config.failure_timeout_ms)
    }

    fn is_live(&self, peer: NodeIndex, now: Millis) -> bool {
        self.peers[peer]
            .last_heard
            .is_some_and(|t| now.saturating_sub(t) <= self.config.failure_timeout_ms)
    }

    fn others(&self) -> impl Iterator<Item = NodeIndex> + '_ {
        (0..self.peers.len()).filter(move |&p| p != self.config.me)
    }

    /// Moves what the lock service reported into the event queue.
    fn take_scratch(&mut self) {
        self.events.extend(self.scratch.drain(..));
    }
}
