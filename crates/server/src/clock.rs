//! The node's monotonic clock, in the milliseconds `baton-core` works in.

use std::time::{Duration, Instant};

use baton_core::Millis;

/// Milliseconds since the node started, from a monotonic clock: wall-clock
/// jumps never shorten or stretch a lease.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    start: Instant,
}

impl Clock {
    pub fn new() -> Clock {
        Clock {
            start: Instant::now(),
        }
    }

    pub fn now(&self) -> Millis {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// The instant at which `now()` first reads `at`.
    pub fn instant_at(&self, at: Millis) -> Instant {
        self.start
            .checked_add(Duration::from_millis(at))
            // Unreachable in practice (deadlines are capped at a day or so);
            // a far-future instant still means "not yet".
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(86_400 * 365))
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}
