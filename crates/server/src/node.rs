//! What the server asks of a node's lock logic, whatever the mode.
//!
//! A single node serves every request. A cluster node serves only while it
//! is the active node or the leader, and otherwise redirects; the cluster
//! crate implements [`LockNode`] over its engines.
//!
//! Every input reaches a node through [`SharedLocks`](crate::SharedLocks),
//! one call at a time, with `now` from the node's one
//! [`Clock`](crate::Clock); a call never awaits and does no I/O, pushes
//! what it has for other connections to `events`, and leaves
//! [`LockNode::next_deadline`] and [`LockNode::has_output`] true of its
//! state. The full call protocol (who calls what, and when) is in
//! docs/architecture.md, "The call protocol".

use baton_core::{
    Change, Event, Key, LockTable, Millis, NodeIndex, NotServing, Outcome, Quota, Token, WaiterId,
    WatchId,
};
use baton_proto::{Mode, Op, Response, Role};

use crate::delivery::Mailbox;
use crate::inspect::{list_page, LockPage, LockQuery, Member};
use crate::request::{change_response, Answer, Incoming, LockRequest};

/// A node's events, made under the server's lock and delivered after it
/// is dropped.
pub type Events = Vec<NodeEvent>;

/// The answer of a node that may not be the one serving.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Served<T> {
    Done(T),
    /// Not the serving node: the client should go to this address (`None`
    /// while no serving node is known).
    Redirect(Option<String>),
    /// The answer comes later, as a [`NodeEvent::Reply`] to the request's
    /// mailbox (a Raft leader answers once the change is committed).
    Later,
}

/// How a queued acquire ends, told to its connection.
#[derive(Debug)]
pub enum NodeEvent {
    Granted {
        id: WaiterId,
        mailbox: Mailbox,
        key: Key,
        token: Token,
    },
    TimedOut {
        id: WaiterId,
        mailbox: Mailbox,
        key: Key,
    },
    /// The node stopped serving while the acquire waited: the client
    /// should send it again to `to`.
    Moved {
        id: WaiterId,
        mailbox: Mailbox,
        key: Key,
        to: Option<String>,
    },
    /// The answer to a request that was answered [`Served::Later`].
    Reply {
        mailbox: Mailbox,
        response: Response,
    },
    /// The answer to a watch that was pending ([`Answer::Watching`]):
    /// `W ...`, or `M W ...` from a node that stopped serving.
    ///
    /// [`Answer::Watching`]: crate::request::Answer::Watching
    WatchAnswered {
        id: WatchId,
        mailbox: Mailbox,
        response: Response,
    },
}

impl NodeEvent {
    /// The server's form of an engine's event: `addr` names a node of the
    /// cluster by its index in the peer list (a single node has none).
    pub fn from_event(
        event: Event<Mailbox>,
        addr: impl Fn(NodeIndex) -> Option<String>,
    ) -> NodeEvent {
        let redirect = |to: NotServing| to.serving.and_then(&addr);
        match event {
            Event::Granted {
                id,
                handle,
                key,
                token,
            } => NodeEvent::Granted {
                id,
                mailbox: handle,
                key,
                token,
            },
            Event::TimedOut { id, handle, key } => NodeEvent::TimedOut {
                id,
                mailbox: handle,
                key,
            },
            Event::Moved {
                id,
                handle,
                key,
                to,
            } => NodeEvent::Moved {
                id,
                mailbox: handle,
                key,
                to: redirect(to),
            },
            Event::Answered {
                handle,
                key,
                change,
                answer,
            } => NodeEvent::Reply {
                mailbox: handle,
                response: late_response(key, change, answer.map_err(redirect)),
            },
        }
    }
}

impl From<Event<Mailbox>> for NodeEvent {
    /// A single node's event: it names no other node.
    fn from(event: Event<Mailbox>) -> NodeEvent {
        NodeEvent::from_event(event, |_| None)
    }
}

/// The wire answer to a release or renewal answered late.
fn late_response(key: Key, change: Change, answer: Result<Outcome, Option<String>>) -> Response {
    let op = match change {
        Change::Release => Op::Release,
        Change::Renew => Op::Renew,
        Change::SetValue => Op::SetValue,
    };
    match answer {
        Ok(outcome) => change_response(op, key, outcome),
        Err(addr) => Response::Moved { op, key, addr },
    }
}

/// The node's view of itself that `S` reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeStatus {
    pub role: Role,
    pub mode: Mode,
    pub active: Option<String>,
    pub token: Token,
    pub locks: u64,
    pub waiters: u64,
    pub extra: Vec<(String, String)>,
}

impl NodeStatus {
    /// A node's status in `role` and `mode` over `table`, with `waiters`
    /// queued: the token shown is the table's last (the last issued, or
    /// the floor the next is above), the locks its grants. No serving
    /// node named, no extra field.
    pub fn of_table(role: Role, mode: Mode, table: &LockTable, waiters: usize) -> NodeStatus {
        NodeStatus {
            role,
            mode,
            active: None,
            token: table.last_token(),
            locks: table.len() as u64,
            waiters: waiters as u64,
            extra: Vec::new(),
        }
    }
}

/// The lock logic of a node. Every method runs under the server's mutex:
/// keep them short and free of I/O (see the call protocol above).
pub trait LockNode: Send + 'static {
    /// A client's request ([`Incoming`]), answered now, redirected, or
    /// answered later to its `reply_to`.
    fn handle(&mut self, incoming: Incoming<'_>, events: &mut Events) -> Served<Answer>;
    /// Releases a grant whose connection was gone before it could be
    /// written (a ghost grant): a release whose answer nobody hears, and
    /// a node that no longer serves has nothing to release.
    fn release_unreceived(&mut self, key: &Key, token: Token, now: Millis, events: &mut Events) {
        let request = LockRequest::Release { key, token };
        let reply_to = &Mailbox::closed();
        let _ = self.handle(
            Incoming {
                request,
                now,
                reply_to,
            },
            events,
        );
    }
    /// A queued acquire's connection closed.
    fn cancel(&mut self, id: WaiterId);
    /// A pending watch's connection closed. A node that keeps no watches
    /// has none to cancel.
    fn cancel_watch(&mut self, _id: WatchId) {}
    /// Does whatever is due at `now`.
    fn tick(&mut self, now: Millis, events: &mut Events);
    /// When `tick` next has something to do.
    fn next_deadline(&self) -> Option<Millis>;
    fn status(&self) -> NodeStatus;
    /// The caps on grants held and acquires queued (`--max-locks`,
    /// `--max-waiters`); an acquire past them is refused.
    fn set_quota(&mut self, quota: Quota);
    /// The lock table while this node serves it, or where to go instead
    /// (`None` while no serving node is known).
    fn served_table(&self) -> Result<&LockTable, Option<String>>;
    /// How many acquires wait for `key`.
    fn waiters_on(&self, key: &Key, now: Millis) -> u64;
    /// Whether the node has something for its peers (a cluster shell
    /// waits for this to send replication and heartbeats).
    fn has_output(&self) -> bool {
        false
    }
    /// What only the engine can count, for the node's metrics (read by a
    /// scrape under the mutex). By default nothing is known.
    fn counters(&self) -> NodeCounters {
        NodeCounters::default()
    }
    /// A page of the held locks (the HTTP endpoint's `/v1/locks`); a node
    /// that does not serve redirects. One pass over the table: see
    /// [`crate::inspect`].
    fn list_locks(&self, query: &LockQuery, now: Millis) -> Served<LockPage> {
        match self.served_table() {
            Ok(table) => Served::Done(list_page(
                table,
                |key| self.waiters_on(key, now),
                query,
                now,
            )),
            Err(to) => Served::Redirect(to),
        }
    }
    /// The cluster's members as this node knows them (none for a single node).
    fn members(&self, _now: Millis) -> Vec<Member> {
        Vec::new()
    }
    /// Why this node cannot do its job although its role looks fine (a
    /// Raft follower that no longer hears its leader), for the HTTP
    /// endpoint's `/health`. By default nothing.
    fn health_issue(&self, _now: Millis) -> Option<String> {
        None
    }
}

/// One read of a node for the HTTP endpoint (see [`SharedLocks::observe`](crate::SharedLocks::observe)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    pub status: NodeStatus,
    pub counters: NodeCounters,
    pub members: Vec<Member>,
    /// See [`LockNode::health_issue`].
    pub health_issue: Option<String>,
    /// On the serving node, how long ago the earliest lease still held
    /// ended (0 when none has): leases the node has not expired yet, its
    /// expiry backlog. `None` on a node that does not serve.
    pub expiry_overdue_ms: Option<Millis>,
}

/// Counts and positions only the engine knows (see [`LockNode::counters`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeCounters {
    /// Grants whose lease ran out, since the node started.
    pub expiries: u64,
    /// Times this node's role changed (took over, stepped down, handed off).
    pub role_changes: u64,
    /// Raft: the last log index known committed, and the last applied.
    pub commit_index: Option<u64>,
    pub applied_index: Option<u64>,
    /// Priority: graceful handoffs of the active role this node gave (a
    /// successor took them up) and took, since it started.
    pub handoffs_given: Option<u64>,
    pub handoffs_taken: Option<u64>,
}
