//! What every engine (the single node's service, the priority engine, the
//! Raft engine) tells its caller about requests it did not answer at once,
//! and how a node that does not serve says so. One vocabulary for all
//! modes, in the core's terms: tokens and outcomes, never wire lines, and
//! nodes by their index in the cluster's peer list, never addresses.

use crate::table::Outcome;
use crate::waiters::WaiterId;
use crate::{Key, Token};

/// A node of a cluster: its place in the peer list (0 first).
pub type NodeIndex = usize;

/// This node does not serve; the client should go to `serving`, the node
/// that does, if one is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotServing {
    pub serving: Option<NodeIndex>,
}

impl NotServing {
    /// Not serving, and the node that does is `serving` (if known).
    pub fn redirect(serving: Option<NodeIndex>) -> NotServing {
        NotServing { serving }
    }
}

/// The change a late answer is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Release,
    Renew,
    /// A holder's value set or cleared (`V`).
    SetValue,
}

/// How a queued acquire or a request answered later ended. `handle` is the
/// caller's, given with the request; no engine looks inside it.
#[derive(Debug)]
pub enum Event<H> {
    /// A queued waiter got the key (on release, expiry, or a timed-out/cancelled holder chain).
    Granted {
        id: WaiterId,
        handle: H,
        key: Key,
        token: Token,
    },
    /// A queued waiter's wait ran out; it left the queue and was granted nothing.
    TimedOut { id: WaiterId, handle: H, key: Key },
    /// The node stopped serving while the acquire waited: the client should
    /// send it again to the serving node.
    Moved {
        id: WaiterId,
        handle: H,
        key: Key,
        to: NotServing,
    },
    /// The late answer to a release, renewal or value (a Raft leader answers once
    /// its change is committed): the table's outcome, or where to go.
    Answered {
        handle: H,
        key: Key,
        change: Change,
        answer: Result<Outcome, NotServing>,
    },
}
