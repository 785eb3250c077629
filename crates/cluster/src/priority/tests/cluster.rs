//! The hand-driven cluster of the unit tests, on the driver the simulation
//! uses too (`super::super::driver`): instant delivery, cut links, crashed
//! and frozen nodes, and what crossed between the nodes.

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test

use baton_core::{Acquire, AcquireOutcome, Event, Key, Millis, Token};

use super::super::driver::Driver;
use super::super::engine::{LinkRefused, NodeRole, PriorityConfig, PriorityNode};
use super::super::messages::{encoded_len, NodeIndex, PriorityMessage, MAX_MESSAGE_BYTES};

pub(super) const HEARTBEAT: u64 = 10;
pub(super) const TIMEOUT: u64 = 50;

pub(super) fn key(s: &str) -> Key {
    Key::try_from(s).unwrap()
}

pub(super) fn config(me: NodeIndex, n: usize) -> PriorityConfig {
    PriorityConfig {
        me,
        peers: (0..n).map(|i| format!("127.0.0.1:{}", 7400 + i)).collect(),
        heartbeat_ms: HEARTBEAT,
        failure_timeout_ms: TIMEOUT,
        // Near the epoch, so the wall-clock floor stays far below the token
        // margin and the margin is what the tests see.
        wall_at_zero: 0,
    }
}

/// The message limit of the hand-driven nodes: small, so that every table
/// of more than a lock or two and most command batches cross in pieces.
pub(super) const SMALL_MESSAGES: usize = 40;

/// A node of the hand-driven cluster, starting at `now`.
pub(super) fn engine(me: NodeIndex, n: usize, now: Millis) -> PriorityNode<u64> {
    let mut node = PriorityNode::new(config(me, n), now);
    node.set_message_limit(SMALL_MESSAGES);
    node
}

/// A hand-driven cluster on the shared driver (`super::driver`): instant
/// delivery, links that can be cut, nodes that can be crashed (gone) or
/// frozen (neither tick nor receive).
pub(super) struct Cluster {
    pub(super) driver: Driver<u64>,
    pub(super) frozen: Vec<bool>,
    pub(super) cut: Vec<(NodeIndex, NodeIndex)>,
    /// Nodes that get heartbeats but no snapshot or commands.
    pub(super) starved: Vec<NodeIndex>,
    /// (dialler, dialled, why): links the dialled node answers and
    /// refuses, reported to the dialler at every step while both are up.
    pub(super) refusals: Vec<(NodeIndex, NodeIndex, LinkRefused)>,
    pub(super) traffic: Traffic,
    pub(super) now: Millis,
}

/// What crossed between the hand-driven nodes (every message is checked
/// against the cap on its way).
#[derive(Debug, Default)]
pub(super) struct Traffic {
    pub(super) largest: usize,
    /// Snapshots begun (first pieces), by addressee.
    pub(super) snapshots: Vec<usize>,
    pub(super) snapshot_pieces: usize,
    pub(super) handoff_pieces: usize,
    pub(super) command_batches: usize,
}

/// The events a node queued since they were last taken (by the driver or
/// by this).
pub(super) fn drain(node: &mut PriorityNode<u64>) -> Vec<Event<u64>> {
    std::iter::from_fn(|| node.poll_event()).collect()
}

impl Cluster {
    pub(super) fn new(n: usize) -> Cluster {
        let mut driver = Driver::new(n);
        for i in 0..n {
            driver.start(i, engine(i, n, 0), 0);
        }
        Cluster {
            driver,
            frozen: vec![false; n],
            cut: Vec::new(),
            starved: Vec::new(),
            refusals: Vec::new(),
            traffic: Traffic {
                snapshots: vec![0; n],
                ..Traffic::default()
            },
            now: 0,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.driver.len()
    }

    pub(super) fn node(&self, i: NodeIndex) -> &PriorityNode<u64> {
        self.driver.engine(i).unwrap()
    }

    /// Direct access: the events of what a test calls this way stay in
    /// the engine ([`drain`]).
    pub(super) fn node_mut(&mut self, i: NodeIndex) -> &mut PriorityNode<u64> {
        self.driver.engine_mut(i).unwrap()
    }

    /// Runs `f` on node `i` through the driver (its events are kept for
    /// [`Self::events`]).
    pub(super) fn call<R>(
        &mut self,
        i: NodeIndex,
        f: impl FnOnce(&mut PriorityNode<u64>, Millis) -> R,
    ) -> R {
        self.driver.call(i, f).unwrap()
    }

    pub(super) fn crash(&mut self, i: NodeIndex) {
        self.driver.crash(i);
    }

    pub(super) fn up(&self, i: NodeIndex) -> bool {
        self.driver.is_up(i) && !self.frozen[i]
    }

    pub(super) fn isolate(&mut self, i: NodeIndex) {
        for p in 0..self.len() {
            if p != i {
                self.cut.push((i, p));
                self.cut.push((p, i));
            }
        }
    }

    /// Node `i` is started with another key or peer list: no link
    /// between it and any other node carries, and each side's dials are
    /// answered with a refusal `why`.
    pub(super) fn misconfigure(&mut self, i: NodeIndex, why: LinkRefused) {
        self.isolate(i);
        for p in (0..self.len()).filter(|&p| p != i) {
            self.refusals.push((i, p, why));
            self.refusals.push((p, i, why));
        }
    }

    /// Hands every output to its addressee until nobody has anything to say.
    pub(super) fn deliver(&mut self) {
        for _ in 0..100 {
            let mut moved = false;
            for from in 0..self.len() {
                if !self.up(from) {
                    continue;
                }
                for (to, message) in self.driver.transmits(from) {
                    moved = true;
                    self.traffic.note(to, &message);
                    let replication = matches!(
                        message,
                        PriorityMessage::SnapshotPart { .. } | PriorityMessage::Commands { .. }
                    );
                    if replication && self.starved.contains(&to) {
                        continue;
                    }
                    if to < self.len() && self.up(to) && !self.cut.contains(&(from, to)) {
                        self.driver.receive(to, from, message);
                    }
                }
            }
            if !moved {
                return;
            }
        }
        panic!("the nodes kept talking for 100 rounds at t={}", self.now);
    }

    /// Moves the clock on without ticking anybody.
    pub(super) fn advance(&mut self, ms: Millis) {
        self.now += ms;
        self.driver.advance(ms);
        debug_assert_eq!(self.now, self.driver.now());
    }

    pub(super) fn step(&mut self) {
        self.advance(1);
        for i in 0..self.len() {
            if self.up(i) {
                self.driver.tick(i);
            }
        }
        for (from, to, why) in self.refusals.clone() {
            if self.up(from) && self.up(to) {
                self.call(from, |node, now| node.handle_link_refused(to, why, now));
            }
        }
        self.deliver();
    }

    pub(super) fn run(&mut self, ms: u64) {
        for _ in 0..ms {
            self.step();
        }
    }

    pub(super) fn actives(&self) -> Vec<NodeIndex> {
        (0..self.len())
            .filter(|&i| self.driver.is_up(i) && self.node(i).role() == NodeRole::Active)
            .collect()
    }

    pub(super) fn acquire(
        &mut self,
        i: NodeIndex,
        k: &str,
        lease: u64,
        handle: u64,
    ) -> AcquireOutcome {
        let outcome = self.call(i, |node, now| {
            node.handle_acquire(Acquire::plain(key(k), 0, lease), now, handle)
        });
        let outcome = outcome.unwrap();
        self.deliver();
        outcome
    }

    pub(super) fn grant(&mut self, i: NodeIndex, k: &str, lease: u64) -> Token {
        match self.acquire(i, k, lease, 0) {
            AcquireOutcome::Granted { token } => token,
            other => panic!("{k} not granted on node {i}: {other:?}"),
        }
    }

    pub(super) fn holder(&self, i: NodeIndex, k: &str) -> Option<Token> {
        self.node(i).table().holder(&key(k)).map(|h| h.token)
    }

    /// Keys and tokens of a node's table, sorted.
    pub(super) fn locks(&self, i: NodeIndex) -> Vec<(Key, Token)> {
        let mut locks: Vec<_> = self
            .node(i)
            .table()
            .iter()
            .map(|(k, h)| (k.clone(), h.token))
            .collect();
        locks.sort();
        locks
    }

    /// The events of node `i`'s inputs through the driver, not taken yet.
    pub(super) fn events(&mut self, i: NodeIndex) -> Vec<Event<u64>> {
        self.driver.take_events(i)
    }

    pub(super) fn moved(&mut self, i: NodeIndex) -> Vec<(u64, Option<NodeIndex>)> {
        self.events(i)
            .into_iter()
            .filter_map(|e| match e {
                Event::Moved { handle, to, .. } => Some((handle, to.serving)),
                _ => None,
            })
            .collect()
    }
}

impl Traffic {
    pub(super) fn note(&mut self, to: NodeIndex, message: &PriorityMessage) {
        let len = encoded_len(message);
        assert!(len <= MAX_MESSAGE_BYTES, "a message of {len} bytes");
        self.largest = self.largest.max(len);
        match message {
            PriorityMessage::SnapshotPart { part, .. } => {
                self.snapshot_pieces += 1;
                if part.piece == 0 {
                    self.snapshots[to] += 1;
                }
            }
            PriorityMessage::HandoffPart { .. } => self.handoff_pieces += 1,
            PriorityMessage::Commands { .. } => self.command_batches += 1,
            _ => {}
        }
    }
}

/// A three-node cluster run until node 0 serves and both standbys hold its
/// snapshot.
pub(super) fn elected(n: usize) -> Cluster {
    let mut c = Cluster::new(n);
    c.run(TIMEOUT + 2 * HEARTBEAT);
    assert_eq!(c.actives(), vec![0]);
    c
}
