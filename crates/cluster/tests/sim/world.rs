//! The simulated world: N engines on one simulated clock (each with its own
//! clock epoch), the network between them, the clients, the faults, and
//! the checks run after every step.

use std::collections::{BTreeMap, VecDeque};

use baton_cluster::priority::driver::Driver;
use baton_cluster::priority::{
    encoded_len, NodeIndex, NodeRole, PriorityConfig, PriorityMessage, PriorityNode,
    MAX_MESSAGE_BYTES,
};
use baton_core::{AcquireOutcome, Event, Key, Millis, Outcome, Token};

use super::client::{Answer, Client, Request};
use super::net::{Envelope, Network, Sent};
use super::rng::Rng;

pub const HEARTBEAT: u64 = 10;
pub const TIMEOUT: u64 = 60;
/// How long after the last fault the cluster must have settled.
pub const SETTLE: u64 = 3 * TIMEOUT;
/// The end of a run is kept free of faults, so every run ends settled.
const CALM_END: u64 = 2 * SETTLE;
const WALL_ZERO: u64 = 1_700_000_000_000;
const KEYS: [&str; 3] = ["orders/1", "jobs:nightly", "x"];
const CLIENTS: usize = 6;
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
                }
            })
            .collect();
        let clients = (0..CLIENTS)
            .map(|c| {
                let key = Key::try_from(KEYS[c % KEYS.len()]).unwrap_or_else(|e| {
                    panic!("bad simulation key: {e}");
                });
                Client::new(key, n, &mut rng)
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

    fn observe_role(&mut self, i: NodeIndex, handoff_from: Option<NodeIndex>) {
        let Some(engine) = self.driver.engine(i) else {
            return;
        };
        let (role, following, term) = (engine.role(), engine.following(), engine.term());
        let before = self.nodes[i].role;
        let term_before = std::mem::replace(&mut self.nodes[i].term, term);
        // An active that takes a handoff merges the table and starts a new
        // term: an activation of its own, as if it had promoted.
        let merged = handoff_from.is_some()
            && before == NodeRole::Active
            && role == NodeRole::Active
            && term != term_before;
        if role == before && !merged {
            return;
        }
        self.nodes[i].role = role;
        if matches!(before, NodeRole::HandingOff { .. }) && role == NodeRole::Active {
            // The successor refused: the same activation serves on.
            self.log(format!(
                "node {i}: handoff refused, serving on (term {term})"
            ));
            return;
        }
        self.log(format!(
            "node {i}: {before:?} -> {role:?} (following {following:?}, term {term})"
        ));
        if role == NodeRole::Active {
            self.nodes[i].activation += 1;
            self.summary.promotions += 1;
            if handoff_from.is_some() {
                self.summary.handoffs += 1;
                self.summary.merges += u64::from(merged);
            } else {
                self.check_promotion(i);
            }
            self.nodes[i].active_since = self.now;
            self.on_promotion(i, handoff_from, merged);
        }
    }

    /// A node promoted itself: nothing may have kept it from hearing an
    /// active that has been running steadily all along.
    fn check_promotion(&mut self, i: NodeIndex) {
        let since = self.now.saturating_sub(TIMEOUT);
        if self.net_quiet_since > since {
            return;
        }
        let steady = (0..self.nodes.len()).find(|&j| {
            let n = &self.nodes[j];
            j != i
                && self.running(j)
                && n.role == NodeRole::Active
                && n.steady_since <= since
                && n.active_since <= since
        });
        if let Some(j) = steady {
            self.fail(format!(
                "node {i} promoted itself while node {j} has been active and steadily \
                 heard for a failure timeout"
            ));
        }
    }

    /// A node became active: it answers from now on for every held grant
    /// its table has. Taking over by handoff, it must have every grant the
    /// node handing over answered for.
    /// `merged`: it was active already and merged the table handed over.
    fn on_promotion(&mut self, i: NodeIndex, handoff_from: Option<NodeIndex>, merged: bool) {
        let offset = self.driver.local(i) - self.now;
        let activation = self.nodes[i].activation;
        let mut lost = Vec::new();
        let Some(engine) = self.driver.engine(i) else {
            return;
        };
        for (c, client) in self.clients.iter_mut().enumerate() {
            let key = client.key.clone();
            let Some(held) = client.held_mut() else {
                continue;
            };
            match engine.table().holder(&key) {
                Some(h) if h.token == held.token => {
                    held.custodians.push((i, activation));
                    held.cap = held.cap.min(h.expires_at.saturating_sub(offset));
                }
                // Both actives of a split granted the key; the merge keeps
                // the receiver's own grant.
                Some(_) if merged => {}
                _ => {
                    let from_custodian = handoff_from.is_some_and(|from| {
                        held.custodians
                            .iter()
                            .any(|&c| c.0 == from && custodian_valid(&self.driver, &self.nodes, c))
                    });
                    if from_custodian && self.now < held.valid_until() {
                        lost.push((c, key, held.token));
                    }
                }
            }
        }
        for (c, key, token) in lost {
            self.fail(format!(
                "node {i} took over by handoff from {handoff_from:?} without client {c}'s \
                 grant of {key} (token {token})"
            ));
        }
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

    // ---- clients ------------------------------------------------------------

    fn clients_act(&mut self) {
        for c in 0..self.clients.len() {
            if let Some((node, id)) = self.clients[c].abandon(self.now, &mut self.rng) {
                if self.running(node) {
                    self.call(node, None, |engine, _| engine.handle_cancel(id));
                }
            }
            let Some((node, request)) = self.clients[c].next_request(self.now, &mut self.rng)
            else {
                continue;
            };
            if !self.up(node) {
                self.answer(c, node, Answer::Gone);
            } else if self.nodes[node].paused_until.is_some() {
                self.nodes[node].held_requests.push((c, request));
            } else {
                self.serve(node, c, request);
            }
        }
    }

    fn answer(&mut self, c: usize, node: NodeIndex, answer: Answer) {
        let now = self.now;
        self.clients[c].on_answer(node, answer, now, &mut self.rng);
    }

    fn serve(&mut self, i: NodeIndex, c: usize, request: Request) {
        let key = self.clients[c].key.clone();
        let answer = match request {
            Request::Acquire { wait_ms, lease_ms } => {
                let h = handle(c, self.clients[c].serial);
                let k = key.clone();
                let result = self.call(i, None, |engine, now| {
                    engine.handle_acquire(k, wait_ms, lease_ms, now, h)
                });
                match result {
                    None => Answer::Gone,
                    Some(Err(to)) => Answer::Redirect(to.serving),
                    Some(Ok(AcquireOutcome::Queued { id })) => Answer::Queued(id),
                    Some(Ok(AcquireOutcome::Granted { token })) => {
                        self.record_grant(i, &key, token);
                        self.answer(c, i, Answer::Granted(token));
                        self.take_custody(c, i);
                        self.log(format!(
                            "client {c} granted {key} token {token} by node {i}"
                        ));
                        return;
                    }
                }
            }
            Request::Release { token } => {
                let result = self.call(i, None, |engine, now| {
                    engine.handle_release(&key, token, now)
                });
                match result {
                    None => Answer::Gone,
                    Some(Err(to)) => Answer::Redirect(to.serving),
                    Some(Ok(Outcome::Released)) => Answer::Released,
                    Some(Ok(_)) => Answer::NotFound,
                }
            }
            Request::Renew { token, lease_ms } => {
                let result = self.call(i, None, |engine, now| {
                    engine.handle_renew(&key, token, lease_ms, now)
                });
                match result {
                    None => Answer::Gone,
                    Some(Err(to)) => Answer::Redirect(to.serving),
                    Some(Ok(Outcome::Renewed)) => {
                        self.answer(c, i, Answer::Renewed);
                        self.take_custody(c, i);
                        return;
                    }
                    Some(Ok(_)) => {
                        self.log(format!(
                            "client {c} lost {key} token {token} (renew at node {i})"
                        ));
                        Answer::NotFound
                    }
                }
            }
        };
        self.answer(c, i, answer);
    }

    // ---- faults -------------------------------------------------------------

    fn end_faults(&mut self) {
        let now = self.now;
        for i in 0..self.nodes.len() {
            if self.nodes[i].paused_until.is_some_and(|t| t <= now) {
                self.resume(i);
            }
            if self.nodes[i].restart_at.is_some_and(|t| t <= now) && self.may_restart(i) {
                self.restart(i);
            }
            if let Some(until) = self.nodes[i].stopping_until {
                let confirmed = self
                    .driver
                    .engine(i)
                    .is_some_and(|e| e.handed_off_to().is_some());
                if confirmed || now >= until {
                    self.log(format!(
                        "node {i} exits after its handoff (confirmed: {confirmed})"
                    ));
                    self.crash(i);
                } else if self.running(i) && self.nodes[i].role == NodeRole::Active {
                    // The successor refused: the shell offers the role again.
                    self.call(i, None, |engine, now| engine.handle_begin_handoff(now));
                }
            }
        }
        if self.heal_at.is_some_and(|t| t <= now) {
            self.heal_at = None;
            self.last_disturbance = now;
            self.tokens_free_until = now + SETTLE;
            for (a, b) in self.net.heal() {
                // Some links broke during the split, some outlived it.
                if self.rng.chance(0.5) && self.running(a) {
                    self.call(a, None, |engine, _| engine.handle_link_down(b));
                }
            }
            self.log("partition healed".into());
        }
        if self.loss_until.is_some_and(|t| t <= now) {
            self.loss_until = None;
            self.net.loss = 0.0;
            self.last_disturbance = now;
        }
    }

    fn start_fault(&mut self) {
        if self.now < self.next_fault || self.now + CALM_END >= self.duration {
            return;
        }
        self.next_fault = self.now + self.rng.range(30, 500);
        let n = self.nodes.len();
        match self.rng.below(6) {
            0 => {
                let i = self.rng.below(n);
                if self.running(i)
                    && self.nodes[i].stopping_until.is_none()
                    && self.others_carry_on(i)
                {
                    self.log(format!("node {i} crashes"));
                    self.crash(i);
                }
            }
            1 => {
                let actives: Vec<NodeIndex> = (0..n)
                    .filter(|&i| {
                        self.running(i)
                            && self.nodes[i].role == NodeRole::Active
                            && self.nodes[i].stopping_until.is_none()
                    })
                    .collect();
                if actives.is_empty() {
                    return;
                }
                let i = actives[self.rng.below(actives.len())];
                // In a partition a graceful stop hands its table to a node
                // it reaches (which then knows its tokens); with none, the
                // stop is not tried (it would be a crash inside a split).
                let split = self.net.partitioned();
                if !split && !self.others_carry_on(i) || split && !self.may_restart(i) {
                    return;
                }
                self.log(format!("node {i} stops gracefully"));
                self.last_disturbance = self.now;
                let begun = self.call(i, None, |engine, now| engine.handle_begin_handoff(now));
                if begun == Some(true) {
                    self.nodes[i].stopping_until = Some(self.now + 200);
                } else if split {
                    self.log(format!("node {i} finds no successor; stays"));
                } else {
                    self.crash(i);
                }
            }
            2 if self.profile.pauses => {
                let i = self.rng.below(n);
                if self.running(i) && self.others_carry_on(i) {
                    let length = self.rng.range(5, 3 * TIMEOUT);
                    self.log(format!("node {i} pauses for {length} ms"));
                    self.nodes[i].paused_until = Some(self.now + length);
                    self.summary.pauses += 1;
                }
            }
            3 if self.profile.partitions && !self.net.partitioned() && self.all_informed() => {
                let length = self.rng.range(30, 600);
                if n > 2 && self.rng.chance(0.3) {
                    // Two nodes lose each other while the rest reach both.
                    let a = self.rng.below(n);
                    let b = (a + 1 + self.rng.below(n - 1)) % n;
                    self.log(format!(
                        "partition between {a} and {b} only for {length} ms"
                    ));
                    self.net.cut_pair(a, b);
                } else {
                    let mut sides: Vec<bool> = (0..n).map(|_| self.rng.chance(0.5)).collect();
                    if sides.iter().all(|&s| s == sides[0]) {
                        sides[self.rng.below(n)] = !sides[0];
                    }
                    self.log(format!("partition {sides:?} for {length} ms"));
                    self.net.partition(sides);
                }
                self.heal_at = Some(self.now + length);
                self.summary.partitions += 1;
            }
            _ => {
                let loss = self.rng.range(1, 8) as f64 / 100.0;
                let length = self.rng.range(50, 500);
                self.log(format!("loss {loss} for {length} ms"));
                self.net.loss = loss;
                self.loss_until = Some(self.now + length);
            }
        }
    }

    /// Whether the cluster keeps a node that has run long enough to know
    /// its state if `i` goes away. Without one, the survivors know nothing
    /// and fall back on the wall clock, which the docs only promise for a
    /// restart slower than the token margin (several seconds).
    /// During a partition nothing goes away, for the same reason: the node
    /// that knew might be on the other side.
    fn others_carry_on(&self, i: NodeIndex) -> bool {
        !self.net.partitioned()
            && (0..self.nodes.len()).any(|j| {
                j != i
                    && self.running(j)
                    && self.nodes[j].stopping_until.is_none()
                    && self.nodes[j].up_since + 2 * TIMEOUT <= self.now
            })
    }

    /// A node that restarts knows nothing: it must reach a node that knows
    /// the cluster's tokens, or it would fall back on the wall clock alone,
    /// which covers only restarts slower than the token margin (seconds,
    /// docs/cluster.md); the simulated ones take under one.
    fn may_restart(&self, i: NodeIndex) -> bool {
        (0..self.nodes.len()).any(|j| {
            j != i && self.informed(j) && self.net.can_reach(i, j) && self.net.can_reach(j, i)
        })
    }

    /// Running long enough to have heard the cluster's tokens.
    fn informed(&self, j: NodeIndex) -> bool {
        self.running(j) && self.nodes[j].up_since + 2 * TIMEOUT <= self.now
    }

    /// No partition cuts off a node that just restarted, for the same reason.
    fn all_informed(&self) -> bool {
        (0..self.nodes.len())
            .all(|j| !self.up(j) || self.nodes[j].up_since + 2 * TIMEOUT <= self.now)
    }

    fn crash(&mut self, i: NodeIndex) {
        self.summary.crashes += 1;
        self.last_disturbance = self.now;
        self.driver.crash(i);
        let node = &mut self.nodes[i];
        node.paused_until = None;
        node.stopping_until = None;
        node.held.clear();
        node.role = NodeRole::Standby;
        node.restart_at = Some(self.now + self.rng.range(50, 800));
        let requests = std::mem::take(&mut node.held_requests);
        self.net.drop_node(i);
        for (c, _) in requests {
            self.answer(c, i, Answer::Gone);
        }
        for c in 0..self.clients.len() {
            let serial = self.clients[c].serial;
            let now = self.now;
            self.clients[c].wait_ended(i, serial, Some(None), now, &mut self.rng);
        }
        for j in 0..self.nodes.len() {
            if j != i && self.running(j) {
                self.call(j, None, |engine, _| engine.handle_link_down(i));
            }
        }
    }

    fn restart(&mut self, i: NodeIndex) {
        let n = self.nodes.len();
        let offset = self.rng.range(0, 1_000_000);
        let engine = engine(i, n, offset, self.now + offset, self.profile);
        self.driver.start(i, engine, offset);
        let node = &mut self.nodes[i];
        node.up_since = self.now;
        node.steady_since = self.now;
        node.restart_at = None;
        node.role = NodeRole::Standby;
        self.last_disturbance = self.now;
        self.log(format!("node {i} restarts"));
    }

    /// After a pause the node finds its timer due, the peers' messages and
    /// the clients' requests of the pause, and takes them in any order.
    fn resume(&mut self, i: NodeIndex) {
        self.nodes[i].paused_until = None;
        self.nodes[i].steady_since = self.now;
        self.last_disturbance = self.now;
        let order = self.rng.below(3);
        self.log(format!("node {i} resumes (order {order})"));
        let messages = std::mem::take(&mut self.nodes[i].held);
        let requests = std::mem::take(&mut self.nodes[i].held_requests);
        if order == 0 {
            self.call(i, None, |engine, now| engine.handle_tick(now));
        }
        for envelope in messages {
            self.receive(envelope);
        }
        if order == 1 {
            self.call(i, None, |engine, now| engine.handle_tick(now));
        }
        for (c, request) in requests {
            self.serve(i, c, request);
        }
        if order == 2 {
            self.call(i, None, |engine, now| engine.handle_tick(now));
        }
    }

    // ---- checks -------------------------------------------------------------

    fn check(&mut self) {
        let disturbed = self.net.partitioned()
            || self.net.loss > 0.0
            || self
                .nodes
                .iter()
                .any(|n| n.paused_until.is_some() || n.stopping_until.is_some());
        if disturbed {
            self.last_disturbance = self.now;
        }
        if self.net.partitioned() || self.net.loss > 0.0 {
            self.net_quiet_since = self.now;
        }
        self.check_invariants();
        self.check_custody();
        self.check_redirects();
        self.check_no_refusals();
        if !self.profile.pauses && !self.profile.partitions {
            self.check_exclusion();
        }
        if self.now >= self.last_disturbance + SETTLE {
            self.check_settled();
        }
    }

    /// Every node's own invariants hold after every step.
    fn check_invariants(&mut self) {
        if let Err((i, broken)) = self.driver.validate() {
            self.fail(format!("node {i}: {broken}"));
        }
    }

    /// The sanity bounds never refuse what sound nodes send, however
    /// quick the failovers.
    fn check_no_refusals(&mut self) {
        let n = self.nodes.len();
        let refused = (0..n).find_map(|i| {
            let engine = self.driver.engine(i)?;
            (0..n).find(|&p| engine.refused_from(p) > 0).map(|p| (i, p))
        });
        if let Some((i, p)) = refused {
            self.fail(format!(
                "node {i} refused a message of node {p} (sanity bound)"
            ));
        }
    }

    /// No two nodes that answer clients send them to each other, at any
    /// moment.
    fn check_redirects(&mut self) {
        let target = |i: NodeIndex| {
            self.driver
                .engine(i)
                .filter(|_| self.running(i))
                .and_then(|e| e.redirect_target())
        };
        let targets: Vec<Option<NodeIndex>> = (0..self.nodes.len()).map(target).collect();
        let n = targets.len();
        for i in 0..n {
            for j in i + 1..n {
                if targets[i] == Some(j) && targets[j] == Some(i) {
                    self.fail(format!("nodes {i} and {j} redirect clients to each other"));
                }
            }
        }
    }

    /// While a node that granted (or took over) a grant stays active, the
    /// grant is in its table until released or run out.
    fn check_custody(&mut self) {
        let mut dropped = Vec::new();
        for (c, client) in self.clients.iter().enumerate() {
            let Some(held) = client.held() else {
                continue;
            };
            if self.now >= held.valid_until() {
                continue;
            }
            for &(node, activation) in &held.custodians {
                if !custodian_valid(&self.driver, &self.nodes, (node, activation)) {
                    continue;
                }
                let Some(engine) = self.driver.engine(node) else {
                    continue;
                };
                let token = engine.table().holder(&client.key).map(|h| h.token);
                if token != Some(held.token) {
                    dropped.push((c, node, client.key.clone(), held.token, token, held.end));
                }
            }
        }
        for (c, node, key, token, found, end) in dropped {
            self.fail(format!(
                "node {node} is still active but dropped client {c}'s grant of {key} \
                 (token {token}, lease to t={end}); its table has {found:?}"
            ));
        }
    }

    /// No two clients hold one key while both grants are still answered for.
    fn check_exclusion(&mut self) {
        for key in KEYS {
            let holders: Vec<(usize, Token)> = self
                .clients
                .iter()
                .enumerate()
                .filter(|(_, client)| client.key.as_bytes() == key.as_bytes())
                .filter_map(|(c, client)| client.held().map(|held| (c, held)))
                .filter(|(_, held)| {
                    self.now < held.valid_until()
                        && held
                            .custodians
                            .iter()
                            .any(|&c| custodian_valid(&self.driver, &self.nodes, c))
                })
                .map(|(c, held)| (c, held.token))
                .collect();
            if holders.len() > 1 {
                self.fail(format!("{key} is held twice: (client, token) {holders:?}"));
            }
        }
    }

    /// Long after the last fault: one active, and every other live node
    /// follows it.
    fn check_settled(&mut self) {
        self.summary.settled_steps += 1;
        let live: Vec<NodeIndex> = (0..self.nodes.len()).filter(|&i| self.up(i)).collect();
        let actives: Vec<NodeIndex> = live
            .iter()
            .copied()
            .filter(|&i| self.nodes[i].role == NodeRole::Active)
            .collect();
        if actives.len() != 1 {
            self.fail(format!(
                "settled for {} ms, yet the active nodes are {actives:?} (live: {live:?})",
                self.now - self.last_disturbance
            ));
            return;
        }
        let active = actives[0];
        for &i in &live {
            let Some(engine) = self.driver.engine(i) else {
                continue;
            };
            if i != active && engine.following() != Some(active) {
                let (role, following) = (engine.role(), engine.following());
                self.fail(format!(
                    "settled with node {active} active, but node {i} is {role:?} following \
                     {following:?}"
                ));
            }
        }
    }
}
