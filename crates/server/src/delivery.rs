//! How a key reaches a waiter that sits on another connection.
//!
//! A release, an expiry or a timeout happens on whatever task noticed it;
//! the waiter's own connection task writes the answer. The handle kept in
//! the wait queue is that connection's mailbox.

use baton_core::{Key, Token, WaiterId};
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
}

/// The wait-queue handle of a queued acquire: its connection's mailbox.
#[derive(Debug, Clone)]
pub struct Mailbox(pub(crate) mpsc::UnboundedSender<Delivery>);

impl Mailbox {
    /// Hands `delivery` to the connection; gives it back if the connection
    /// is gone, so that a grant can be released (a ghost grant).
    pub(crate) fn send(&self, delivery: Delivery) -> Result<(), Delivery> {
        self.0.send(delivery).map_err(|e| e.0)
    }
}
