//! The priority engine seen by the server: answers in client terms
//! (addresses, not node indexes) and waiter events for connections.
//!
//! Every call is made with the server's mutex held, never across an
//! `.await`; which task calls which input (connections, the timer, the
//! link tasks, the pump, a graceful stop, the persister) is the call
//! protocol in docs/architecture.md, "Cluster modes".

use baton_core::{Key, KeyState, LockTable, Millis, NotServing, Quota, WaiterId, WatchId};
use baton_proto::{Mode, Role};
use baton_server::{
    earliest, Answer, Events, Incoming, LockNode, LockRequest, Mailbox, NodeEvent, NodeStatus,
    NodeWatches, Served,
};
use tokio::sync::watch;

use super::engine::{LinkRefused, NodeRole, PersistedState, PriorityNode};
use super::messages::{NodeIndex, PriorityMessage};

/// What a graceful stop waits on: the role, whether a handoff was taken,
/// and (while a stop is under way) what it can do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoleView {
    pub role: NodeRole,
    pub handed_off_to: Option<NodeIndex>,
    /// While stopping: the successor a handoff would go to now.
    pub successor: Option<NodeIndex>,
    /// While stopping: whether any peer was heard within a failure timeout.
    pub live_peer: bool,
}

/// Where a graceful stop's handoff stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandoffStep {
    Done(NodeIndex),
    /// Not active (any more): nothing of ours to hand over.
    NothingToHand,
    /// A handoff is on its way, or a live peer refused a moment ago and
    /// the role is offered again at the next step.
    Waiting,
    NoSuccessor,
}

#[derive(Debug)]
pub struct PriorityLockNode {
    engine: PriorityNode<Mailbox>,
    /// Fed after every input, so a graceful stop waits for a change
    /// instead of polling.
    role: watch::Sender<RoleView>,
    /// The view last sent on `role`: compared here, the watch (and its
    /// lock) is touched only when the view changes, not after every
    /// request (it showed in the active's profile).
    view: RoleView,
    /// A graceful stop is under way: the view also carries its prospects.
    stopping: bool,
    /// Changes of role, for the metrics.
    role_changes: u64,
    /// The watches (`W`) of this node while it is the active; answered
    /// `M W` when it stops serving.
    watches: NodeWatches,
}

impl PriorityLockNode {
    pub fn new(engine: PriorityNode<Mailbox>) -> PriorityLockNode {
        let view = RoleView {
            role: engine.role(),
            handed_off_to: engine.handed_off_to(),
            successor: None,
            live_peer: false,
        };
        PriorityLockNode {
            engine,
            role: watch::channel(view).0,
            view,
            stopping: false,
            role_changes: 0,
            watches: NodeWatches::default(),
        }
    }

    pub fn engine(&self) -> &PriorityNode<Mailbox> {
        &self.engine
    }

    /// A receiver of the role view, changed whenever an input changed it.
    pub fn watch_role(&self) -> watch::Receiver<RoleView> {
        self.role.subscribe()
    }

    /// Messages one inbound link brought from peer `from`, in order.
    pub fn receive(
        &mut self,
        from: NodeIndex,
        messages: Vec<PriorityMessage>,
        now: Millis,
        events: &mut Events,
    ) {
        for message in messages {
            self.engine.handle_message(from, message, now);
        }
        self.after_input(now, events);
    }

    /// Bytes came in on peer `from`'s link, not yet a whole message.
    pub fn link_progress(&mut self, from: NodeIndex, now: Millis, events: &mut Events) {
        self.engine.handle_link_progress(from, now);
        self.after_input(now, events);
    }

    /// The link this node dialled to `peer` broke: what was on it may be
    /// lost.
    pub fn link_down(&mut self, peer: NodeIndex, now: Millis) {
        self.engine.handle_link_down(peer);
        self.after_input(now, &mut Vec::new());
    }

    /// Dialling `peer`, the shell met a refusal `why`: the peer answers
    /// but will not link with this node.
    pub fn link_refused(&mut self, peer: NodeIndex, why: LinkRefused, now: Millis) {
        self.engine.handle_link_refused(peer, why, now);
        self.after_input(now, &mut Vec::new());
    }

    /// Dialling `peer`, the shell found nobody listening there.
    pub fn nobody_listening(&mut self, peer: NodeIndex, now: Millis) {
        self.engine.handle_nobody_listening(peer);
        self.after_input(now, &mut Vec::new());
    }

    /// Everything for the peers, in order: (addressee, message).
    pub fn take_transmits(&mut self) -> Vec<(NodeIndex, PriorityMessage)> {
        self.engine.poll_transmits()
    }

    /// Node `index`'s client address (for the log).
    pub fn peer_addr(&self, index: NodeIndex) -> String {
        self.engine.addr(index).to_string()
    }

    /// One step of a graceful stop: hands the active role to a live peer
    /// if it can, and says where the stop stands. From the first call on,
    /// the role view carries the stop's prospects (see [`RoleView`]).
    pub fn handoff_step(&mut self, now: Millis, events: &mut Events) -> HandoffStep {
        self.stopping = true;
        let step = if let Some(successor) = self.engine.handed_off_to() {
            HandoffStep::Done(successor)
        } else {
            match self.engine.role() {
                NodeRole::Standby => HandoffStep::NothingToHand,
                NodeRole::HandingOff { .. } => HandoffStep::Waiting,
                NodeRole::Active if self.engine.handle_begin_handoff(now) => HandoffStep::Waiting,
                // A live peer refused a moment ago: offer again.
                NodeRole::Active if self.engine.has_live_peer(now) => HandoffStep::Waiting,
                NodeRole::Active => HandoffStep::NoSuccessor,
            }
        };
        self.after_input(now, events);
        step
    }

    /// The state to write if it changed since `written` (see
    /// [`PriorityNode::state_to_persist`]).
    pub fn state_to_persist(&self, written: u64, now: Millis) -> Option<(u64, PersistedState)> {
        self.engine.state_to_persist(written, now)
    }

    /// After every input: the engine's events become the server's, and the
    /// role view is brought up to date (waking a graceful stop if it
    /// changed).
    fn after_input(&mut self, now: Millis, events: &mut Events) {
        while let Some(event) = self.engine.poll_event() {
            let peers = &self.engine.config().peers;
            events.push(NodeEvent::from_event(event, |i| peers.get(i).cloned()));
        }
        self.answer_watches(now, events);
        let stopping = self.stopping;
        let view = RoleView {
            role: self.engine.role(),
            handed_off_to: self.engine.handed_off_to(),
            // Only a stop waits on these two; worked out only then.
            successor: if stopping {
                self.engine.successor(now)
            } else {
                None
            },
            live_peer: stopping && self.engine.has_live_peer(now),
        };
        if view == self.view {
            return;
        }
        if view.role != self.view.role {
            self.role_changes += 1;
        }
        self.view = view;
        self.role.send_replace(view);
    }

    /// Answers the watches of the keys that changed; a node that no
    /// longer serves answers all its watches `M W <key> <active|->`.
    fn answer_watches(&mut self, now: Millis, events: &mut Events) {
        let changed = self.engine.drain_changed_keys();
        if self.watches.is_empty() {
            return;
        }
        if self.engine.role() != NodeRole::Active {
            let to = self.address(self.engine.redirect_target());
            return self.watches.redirect_all(to, events);
        }
        let engine = &self.engine;
        let state = |key: &Key| {
            engine
                .key_state(key, now)
                .unwrap_or_else(|| KeyState::plain(None, 0))
        };
        self.watches.after_changes(changed, state, events);
    }

    fn served<T>(&self, result: Result<T, NotServing>) -> Served<T> {
        match result {
            Ok(value) => Served::Done(value),
            Err(to) => Served::Redirect(self.address(to.serving)),
        }
    }

    /// The address of peer `index`.
    fn address(&self, index: Option<NodeIndex>) -> Option<String> {
        index.and_then(|i| self.engine.config().peers.get(i).cloned())
    }
}

impl LockNode for PriorityLockNode {
    fn handle(&mut self, incoming: Incoming<'_>, events: &mut Events) -> Served<Answer> {
        let (now, reply_to) = (incoming.now, incoming.reply_to);
        let engine = &mut self.engine;
        let result = match incoming.request {
            LockRequest::Acquire(acquire) => engine
                .handle_acquire(acquire.to_acquire(), now, reply_to.clone())
                .map(Answer::Acquired),
            LockRequest::SetValue { key, token, value } => engine
                .handle_set_value(key, token, value.cloned(), now)
                .map(Answer::Changed),
            LockRequest::Watch { key, wait_ms, seen } => engine
                .handle_query(key, now)
                .map(|state| self.watches.watch(key, wait_ms, seen, state, now, reply_to)),
            LockRequest::Release { key, token } => {
                engine.handle_release(key, token, now).map(Answer::Changed)
            }
            LockRequest::Renew {
                key,
                token,
                lease_ms,
            } => engine
                .handle_renew(key, token, lease_ms, now)
                .map(Answer::Changed),
            LockRequest::Query { key } => engine.handle_query(key, now).map(Answer::Queried),
        };
        self.after_input(now, events);
        self.served(result)
    }

    fn cancel(&mut self, id: WaiterId) {
        self.engine.handle_cancel(id);
    }

    fn cancel_watch(&mut self, id: WatchId) {
        self.watches.cancel(id);
    }

    fn tick(&mut self, now: Millis, events: &mut Events) {
        self.engine.handle_tick(now);
        self.after_input(now, events);
        let engine = &self.engine;
        let state = |key: &Key| {
            engine
                .key_state(key, now)
                .unwrap_or_else(|| KeyState::plain(None, 0))
        };
        self.watches.tick(now, state, events);
    }

    fn next_deadline(&self) -> Option<Millis> {
        earliest(
            Some(self.engine.poll_timeout()),
            self.watches.next_deadline(),
        )
    }

    fn set_quota(&mut self, quota: Quota) {
        self.engine.set_quota(quota);
        self.watches.set_max(quota.max_watches);
    }

    fn status(&self) -> NodeStatus {
        let engine = &self.engine;
        let role = match engine.role() {
            NodeRole::Active => Role::Active,
            NodeRole::Standby | NodeRole::HandingOff { .. } => Role::Standby,
        };
        let (table, waiters) = (engine.table(), engine.waiter_count());
        NodeStatus {
            active: self.address(engine.redirect_target()),
            ..NodeStatus::of_table(role, Mode::Priority, table, waiters)
        }
    }

    fn has_output(&self) -> bool {
        self.engine.has_transmits()
    }

    fn served_table(&self) -> Result<&LockTable, Option<String>> {
        match self.engine.role() {
            NodeRole::Active => Ok(self.engine.table()),
            _ => Err(self.address(self.engine.redirect_target())),
        }
    }

    fn waiters_on(&self, key: &Key, now: Millis) -> u64 {
        self.engine.key_waiters(key, now)
    }

    fn counters(&self) -> baton_server::NodeCounters {
        baton_server::NodeCounters {
            expiries: self.engine.expiries(),
            role_changes: self.role_changes,
            handoffs_given: Some(self.engine.handoffs().given),
            handoffs_taken: Some(self.engine.handoffs().taken),
            ..Default::default()
        }
    }

    fn members(&self, now: Millis) -> Vec<baton_server::inspect::Member> {
        super::inspect::members(&self.engine, now)
    }

    /// Peers answer but refuse the link, and this node may not serve.
    fn health_issue(&self, now: Millis) -> Option<String> {
        self.engine.barred_reason(now)
    }
}
