//! What the server's unit tests share: a key from a literal, and a
//! connection's mailbox with the receiver its deliveries go to.

use baton_core::Key;
use tokio::sync::mpsc;

use crate::delivery::{Delivery, Mailbox};

/// `s` as a key; a test names only valid ones.
pub(crate) fn key(s: &str) -> Key {
    Key::new(s.as_bytes()).unwrap_or_else(|e| panic!("{e}"))
}

/// A mailbox, and the receiver that reads what is delivered to it.
pub(crate) fn mailbox() -> (Mailbox, mpsc::UnboundedReceiver<Delivery>) {
    let (tx, rx) = mpsc::unbounded_channel();
    (Mailbox(tx), rx)
}
