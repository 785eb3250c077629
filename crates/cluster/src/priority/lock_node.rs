//! The priority engine seen by the server: answers in client terms
//! (addresses, not node indexes) and waiter events for connections.

use baton_core::{AcquireOutcome, Event, Key, Millis, NotServing, Outcome, Token, WaiterId};
use baton_proto::{Mode, Role};
use baton_server::{LockNode, Mailbox, NodeEvent, NodeStatus, Served};

use super::engine::{NodeRole, PriorityNode};

#[derive(Debug)]
pub struct PriorityLockNode {
    engine: PriorityNode<Mailbox>,
    scratch: Vec<Event<Mailbox>>,
}

impl PriorityLockNode {
    pub fn new(engine: PriorityNode<Mailbox>) -> PriorityLockNode {
        PriorityLockNode {
            engine,
            scratch: Vec::new(),
        }
    }

    pub fn engine(&self) -> &PriorityNode<Mailbox> {
        &self.engine
    }

    pub fn engine_mut(&mut self) -> &mut PriorityNode<Mailbox> {
        &mut self.engine
    }

    /// Runs `f` on the engine and turns the events it made into the
    /// server's.
    pub fn drive<R>(
        &mut self,
        events: &mut Vec<NodeEvent>,
        f: impl FnOnce(&mut PriorityNode<Mailbox>, &mut Vec<Event<Mailbox>>) -> R,
    ) -> R {
        let result = f(&mut self.engine, &mut self.scratch);
        let peers = &self.engine.config().peers;
        events.extend(
            self.scratch
                .drain(..)
                .map(|event| NodeEvent::from_event(event, |i| peers.get(i).cloned())),
        );
        result
    }

    fn served<T>(&self, result: Result<T, NotServing>) -> Served<T> {
        match result {
            Ok(value) => Served::Done(value),
            Err(to) => Served::Redirect(
                to.serving
                    .and_then(|i| self.engine.config().peers.get(i).cloned()),
            ),
        }
    }
}

impl LockNode for PriorityLockNode {
    fn acquire(
        &mut self,
        key: Key,
        wait_ms: u64,
        lease_ms: u64,
        now: Millis,
        mailbox: &Mailbox,
        events: &mut Vec<NodeEvent>,
    ) -> Served<AcquireOutcome> {
        let result = self.drive(events, |engine, scratch| {
            engine.acquire(key, wait_ms, lease_ms, now, mailbox.clone(), scratch)
        });
        self.served(result)
    }

    fn release(
        &mut self,
        key: &Key,
        token: Token,
        now: Millis,
        _reply_to: Option<&Mailbox>,
        events: &mut Vec<NodeEvent>,
    ) -> Served<Outcome> {
        let result = self.drive(events, |engine, scratch| {
            engine.release(key, token, now, scratch)
        });
        self.served(result)
    }

    fn renew(
        &mut self,
        key: &Key,
        token: Token,
        lease_ms: u64,
        now: Millis,
        _reply_to: &Mailbox,
        events: &mut Vec<NodeEvent>,
    ) -> Served<Outcome> {
        let result = self.drive(events, |engine, scratch| {
            engine.renew(key, token, lease_ms, now, scratch)
        });
        self.served(result)
    }

    fn cancel(&mut self, id: WaiterId) {
        self.engine.cancel(id);
    }

    fn tick(&mut self, now: Millis, events: &mut Vec<NodeEvent>) {
        self.drive(events, |engine, scratch| engine.tick(now, scratch));
    }

    fn next_deadline(&self) -> Option<Millis> {
        Some(self.engine.next_deadline())
    }

    fn status(&self) -> NodeStatus {
        let engine = &self.engine;
        NodeStatus {
            role: match engine.role() {
                NodeRole::Active => Role::Active,
                NodeRole::Standby | NodeRole::HandingOff { .. } => Role::Standby,
            },
            mode: Mode::Priority,
            active: engine
                .redirect_target()
                .and_then(|i| engine.config().peers.get(i).cloned()),
            token: engine.table().last_token(),
            locks: engine.table().len() as u64,
            waiters: engine.waiter_count() as u64,
            extra: Vec::new(),
        }
    }

    fn has_output(&self) -> bool {
        self.engine.has_output()
    }
}
