//! One acquire's state across its attempts (failover, redirects), the wait
//! it has left, and what to report when no node gave a verdict in time.

use std::sync::Arc;
use std::time::Duration;

use baton_core::Key;
use baton_proto::AcquireOptions;
use tokio::time::Instant;

use crate::duration::ceil_ms;
use crate::error::Error;
use crate::pool::Pool;
use crate::slot::Slot;

/// Redirects still followed once the wait has run out (with the shortest
/// wait), so the node a redirect names still gives the verdict, while two
/// nodes pointing at each other cannot keep the caller forever.
pub(crate) const HOPS_PAST_THE_WAIT: u32 = 4;

/// Why a request has no verdict yet: what it ends with if its time runs
/// out. Only a node's own answer (`T` for an acquire) is a verdict.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum NoVerdict {
    /// No usable connection, or the connection broke (or its node stopped
    /// answering) before the answer came.
    #[default]
    NoConnection,
    /// The nodes answered `M ... -`: none of them knows a serving node.
    NotServing,
    /// A node that answers probes did not answer this within the limit.
    Unanswered(Duration),
}

impl NoVerdict {
    /// The error a request without a verdict ends with.
    pub(crate) fn error(self, pool: &Pool) -> Error {
        match self {
            NoVerdict::NoConnection => pool.no_server(),
            NoVerdict::NotServing => Error::NotServing,
            NoVerdict::Unanswered(after) => Error::Unanswered { after },
        }
    }
}

/// One acquire's progress across its attempts: what failover and redirects
/// carry from one attempt to the next.
#[derive(Debug)]
pub(crate) struct AcquireAttempt {
    pub key: Key,
    pub lease_ms: u64,
    /// Permits, mode and value, the same in every attempt.
    pub options: AcquireOptions,
    /// When the wait runs out; `None` for a wait of zero (the node's maximum).
    pub deadline: Option<Instant>,
    /// Attempts that found no usable connection or whose connection broke.
    pub failures: usize,
    /// Redirects followed so far, for `Client::follow`.
    pub hops: u32,
    /// Where the last `M addr` pointed, to be tried next.
    pub redirect: Option<Arc<Slot>>,
    /// Whether an `A` went out yet: the first always does.
    pub sent: bool,
    /// Redirects followed after the wait ran out.
    pub late_hops: u32,
    /// Why the last attempt gave no verdict.
    pub no_verdict: NoVerdict,
}

impl AcquireAttempt {
    pub(crate) fn new(key: Key, wait: Duration, lease_ms: u64) -> AcquireAttempt {
        AcquireAttempt {
            key,
            lease_ms,
            options: AcquireOptions::default(),
            deadline: (ceil_ms(wait) > 0).then(|| Instant::now() + wait),
            failures: 0,
            hops: 0,
            redirect: None,
            sent: false,
            late_hops: 0,
            no_verdict: NoVerdict::default(),
        }
    }

    /// Whether the wait has run out.
    pub(crate) fn wait_is_over(&self) -> bool {
        self.deadline
            .is_some_and(|deadline| Instant::now() >= deadline)
    }

    /// The wait to ask the next node for, in ms (0: its maximum), or `None`
    /// when the wait has run out without a verdict. Once it has run out an
    /// attempt still goes out with the shortest wait (1 ms) if it is the
    /// first, or follows a redirect: a node still decides.
    pub(crate) fn wait_left_ms(&mut self, following_redirect: bool) -> Option<u64> {
        let Some(deadline) = self.deadline else {
            return Some(0);
        };
        if let Some(left) = deadline.checked_duration_since(Instant::now()) {
            if !left.is_zero() {
                return Some(ceil_ms(left));
            }
        }
        if !self.sent {
            return Some(1);
        }
        if following_redirect && self.late_hops < HOPS_PAST_THE_WAIT {
            self.late_hops += 1;
            return Some(1);
        }
        None
    }
}
