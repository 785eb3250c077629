//! The simulated world: N engines on one simulated clock (each with its own
//! clock epoch), the network between them, the clients, the faults, and
//! the checks run after every step.

use std::collections::{BTreeMap, VecDeque};

use baton_cluster::priority::driver::Driver;
use baton_cluster::priority::{
    encoded_len, NodeIndex, NodeRole, PriorityConfig, PriorityMessage, PriorityNode,
    MAX_MESSAGE_BYTES,
};
use baton_core::{Event, Key, Millis, Token};

use super::client::{Answer, Client, KeyKind, Request};
use super::net::{Envelope, Network, Sent};
use super::rng::Rng;

mod checks;
mod faults;
mod requests;
mod roles;

pub const HEARTBEAT: u64 = 10;
pub const TIMEOUT: u64 = 60;
/// How long after the last fault the cluster must have settled.
pub const SETTLE: u64 = 3 * TIMEOUT;
/// The end of a run is kept free of faults, so every run ends settled.
const CALM_END: u64 = 2 * SETTLE;
const WALL_ZERO: u64 = 1_700_000_000_000;
/// A plain key, a semaphore and a readers-writer key, three clients each.
const KEYS: [(&str, KeyKind); 3] = [
    ("orders/1", KeyKind::Plain),
    ("jobs:nightly", KeyKind::Semaphore(2)),
    ("x", KeyKind::ReadersWriter),
];
const CLIENTS: usize = 9;
const TRACE_LINES: usize = 60;
/// The message limit of the nodes in every other run (by seed): below one
/// lock or command, so every table and batch of more than one crosses in
/// pieces, each of which the faults can delay, lose or cut off.
const TINY_MESSAGES: usize = 24;

/// Which faults a run injects besides delay, loss, crashes and graceful
/// stops, which every run has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Profile {
    pub pauses: bool,
    pub partitions: bool,
    /// The nodes send tables and command batches in pieces of one item.
    pub pieces: bool,
}

impl Profile {
    pub fn for_seed(seed: u64) -> Profile {
        let pieces = (seed / 3) % 2 == 1;
        match seed % 3 {
            0 => Profile {
                pauses: false,
                partitions: false,
                pieces,
            },
            1 => Profile {
                pauses: true,
                partitions: false,
                pieces,
            },
            _ => Profile {
                pauses: true,
                partitions: true,
                pieces,
            },
        }
    }
}

/// What a run went through, so a test can tell that the faults happened.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    pub grants: u64,
    pub promotions: u64,
    pub handoffs: u64,
    /// Handoffs an active took by merging the table (after a heal).
    pub merges: u64,
    pub crashes: u64,
    pub pauses: u64,
    pub partitions: u64,
    pub settled_steps: u64,
    /// Pieces of tables after the first, sent.
    pub later_pieces: u64,
}

impl Summary {
    pub fn add(&mut self, other: &Summary) {
        self.grants += other.grants;
        self.promotions += other.promotions;
        self.handoffs += other.handoffs;
        self.merges += other.merges;
        self.crashes += other.crashes;
        self.pauses += other.pauses;
        self.partitions += other.partitions;
        self.settled_steps += other.settled_steps;
        self.later_pieces += other.later_pieces;
    }
}

#[derive(Debug)]
pub struct Failure {
    pub seed: u64,
    pub nodes: usize,
    pub profile: Profile,
    pub at: Millis,
    pub what: String,
    pub trace: Vec<String>,
}

impl Failure {
    pub fn report(&self, test: &str) -> String {
        format!(
            "seed {} ({} nodes, {:?}) failed at t={} ms: {}\n\
             replay: PRIORITY_SIM_SEED={} cargo test -p baton-cluster --test priority_sim {}\n\
             last events:\n  {}",
            self.seed,
            self.nodes,
            self.profile,
            self.at,
            self.what,
            self.seed,
            test,
            self.trace.join("\n  ")
        )
    }
}

/// What the world knows of a node beyond its engine (which the driver
/// holds, with its clock).
#[derive(Debug)]
struct Node {
    up_since: Millis,
    paused_until: Option<Millis>,
    /// Messages and requests that reached it while paused.
    held: Vec<Envelope>,
    held_requests: Vec<(usize, Request)>,
    /// A graceful stop: it exits once the handoff is confirmed or by then.
    stopping_until: Option<Millis>,
    restart_at: Option<Millis>,
    /// Counts the times it became active; a grant's custody is tied to one.
    activation: u64,
    role: NodeRole,
    /// The engine's term when last observed.
    term: u64,
    /// Since when it has run without a pause or a restart.
    steady_since: Millis,
    /// When it last became active.
    active_since: Millis,
    /// When its role last changed.
    role_since: Millis,
}

fn config(me: NodeIndex, nodes: usize, offset: Millis) -> PriorityConfig {
    PriorityConfig {
        me,
        peers: (0..nodes)
            .map(|i| format!("127.0.0.1:{}", 7400 + i))
            .collect(),
        heartbeat_ms: HEARTBEAT,
        failure_timeout_ms: TIMEOUT,
        wall_at_zero: WALL_ZERO - offset,
    }
}

/// A node's engine, started at its clock's `now`, with the run's message
/// limit.
fn engine(
    me: NodeIndex,
    nodes: usize,
    offset: Millis,
    now: Millis,
    profile: Profile,
) -> PriorityNode<u64> {
    let mut engine = PriorityNode::new(config(me, nodes, offset), now);
    if profile.pieces {
        engine.set_message_limit(TINY_MESSAGES);
    }
    engine
}

/// Whether (node, activation) still answers for a grant: the node runs in
/// that activation and has not stood down since.
fn custodian_valid(
    driver: &Driver<u64>,
    nodes: &[Node],
    (node, activation): (NodeIndex, u64),
) -> bool {
    let n = &nodes[node];
    driver.is_up(node)
        && n.activation == activation
        && matches!(n.role, NodeRole::Active | NodeRole::HandingOff { .. })
}

fn handle(client: usize, serial: u64) -> u64 {
    ((client as u64) << 32) | (serial & 0xFFFF_FFFF)
}

fn split_handle(handle: u64) -> (usize, u64) {
    ((handle >> 32) as usize, handle & 0xFFFF_FFFF)
}

pub struct World {
    profile: Profile,
    duration: Millis,
    rng: Rng,
    now: Millis,
    net: Network,
    /// The engines, on the simulated clock (each with its own offset).
    driver: Driver<u64>,
    nodes: Vec<Node>,
    clients: Vec<Client>,
    next_fault: Millis,
    loss_until: Option<Millis>,
    heal_at: Option<Millis>,
    last_disturbance: Millis,
    /// Handoffs taken since the last disturbance: a few move the role back
    /// up the list; more would be nodes handing it back and forth.
    calm_handoffs: usize,
    /// Since when no message was lost or cut (loss, reset, partition).
    net_quiet_since: Millis,
    /// Grants before this time may interleave (a partition and its settling).
    tokens_free_until: Millis,
    max_token: Token,
    max_token_by: (Millis, NodeIndex),
    /// Every token granted in the run, with when, by whom and on which key:
    /// no two grants may ever share one, whatever the faults.
    granted: BTreeMap<Token, (Millis, NodeIndex, Key)>,
    summary: Summary,
    trace: VecDeque<String>,
    failure: Option<String>,
}

/// Runs one seed for `duration` simulated ms.
pub fn run(seed: u64, nodes: usize, duration: Millis) -> Result<Summary, Failure> {
    let mut world = World::new(seed, nodes, duration);
    while world.now < duration {
        world.step();
        if let Some(what) = world.failure.take() {
            return Err(Failure {
                seed,
                nodes,
                profile: world.profile,
                at: world.now,
                what,
                trace: world.trace.into_iter().collect(),
            });
        }
    }
    Ok(world.summary)
}

impl World {
    fn new(seed: u64, n: usize, duration: Millis) -> World {
        let mut rng = Rng::new(seed);
        let profile = Profile::for_seed(seed);
        let mut driver = Driver::new(n);
        let nodes = (0..n)
            .map(|i| {
                let offset = rng.range(0, 1_000_000);
                driver.start(i, engine(i, n, offset, offset, profile), offset);
                Node {
                    up_since: 0,
                    paused_until: None,
                    held: Vec::new(),
                    held_requests: Vec::new(),
                    stopping_until: None,
                    restart_at: None,
                    activation: 0,
                    role: NodeRole::Standby,
                    term: 0,
                    steady_since: 0,
                    active_since: 0,
                    role_since: 0,
                }
            })
            .collect();
        let clients = (0..CLIENTS)
            .map(|c| {
                let (name, kind) = KEYS[c % KEYS.len()];
                let key = Key::try_from(name).unwrap_or_else(|e| {
                    panic!("bad simulation key: {e}");
                });
                Client::new(key, kind, n, &mut rng)
            })
            .collect();
        let first_fault = rng.range(200, 600);
        World {
            profile,
            duration,
            rng,
            now: 0,
            net: Network::new(n, 5),
            driver,
            nodes,
            clients,
            next_fault: first_fault,
            loss_until: None,
            heal_at: None,
            last_disturbance: 0,
            calm_handoffs: 0,
            net_quiet_since: 0,
            tokens_free_until: 0,
            max_token: 0,
            max_token_by: (0, 0),
            granted: BTreeMap::new(),
            summary: Summary::default(),
            trace: VecDeque::new(),
            failure: None,
        }
    }

    fn step(&mut self) {
        self.now += 1;
        self.driver.advance(1);
        self.end_faults();
        self.start_fault();
        for envelope in self.net.due(self.now) {
            self.arrive(envelope);
        }
        self.ticks();
        self.clients_act();
        self.flush_outputs();
        self.check();
    }

    fn log(&mut self, line: String) {
        if self.trace.len() == TRACE_LINES {
            self.trace.pop_front();
        }
        self.trace.push_back(format!("t={} {}", self.now, line));
    }

    fn fail(&mut self, what: String) {
        if self.failure.is_none() {
            self.failure = Some(what);
        }
    }

    /// Node `i` has an engine (it may be paused).
    fn up(&self, i: NodeIndex) -> bool {
        self.driver.is_up(i)
    }

    /// Node `i` has an engine and is not paused.
    fn running(&self, i: NodeIndex) -> bool {
        self.up(i) && self.nodes[i].paused_until.is_none()
    }

    // ---- calling the engines ----------------------------------------------

    /// Runs `f` on node `i`'s engine at its clock, then routes its events
    /// and notes a change of role. `handoff_from`: the call delivers a
    /// handoff from that node.
    fn call<R>(
        &mut self,
        i: NodeIndex,
        handoff_from: Option<NodeIndex>,
        f: impl FnOnce(&mut PriorityNode<u64>, Millis) -> R,
    ) -> Option<R> {
        let result = self.driver.call(i, f)?;
        self.observe_role(i, handoff_from);
        let events = self.driver.take_events(i);
        self.route_events(i, events);
        Some(result)
    }

    fn route_events(&mut self, i: NodeIndex, events: Vec<Event<u64>>) {
        let mut queue: VecDeque<_> = events.into();
        while let Some(event) = queue.pop_front() {
            let now = self.now;
            match event {
                Event::Granted {
                    handle, key, token, ..
                } => {
                    self.record_grant(i, &key, token);
                    let (c, serial) = split_handle(handle);
                    if self.clients[c].waited_grant(i, serial, token, now, &mut self.rng) {
                        self.take_custody(c, i);
                        self.log(format!(
                            "client {c} granted {key} token {token} by node {i}"
                        ));
                    } else {
                        // Nobody waits for it any more: the server gives
                        // such a grant back at once.
                        self.driver
                            .call(i, |engine, now| engine.handle_release(&key, token, now));
                        queue.extend(self.driver.take_events(i));
                    }
                }
                Event::TimedOut { handle, .. } => {
                    let (c, serial) = split_handle(handle);
                    self.clients[c].wait_ended(i, serial, None, now, &mut self.rng);
                }
                Event::Moved { handle, to, .. } => {
                    let (c, serial) = split_handle(handle);
                    self.clients[c].wait_ended(i, serial, Some(to.serving), now, &mut self.rng);
                }
                Event::Answered { .. } => {
                    unreachable!("the priority engine answers every request at once")
                }
            }
        }
    }

    /// The node that just granted or renewed answers for the grant alone.
    fn take_custody(&mut self, c: usize, i: NodeIndex) {
        let activation = self.nodes[i].activation;
        if let Some(held) = self.clients[c].held_mut() {
            held.custodians = vec![(i, activation)];
            held.cap = Millis::MAX;
        }
    }

    fn record_grant(&mut self, i: NodeIndex, key: &Key, token: Token) {
        self.summary.grants += 1;
        if let Some((at, by, first_key)) = self.granted.get(&token) {
            let (at, by, first_key) = (*at, *by, first_key.clone());
            self.fail(format!(
                "token {token} granted twice: node {i} granted it on {key}, node {by} \
                 had granted it on {first_key} at t={at}"
            ));
        } else {
            self.granted.insert(token, (self.now, i, key.clone()));
        }
        let free = self.net.partitioned() || self.now < self.tokens_free_until;
        if !free && token <= self.max_token {
            let (at, by) = self.max_token_by;
            self.fail(format!(
                "token went backwards: node {i} granted {key} token {token}, not above \
                 token {} granted by node {by} at t={at}",
                self.max_token
            ));
        }
        if token > self.max_token {
            self.max_token = token;
            self.max_token_by = (self.now, i);
        }
    }

    // ---- the network --------------------------------------------------------

    fn arrive(&mut self, envelope: Envelope) {
        if !self.up(envelope.to) {
            return;
        }
        let node = &mut self.nodes[envelope.to];
        if node.paused_until.is_some() {
            node.held.push(envelope);
            return;
        }
        self.receive(envelope);
    }

    fn receive(&mut self, envelope: Envelope) {
        let Envelope { from, to, message } = envelope;
        // A handoff is taken with its last piece; the earlier ones change
        // no role.
        let handoff = matches!(message, PriorityMessage::HandoffPart { .. }).then_some(from);
        self.call(to, handoff, |engine, now| {
            engine.handle_message(from, message, now)
        });
    }

    fn flush_outputs(&mut self) {
        for i in 0..self.nodes.len() {
            if !self.running(i) {
                continue;
            }
            let output = self.driver.transmits(i);
            for (to, message) in output {
                let len = encoded_len(&message);
                if len > MAX_MESSAGE_BYTES {
                    self.fail(format!("node {i} sent a message of {len} bytes"));
                }
                if let PriorityMessage::SnapshotPart { part, .. }
                | PriorityMessage::HandoffPart { part } = &message
                {
                    self.summary.later_pieces += u64::from(part.piece > 0);
                }
                if !self.up(to) {
                    // The shell drops what it cannot deliver to a peer
                    // that is down.
                    continue;
                }
                let envelope = Envelope {
                    from: i,
                    to,
                    message,
                };
                let sent = self.net.send(envelope, self.now, &mut self.rng);
                if sent != Sent::OnItsWay {
                    self.net_quiet_since = self.now;
                }
                if sent == Sent::Reset {
                    self.last_disturbance = self.now;
                    self.driver.link_down(i, to);
                }
            }
        }
    }

    fn ticks(&mut self) {
        for i in 0..self.nodes.len() {
            if !self.running(i) {
                continue;
            }
            let due = self.driver.tick_due(i);
            // The server's timer also wakes for other reasons now and then.
            if due || self.rng.chance(0.02) {
                self.call(i, None, |engine, now| engine.handle_tick(now));
            }
        }
    }
}
