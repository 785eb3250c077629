//! How a key reaches a waiter that sits on another connection.
//!
//! A release, an expiry or a timeout happens on whatever task noticed it;
//! the waiter's own connection task writes the answer. The handle kept in
//! the wait queue is that connection's mailbox.

use baton_core::{Key, Token, WaiterId, WatchId};
use tokio::sync::mpsc;

/// What a connection is told about one of its queued acquires.
#[derive(Debug)]
pub(crate) enum Delivery {
    Granted {
        id: WaiterId,
        key: Key,
        token: Token,
    },
    TimedOut {
        id: WaiterId,
        key: Key,
    },
    Moved {
        id: WaiterId,
        key: Key,
        to: Option<String>,
    },
    /// The late answer to a request the node answered `Served::Later`.
    Reply(baton_proto::Response),
    /// The answer to a pending watch.
    Watched {
        id: WatchId,
        response: baton_proto::Response,
    },
    /// The late answer to a failed `U`, which held the connection's input
    /// until now (see `auth::session`).
    Resume(baton_proto::Response),
}

/// The wait-queue handle of a queued acquire: its connection's mailbox.
///
/// The channel has no capacity of its own, yet its length is bounded by
/// construction: a delivery is only ever the one answer to one request of
/// the connection that still waits for it (a queued acquire's grant,
/// time-out or move, the answer to a pending watch, or a late answer to a
/// request served `Later`), so at any moment it holds at most `waiting +
/// watching + deferred` of them; a connection's watches are capped by
/// `--max-watches-per-connection`. A connection
/// answers `E` to an acquire past `max_pending` waiting and deferred
/// requests, and stops reading while `max_pending` requests are deferred,
/// so that sum stays below `max_pending` plus one read's worth of requests.
/// The connection debug-asserts the bound each time it takes deliveries.
/// A bounded channel would instead have to drop or block on a grant made
/// under the node's mutex.
#[derive(Debug, Clone)]
pub struct Mailbox(pub(crate) mpsc::UnboundedSender<Delivery>);

impl Mailbox {
    /// A mailbox whose connection is already gone (whatever is sent to it
    /// comes back): where a ghost grant's release is answered, and what a
    /// node's unit tests hand it as a client's.
    pub fn closed() -> Mailbox {
        Mailbox(mpsc::unbounded_channel().0)
    }

    /// Hands `delivery` to the connection; gives it back if the connection
    /// is gone, so that a grant can be released (a ghost grant).
    pub(crate) fn send(&self, delivery: Delivery) -> Result<(), Delivery> {
        self.0.send(delivery).map_err(|e| e.0)
    }
}
