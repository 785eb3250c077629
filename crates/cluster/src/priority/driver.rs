//! One driver of priority engines, shared by the unit tests (the hand-driven
//! cluster in `tests`) and the simulation (`tests/sim`): engines on one
//! simulated clock, each with its own clock offset, that can be crashed
//! and started again. Every input goes through [`Driver::call`], which runs
//! it at the node's clock, collects the events it made, and checks the
//! node's invariants; the networks (instant or simulated) are the callers'.
//!
//! Built for tests only (`cfg(test)` or the `test-support` feature).

use baton_core::{Event, Millis};

use super::engine::{Broken, PriorityNode};
use super::messages::{NodeIndex, PriorityMessage};

/// Engines on one clock.
#[derive(Debug)]
pub struct Driver<H> {
    nodes: Vec<Slot<H>>,
    now: Millis,
}

#[derive(Debug)]
struct Slot<H> {
    /// None while the node is down.
    engine: Option<PriorityNode<H>>,
    /// This incarnation's clock reads the driver's time plus this.
    offset: Millis,
    /// Events of its inputs through the driver, not taken yet.
    events: Vec<Event<H>>,
}

impl<H> Driver<H> {
    /// `nodes` nodes, all down, at time 0.
    pub fn new(nodes: usize) -> Driver<H> {
        Driver {
            nodes: (0..nodes)
                .map(|_| Slot {
                    engine: None,
                    offset: 0,
                    events: Vec::new(),
                })
                .collect(),
            now: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The driver's time.
    pub fn now(&self) -> Millis {
        self.now
    }

    /// Moves the driver's clock on by `ms`.
    pub fn advance(&mut self, ms: Millis) {
        self.now = self.now.saturating_add(ms);
    }

    /// Node `i`'s clock.
    pub fn local(&self, i: NodeIndex) -> Millis {
        self.now.saturating_add(self.nodes[i].offset)
    }

    /// Starts node `i` with `engine`, whose clock runs `offset` ahead of
    /// the driver's.
    pub fn start(&mut self, i: NodeIndex, engine: PriorityNode<H>, offset: Millis) {
        let slot = &mut self.nodes[i];
        slot.engine = Some(engine);
        slot.offset = offset;
        slot.events.clear();
    }

    /// Node `i` is gone, with everything it had.
    pub fn crash(&mut self, i: NodeIndex) {
        let slot = &mut self.nodes[i];
        slot.engine = None;
        slot.events.clear();
    }

    pub fn is_up(&self, i: NodeIndex) -> bool {
        self.nodes.get(i).is_some_and(|s| s.engine.is_some())
    }

    pub fn engine(&self, i: NodeIndex) -> Option<&PriorityNode<H>> {
        self.nodes.get(i)?.engine.as_ref()
    }

    /// Direct access, for tests that look at one call's exact output: the
    /// events of calls made this way stay in the engine (`poll_event`).
    pub fn engine_mut(&mut self, i: NodeIndex) -> Option<&mut PriorityNode<H>> {
        self.nodes.get_mut(i)?.engine.as_mut()
    }

    /// Runs `f` on node `i` at its clock, keeps the events it made, and
    /// (in debug builds) checks the node's invariants. None if it is down.
    pub fn call<R>(
        &mut self,
        i: NodeIndex,
        f: impl FnOnce(&mut PriorityNode<H>, Millis) -> R,
    ) -> Option<R> {
        let local = self.local(i);
        let slot = &mut self.nodes[i];
        let engine = slot.engine.as_mut()?;
        let result = f(engine, local);
        while let Some(event) = engine.poll_event() {
            slot.events.push(event);
        }
        if cfg!(debug_assertions) {
            if let Err(broken) = engine.validate() {
                panic!("node {i} at t={local}: {broken}");
            }
        }
        Some(result)
    }

    /// Node `i`'s timer fired.
    pub fn tick(&mut self, i: NodeIndex) {
        self.call(i, |engine, now| engine.handle_tick(now));
    }

    /// Whether node `i`'s timer is due.
    pub fn tick_due(&self, i: NodeIndex) -> bool {
        self.engine(i)
            .is_some_and(|engine| self.local(i) >= engine.poll_timeout())
    }

    /// Node `i` receives `message` from `from`.
    pub fn receive(&mut self, i: NodeIndex, from: NodeIndex, message: PriorityMessage) {
        self.call(i, |engine, now| engine.handle_message(from, message, now));
    }

    /// Node `i`'s link to `peer` broke.
    pub fn link_down(&mut self, i: NodeIndex, peer: NodeIndex) {
        self.call(i, |engine, _| engine.handle_link_down(peer));
    }

    /// Node `i` begins a graceful stop's handoff: whether it found a
    /// successor (None if it is down).
    pub fn begin_handoff(&mut self, i: NodeIndex) -> Option<bool> {
        self.call(i, |engine, now| engine.handle_begin_handoff(now))
    }

    /// What node `i` has for its peers, in order (nothing if it is down).
    pub fn transmits(&mut self, i: NodeIndex) -> Vec<(NodeIndex, PriorityMessage)> {
        self.call(i, |engine, _| engine.poll_transmits())
            .unwrap_or_default()
    }

    /// The events of node `i`'s inputs through the driver since the last
    /// call of this.
    pub fn take_events(&mut self, i: NodeIndex) -> Vec<Event<H>> {
        std::mem::take(&mut self.nodes[i].events)
    }

    /// Every running node's invariants (see [`PriorityNode::validate`]).
    pub fn validate(&self) -> Result<(), (NodeIndex, Broken)> {
        for (i, slot) in self.nodes.iter().enumerate() {
            if let Some(engine) = &slot.engine {
                engine.validate().map_err(|broken| (i, broken))?;
            }
        }
        Ok(())
    }
}
