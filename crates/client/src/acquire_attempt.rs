//! One acquire's state across its attempts (failover, redirects), and the
//! wait it has left.

use std::sync::Arc;
use std::time::Duration;

use baton_core::Key;
use tokio::time::Instant;

use crate::duration::ceil_ms;
use crate::error::{Error, Result};
use crate::slot::Slot;

/// One acquire's progress across its attempts: what failover and redirects
/// carry from one attempt to the next.
#[derive(Debug)]
pub(crate) struct AcquireAttempt {
    pub key: Key,
    pub lease_ms: u64,
    /// When the wait runs out; `None` for a wait of zero (the node's maximum).
    pub deadline: Option<Instant>,
    /// Attempts that found no usable connection or whose connection broke.
    pub failures: usize,
    /// Redirects followed so far, for `Client::follow`.
    pub hops: u32,
    /// Where the last `M addr` pointed, to be tried next.
    pub redirect: Option<Arc<Slot>>,
}

impl AcquireAttempt {
    pub(crate) fn new(key: Key, wait: Duration, lease_ms: u64) -> AcquireAttempt {
        AcquireAttempt {
            key,
            lease_ms,
            deadline: (ceil_ms(wait) > 0).then(|| Instant::now() + wait),
            failures: 0,
            hops: 0,
            redirect: None,
        }
    }

    /// The wait left to ask the node for, in ms (0: its maximum), or
    /// [`Error::TimedOut`] once the wait has run out.
    pub(crate) fn wait_left_ms(&self) -> Result<u64> {
        let Some(deadline) = self.deadline else {
            return Ok(0);
        };
        match deadline.checked_duration_since(Instant::now()) {
            Some(left) if !left.is_zero() => Ok(ceil_ms(left)),
            _ => Err(Error::TimedOut {
                key: self.key.clone(),
            }),
        }
    }
}
