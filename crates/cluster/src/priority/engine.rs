//! The priority-failover engine: a pure state machine over the lock service.
//!
//! Peer messages, client requests and ticks come in with the time; peer
//! messages (in the outbox) and waiter events come out. No I/O, no clock:
//! the async shell and the simulations drive it the same way.
//!
//! The rules, in short (docs/cluster.md has the long form):
//! - every node sends a heartbeat to every peer each `heartbeat_ms`; a peer
//!   not heard for `failure_timeout_ms` is dead;
//! - a standby follows the highest-priority active it hears, asks it for a
//!   full copy, then applies its commands in order;
//! - with no live active, the best live node promotes itself: the one whose
//!   state is of the newest term, the highest priority among those;
//! - an active that hears a higher-priority active steps down, sends it its
//!   table (the winner keeps the grants of keys it does not hold) and
//!   adopts its state; one that hears a higher-priority standby holding its state
//!   hands the role over (final table, then "you are active");
//! - an active that finds it did not run for a failure timeout (a paused
//!   process) steps down before serving anything: a peer may have promoted;
//! - a promoting node takes a token floor above every token it has seen
//!   plus a margin, and above the wall clock shifted left 20 bits, so tokens
//!   keep rising across failovers, lost replication and full restarts;
//! - every node grants only from its own blocks of tokens (`token_floor`),
//!   so no two nodes ever grant the same token, whatever they believe.
//! - even authenticated peers are bounded: a message with a token or term
//!   beyond what the cluster can have reached, or naming a node that is
//!   not a peer, is refused whole (`sanity`); tables and command batches
//!   travel in pieces within `MAX_MESSAGE_BYTES` (`pieces`, `reassembly`),
//!   a handoff taken only whole; an active answers one peer's full-sync
//!   requests at most at the snapshot rate (`inbound`).

mod handoff;
mod inbound;
mod output;
mod pieces;
mod reassembly;
mod sanity;

use baton_core::{
    AcquireOutcome, Event, Key, LockService, LockTable, Millis, NotServing, Outcome, TableSnapshot,
    Token, WaiterId,
};

use super::messages::{
    Heartbeat, NodeIndex, PeerRole, PriorityMessage, Term, MAX_MESSAGE_BYTES, MAX_TABLE_LOCKS,
};
use super::token_floor::{TokenBlocks, BLOCK, MAX_WAITERS};
use reassembly::Incoming;

pub use sanity::{Implausible, CLOCK_ALLOWANCE_MS, REFUSAL_LOG_EVERY_MS};

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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeRole {
    Active,
    Standby,
    HandingOff { to: NodeIndex },
}

#[derive(Debug, Clone, Default)]
struct PeerView {
    last_heard: Option<Millis>,
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
    refusal_logged_at: Option<Millis>,
    /// Log lines about its refused messages (the tests count them).
    refusal_lines: u64,
}

#[derive(Debug)]
pub struct PriorityNode<H> {
    config: PriorityConfig,
    /// The tokens this node may grant.
    blocks: TokenBlocks,
    role: NodeRole,
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
    /// (Standby) the table is a faithful copy of the followed active's.
    synced: bool,
    following: Option<NodeIndex>,
    peers: Vec<PeerView>,
    /// No promotion before this (start-up, after stepping down).
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
    next_heartbeat: Millis,
    next_sync_request: Millis,
    handoff_started: Millis,
    handed_off_to: Option<NodeIndex>,
    outbox: Vec<(NodeIndex, PriorityMessage)>,
    /// The largest message this node sends ([`MAX_MESSAGE_BYTES`] unless a
    /// test sets less).
    message_limit: usize,
    /// The number of the next table this node sends in pieces.
    next_table: u64,
    scratch: Vec<Event<H>>,
}

impl<H> PriorityNode<H> {
    pub fn new(config: PriorityConfig, now: Millis) -> PriorityNode<H> {
        let mut service = LockService::new();
        service.enable_journal();
        let peers = vec![PeerView::default(); config.peers.len()];
        let quiet_until = now.saturating_add(config.failure_timeout_ms);
        // Table numbers of one process never meet those of an earlier one
        // (the clock has moved on by then, and numbers rise by one a table).
        let next_table = config
            .wall_at_zero
            .saturating_add(now)
            .saturating_mul(1 << 20);
        PriorityNode {
            blocks: TokenBlocks::new(config.me, config.peers.len()),
            config,
            role: NodeRole::Standby,
            service,
            term: 0,
            seq: 0,
            seen_token: 0,
            version: 0,
            synced: false,
            following: None,
            peers,
            quiet_until,
            last_tick: now,
            last_beat: now,
            resumed_at: None,
            refused_from: None,
            took_handoff_from: None,
            next_heartbeat: now,
            next_sync_request: now,
            handoff_started: now,
            handed_off_to: None,
            outbox: Vec::new(),
            message_limit: MAX_MESSAGE_BYTES,
            next_table,
            scratch: Vec::new(),
        }
    }

    /// Makes every message this node sends at most `bytes` long (at most
    /// [`MAX_MESSAGE_BYTES`]), so that tests and simulations can send
    /// tables and command batches in many pieces. A piece always carries
    /// one item, even one larger than this.
    pub fn set_message_limit(&mut self, bytes: usize) {
        self.message_limit = bytes.min(MAX_MESSAGE_BYTES);
    }

    pub fn config(&self) -> &PriorityConfig {
        &self.config
    }

    pub fn role(&self) -> NodeRole {
        self.role
    }

    pub fn following(&self) -> Option<NodeIndex> {
        self.following
    }

    pub fn table(&self) -> &LockTable {
        self.service.table()
    }

    pub fn waiter_count(&self) -> usize {
        self.service.waiter_count()
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
        match self.role {
            NodeRole::Active => None,
            NodeRole::Standby => self.following.filter(|&f| {
                self.peers[f]
                    .heartbeat
                    .as_ref()
                    .is_some_and(|hb| match hb.role {
                        PeerRole::Active => true,
                        PeerRole::HandingOff => self.refused_from != Some(f),
                        PeerRole::Standby => false,
                    })
            }),
            // Nobody serves until the successor has the handoff, and until
            // then the successor sends clients here: no redirect either way.
            NodeRole::HandingOff { .. } => None,
        }
    }

    /// Set once a handoff this node started has been taken up.
    pub fn handed_off_to(&self) -> Option<NodeIndex> {
        self.handed_off_to
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

    fn drain_scratch(&mut self, events: &mut Vec<Event<H>>) {
        events.append(&mut self.scratch);
    }

    // ---- client requests -------------------------------------------------

    fn serving(&mut self, now: Millis, events: &mut Vec<Event<H>>) -> Result<(), NotServing> {
        self.check_pause(now, events);
        if self.role == NodeRole::Active && now >= self.next_heartbeat {
            // The timer runs late on a node busy with clients; its requests
            // still keep the heartbeats going, so the node does not step
            // down for a stall of its own making.
            self.beat(now);
        }
        match self.role {
            NodeRole::Active => {
                self.make_room(now);
                Ok(())
            }
            NodeRole::Standby | NodeRole::HandingOff { .. } => {
                Err(NotServing::redirect(self.redirect_target()))
            }
        }
    }

    pub fn acquire(
        &mut self,
        key: Key,
        wait_ms: u64,
        lease_ms: u64,
        now: Millis,
        handle: H,
        events: &mut Vec<Event<H>>,
    ) -> Result<AcquireOutcome, NotServing> {
        self.serving(now, events)?;
        if self.service.waiter_count() >= MAX_WAITERS {
            // One call grants at most one token per waiter, plus one: the
            // bound keeps every call inside one token block. Hundreds of
            // millions of waiters: no node has the memory anyway.
            return Err(NotServing::redirect(None));
        }
        if self.service.table().len() >= MAX_TABLE_LOCKS
            && self.service.table().holder(&key).is_none()
        {
            // A table no standby could take in (reassembly stops there).
            return Err(NotServing::redirect(None));
        }
        Ok(self.service.acquire(key, wait_ms, lease_ms, now, handle))
    }

    pub fn release(
        &mut self,
        key: &Key,
        token: Token,
        now: Millis,
        events: &mut Vec<Event<H>>,
    ) -> Result<Outcome, NotServing> {
        self.serving(now, events)?;
        let outcome = self.service.release(key, token, now, &mut self.scratch);
        self.drain_scratch(events);
        Ok(outcome)
    }

    pub fn renew(
        &mut self,
        key: &Key,
        token: Token,
        lease_ms: u64,
        now: Millis,
        events: &mut Vec<Event<H>>,
    ) -> Result<Outcome, NotServing> {
        self.serving(now, events)?;
        Ok(self.service.renew(key, token, lease_ms, now))
    }

    pub fn cancel(&mut self, id: WaiterId) {
        self.service.cancel(id);
    }

    // ---- time ------------------------------------------------------------

    /// Heartbeats, failure detection, promotion, lease expiry and waits.
    pub fn tick(&mut self, now: Millis, events: &mut Vec<Event<H>>) {
        self.check_pause(now, events);
        self.last_tick = now;
        self.drop_stale_tables(now);
        match self.role {
            NodeRole::Active => {
                self.make_room(now);
                self.service.tick(now, &mut self.scratch);
                self.drain_scratch(events);
                self.maybe_yield(now, events);
            }
            NodeRole::Standby => self.standby_tick(now),
            NodeRole::HandingOff { to } => {
                if now.saturating_sub(self.handoff_started) > self.config.failure_timeout_ms {
                    tracing::warn!(successor = to, "handoff not taken up; standing by");
                    self.role = NodeRole::Standby;
                    self.following = None;
                    self.quiet_until = self.quiet_until.max(now);
                }
            }
        }
        if now >= self.next_heartbeat {
            self.beat(now);
        }
    }

    fn beat(&mut self, now: Millis) {
        self.send_heartbeats();
        self.last_beat = now;
        self.next_heartbeat = now.saturating_add(self.config.heartbeat_ms);
    }

    /// When `tick` next has work.
    pub fn next_deadline(&self) -> Millis {
        let mut next = self.next_heartbeat;
        if self.role == NodeRole::Active {
            if let Some(at) = self.service.next_deadline() {
                next = next.min(at);
            }
        }
        if self.role == NodeRole::Standby {
            match self.following {
                Some(active) => {
                    if let Some(heard) = self.peers[active].last_heard {
                        let dead_at = heard.saturating_add(self.config.failure_timeout_ms + 1);
                        next = next.min(dead_at);
                    }
                }
                None => next = next.min(self.quiet_until),
            }
        }
        next
    }

    /// A process that did not run for a failure timeout may have been
    /// replaced: step down before granting anything more.
    fn check_pause(&mut self, now: Millis, events: &mut Vec<Event<H>>) {
        // An active that sent no heartbeat for a failure timeout may have
        // been replaced. A node that is not active ticks at least every
        // heartbeat: a longer gap already leaves it with a stale view of
        // its peers.
        let (gap, stalled) = match self.role {
            NodeRole::Active => {
                let gap = now.saturating_sub(self.last_beat.max(self.last_tick));
                (gap, gap > self.config.failure_timeout_ms)
            }
            _ => {
                let gap = now.saturating_sub(self.last_tick);
                (gap, gap > 2 * self.config.heartbeat_ms)
            }
        };
        if !stalled {
            return;
        }
        self.resumed_at = Some(now);
        if self.role == NodeRole::Active {
            tracing::warn!(
                gap_ms = gap,
                "did not run for a failure timeout; stepping down"
            );
            self.step_down(None, now, events);
        } else {
            // Every peer looks dead because their heartbeats of the pause
            // are still unread: listen again before promoting.
            self.quiet_until = self
                .quiet_until
                .max(now.saturating_add(self.config.failure_timeout_ms));
        }
    }

    fn standby_tick(&mut self, now: Millis) {
        if let Some(active) = self.following {
            if !self.is_live(active, now) {
                tracing::info!(active, "active is silent");
                self.following = None;
            }
        }
        match self.following {
            Some(active) => {
                if !self.synced && now >= self.next_sync_request {
                    self.outbox.push((active, PriorityMessage::SyncRequest));
                    self.next_sync_request = now.saturating_add(2 * self.config.heartbeat_ms);
                }
            }
            None => {
                if now >= self.quiet_until && self.is_best_candidate(now) {
                    self.promote(now);
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

    fn promote(&mut self, now: Millis) {
        let known = self.service.table().last_token().max(self.seen_token);
        // In this node's own blocks: a token nobody else can grant.
        let floor = self
            .blocks
            .floor_at_or_above(known.saturating_add(TOKEN_MARGIN))
            .max(self.own_wall_floor(now));
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
        self.role = NodeRole::Active;
        self.following = None;
        self.synced = true;
        self.handed_off_to = None;
        for peer in &mut self.peers {
            peer.synced = false;
        }
        tracing::info!(term = floor, "now active");
        self.beat(now);
    }

    fn step_down(&mut self, to: Option<NodeIndex>, now: Millis, events: &mut Vec<Event<H>>) {
        for waiter in self.service.drain_waiters() {
            events.push(Event::Moved {
                id: waiter.id,
                handle: waiter.handle,
                key: waiter.key,
                to: NotServing::redirect(to),
            });
        }
        self.service.drain_journal();
        self.role = NodeRole::Standby;
        self.following = to;
        self.synced = false;
        self.next_sync_request = now;
        self.quiet_until = now.saturating_add(self.config.failure_timeout_ms);
        tracing::info!(following = ?to, "now standby");
    }

    // ---- token floors -----------------------------------------------------

    /// The wall-clock floor, in this node's own blocks.
    fn own_wall_floor(&self, now: Millis) -> Token {
        self.blocks.wall_floor(wall_floor(self.wall(now)))
    }

    /// Raises the floor to `wanted` or the first token above it that this
    /// node may grant.
    fn raise_floor(&mut self, wanted: Token) {
        let last = self.service.table().last_token();
        let floor = self.blocks.floor_at_or_above(wanted.max(last));
        if floor > last {
            self.service.raise_token_floor(floor);
        }
    }

    /// Before a call that can grant: tokens keep up with the wall clock
    /// (within a block), and what is left of this node's block must cover
    /// every grant the call can make (one per waiter, plus one), or the
    /// floor moves to this node's next block.
    ///
    /// Keeping up with the clock bounds how long tokens granted elsewhere
    /// can stay above ours when we never hear of them (the other side of a
    /// split that died before the heal): at most the margins that side
    /// stacked above its clock floor, a few hundred ms of clock.
    fn make_room(&mut self, now: Millis) {
        let clock = self.own_wall_floor(now);
        if clock > self.service.table().last_token().saturating_add(BLOCK) {
            self.raise_floor(clock);
        }
        let grants = self.service.waiter_count() as u64 + 1;
        if let Some(floor) = self
            .blocks
            .floor_for(self.service.table().last_token(), grants)
        {
            self.service.raise_token_floor(floor);
        }
    }

    // ---- persistence -----------------------------------------------------

    /// Starts from a state written before a restart (`--data-dir`): its
    /// locks, with leases counted again from `now`, and its term, so that
    /// the election prefers it over nodes that know nothing.
    ///
    /// A state beyond the sanity bounds ([`Self::check_recovered`]) is not
    /// taken: a start-up should refuse it first (`state_file::load_checked`
    /// names the file); this keeps a caller that did not from spreading it.
    pub fn recover(&mut self, state: &PersistedState, now: Millis) {
        if let Err(why) = self.check_recovered(state, now) {
            tracing::error!("the recovered state is not taken: {why}");
            return;
        }
        self.service
            .replace_table(LockTable::restore(&state.table, now));
        self.term = state.term;
        self.seen_token = self.seen_token.max(state.seen_token);
        self.version += 1;
    }

    /// The state to write if it changed since `written` (a version this
    /// returned before), with its version.
    pub fn state_to_persist(&self, written: u64, now: Millis) -> Option<(u64, PersistedState)> {
        if self.version == written {
            return None;
        }
        let state = PersistedState {
            term: self.term,
            seen_token: self.seen_token.max(self.service.table().last_token()),
            table: self.service.table().snapshot(now),
        };
        Some((self.version, state))
    }
}
