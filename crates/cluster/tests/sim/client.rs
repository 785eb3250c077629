//! The simulated clients: each works on one key, sends its requests to the
//! node it believes active, follows redirects, holds, renews and releases.
//! A client only decides what to send and reads answers; the world carries
//! the requests to the engines.

use baton_cluster::priority::NodeIndex;
use baton_core::{AcquireOptions, HolderValue, Key, LockMode, Millis, Token, WaiterId};

use super::rng::Rng;

/// How the clients of a key use it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    /// One holder at a time, as in protocol 1.1.
    Plain,
    /// A semaphore of this many permits.
    Semaphore(u32),
    /// Readers-writer: shared or exclusive grants.
    ReadersWriter,
}

impl KeyKind {
    /// Whether `holders` grants of such a key, `shared` of them shared,
    /// may hold it at once.
    pub fn allows(self, holders: usize, shared: usize) -> bool {
        match self {
            KeyKind::Plain => holders <= 1 && shared == 0,
            KeyKind::Semaphore(n) => holders <= n as usize && shared == 0,
            KeyKind::ReadersWriter => shared == holders || holders <= 1,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    Acquire {
        wait_ms: u64,
        lease_ms: u64,
        shared: bool,
        valued: bool,
    },
    Release {
        token: Token,
    },
    Renew {
        token: Token,
        lease_ms: u64,
    },
    /// `V`: the holder sets its value.
    SetValue {
        token: Token,
    },
}

/// A node's answer to a client, in client terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// Not the active; go there (`None`: nobody known yet).
    Redirect(Option<NodeIndex>),
    Granted(Token),
    Queued(WaiterId),
    Released,
    Renewed,
    ValueSet,
    /// Release, renew or set-value of a grant the node does not have.
    NotFound,
    /// The connection broke (the node crashed).
    Gone,
}

/// A grant the client holds, with what the checks need to know about it.
#[derive(Debug, Clone)]
pub struct Held {
    pub token: Token,
    pub shared: bool,
    /// When the lease runs out by the client's reckoning.
    pub end: Millis,
    /// When it runs out on the nodes that hold it, if earlier than `end`
    /// (a renewal lost in a failover).
    pub cap: Millis,
    /// The nodes that answer for this grant: (node, activation). A custodian
    /// counts while it is still in that activation.
    pub custodians: Vec<(NodeIndex, u64)>,
    release_at: Millis,
    next_renew: Millis,
    /// When the holder sets its value (once).
    value_at: Millis,
    lease_ms: u64,
}

impl Held {
    pub fn valid_until(&self) -> Millis {
        self.end.min(self.cap)
    }
}

#[derive(Debug, Clone)]
pub enum State {
    Idle,
    /// Queued on `node`; gives up at `give_up_at` if nothing came.
    Waiting {
        node: NodeIndex,
        id: WaiterId,
        lease_ms: u64,
        shared: bool,
        give_up_at: Millis,
    },
    Holding(Held),
    /// Done with the lock; the release has yet to be acknowledged.
    Releasing {
        token: Token,
    },
}

#[derive(Debug)]
pub struct Client {
    pub key: Key,
    pub kind: KeyKind,
    pub believed: NodeIndex,
    /// Tells this client's answers from those of an abandoned request.
    pub serial: u64,
    pub state: State,
    /// Whether a request is out and unanswered (held by a paused node).
    pub busy: bool,
    next_action: Millis,
    pending: Option<Request>,
    nodes: usize,
}

impl Client {
    pub fn new(key: Key, kind: KeyKind, nodes: usize, rng: &mut Rng) -> Client {
        Client {
            key,
            kind,
            believed: rng.below(nodes),
            serial: 0,
            state: State::Idle,
            busy: false,
            next_action: rng.range(0, 100),
            pending: None,
            nodes,
        }
    }

    pub fn held(&self) -> Option<&Held> {
        match &self.state {
            State::Holding(held) => Some(held),
            _ => None,
        }
    }

    pub fn held_mut(&mut self) -> Option<&mut Held> {
        match &mut self.state {
            State::Holding(held) => Some(held),
            _ => None,
        }
    }

    /// The request to send now, and to which node.
    pub fn next_request(&mut self, now: Millis, rng: &mut Rng) -> Option<(NodeIndex, Request)> {
        if let State::Holding(held) = &self.state {
            if now >= held.end {
                // The lease ran out before the client acted: it knows it
                // lost the lock and stops using it.
                self.state = State::Idle;
            }
        }
        if self.busy || now < self.next_action {
            return None;
        }
        let request = match &mut self.state {
            State::Idle => {
                self.serial += 1;
                Request::Acquire {
                    wait_ms: rng.range(20, 300),
                    lease_ms: rng.range(60, 400),
                    shared: self.kind == KeyKind::ReadersWriter && rng.chance(0.6),
                    valued: rng.chance(0.3),
                }
            }
            // The world gives up on a wait (see `abandon`).
            State::Waiting { .. } => return None,
            State::Holding(held) => {
                if now >= held.release_at {
                    let token = held.token;
                    self.state = State::Releasing { token };
                    Request::Release { token }
                } else if now >= held.next_renew {
                    Request::Renew {
                        token: held.token,
                        lease_ms: held.lease_ms,
                    }
                } else if now >= held.value_at {
                    held.value_at = Millis::MAX;
                    Request::SetValue { token: held.token }
                } else {
                    return None;
                }
            }
            State::Releasing { token } => Request::Release { token: *token },
        };
        self.busy = true;
        self.pending = Some(request);
        Some((self.believed, request))
    }

    /// The answer to the request that was out.
    pub fn on_answer(&mut self, node: NodeIndex, answer: Answer, now: Millis, rng: &mut Rng) {
        let Some(request) = self.pending.take() else {
            return;
        };
        self.busy = false;
        match answer {
            Answer::Redirect(to) => {
                self.believed = to.unwrap_or_else(|| rng.below(self.nodes));
                if request_is_acquire(request) {
                    self.state = State::Idle;
                }
                self.next_action = now + if to.is_some() { 1 } else { 5 };
            }
            Answer::Gone => {
                self.believed = rng.below(self.nodes);
                if request_is_acquire(request) {
                    self.state = State::Idle;
                }
                self.next_action = now + 3;
            }
            Answer::Granted(token) => {
                if let Request::Acquire {
                    lease_ms, shared, ..
                } = request
                {
                    self.hold(token, lease_ms, shared, now, rng);
                }
            }
            Answer::Queued(id) => {
                if let Request::Acquire {
                    wait_ms,
                    lease_ms,
                    shared,
                    ..
                } = request
                {
                    self.state = State::Waiting {
                        node,
                        id,
                        lease_ms,
                        shared,
                        give_up_at: now + wait_ms + 1_000,
                    };
                }
            }
            // A value set, or one whose grant was lost: the lease says.
            Answer::ValueSet => {}
            Answer::NotFound if matches!(request, Request::SetValue { .. }) => {}
            Answer::Released | Answer::NotFound => self.rest(now, rng),
            Answer::Renewed => {
                if let (Request::Renew { lease_ms, .. }, Some(held)) = (request, self.held_mut()) {
                    held.end = now + lease_ms;
                    held.cap = Millis::MAX;
                    held.next_renew = now + lease_ms / 3 + rng.range(0, lease_ms / 3);
                }
            }
        }
    }

    /// A queued acquire of request `serial` on `node` was granted. False
    /// when the client no longer waits for it: the grant must be given back.
    pub fn waited_grant(
        &mut self,
        node: NodeIndex,
        serial: u64,
        token: Token,
        now: Millis,
        rng: &mut Rng,
    ) -> bool {
        let State::Waiting {
            node: n,
            lease_ms,
            shared,
            ..
        } = self.state
        else {
            return false;
        };
        if serial != self.serial || n != node {
            return false;
        }
        self.hold(token, lease_ms, shared, now, rng);
        true
    }

    /// A queued acquire ended without a grant: its wait ran out (`None`) or
    /// the node stopped serving and redirected it (`Some(to)`).
    pub fn wait_ended(
        &mut self,
        node: NodeIndex,
        serial: u64,
        moved: Option<Option<NodeIndex>>,
        now: Millis,
        rng: &mut Rng,
    ) {
        let waiting_here = matches!(self.state, State::Waiting { node: n, .. } if n == node);
        if serial != self.serial || !waiting_here {
            return;
        }
        match moved {
            Some(to) => {
                self.believed = to.unwrap_or_else(|| rng.below(self.nodes));
                self.state = State::Idle;
                self.next_action = now + 1;
            }
            None => self.rest(now, rng),
        }
    }

    /// The world gives up on a wait that outlived its limit (the node went
    /// away): returns the waiter to cancel.
    pub fn abandon(&mut self, now: Millis, rng: &mut Rng) -> Option<(NodeIndex, WaiterId)> {
        let State::Waiting {
            node,
            id,
            give_up_at,
            ..
        } = self.state
        else {
            return None;
        };
        if now < give_up_at {
            return None;
        }
        self.state = State::Idle;
        self.believed = rng.below(self.nodes);
        Some((node, id))
    }

    fn hold(&mut self, token: Token, lease_ms: u64, shared: bool, now: Millis, rng: &mut Rng) {
        // Some holders let the lease lapse, most release in time, some hold
        // past the first lease by renewing; some set a value on the way.
        let hold_for = rng.range(1, lease_ms * 2);
        self.state = State::Holding(Held {
            token,
            shared,
            value_at: if rng.chance(0.3) {
                now + rng.range(0, hold_for)
            } else {
                Millis::MAX
            },
            end: now + lease_ms,
            cap: Millis::MAX,
            custodians: Vec::new(),
            release_at: now + hold_for,
            next_renew: if rng.chance(0.2) {
                Millis::MAX
            } else {
                now + lease_ms / 3 + rng.range(0, lease_ms / 3)
            },
            lease_ms,
        });
    }

    fn rest(&mut self, now: Millis, rng: &mut Rng) {
        self.state = State::Idle;
        self.next_action = now + rng.range(0, 50);
    }
}

fn request_is_acquire(request: Request) -> bool {
    matches!(request, Request::Acquire { .. })
}

/// What an acquire of a key of `kind` asks for.
pub fn options(kind: KeyKind, shared: bool, valued: bool, serial: u64) -> AcquireOptions {
    AcquireOptions {
        permits: match kind {
            KeyKind::Semaphore(n) => n,
            _ => 1,
        },
        mode: if shared {
            LockMode::Shared
        } else {
            LockMode::Exclusive
        },
        value: valued.then(|| value(serial)),
    }
}

/// A holder's value.
pub fn value(serial: u64) -> HolderValue {
    HolderValue::new(format!("v{serial}").as_bytes()).unwrap_or_else(|e| panic!("{e}"))
}
