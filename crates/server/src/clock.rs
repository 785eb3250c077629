//! The node's monotonic clock, in the milliseconds `baton-core` works in.
//!
//! It reads tokio's clock, which is the monotonic clock in `batond` and
//! the driven clock wherever tokio's time is: paused in a test
//! (`start_paused`), simulated on a turmoil host. So a lease test waits
//! for no real time and a simulation replays from its seed. The server
//! takes its clock from outside (see [`crate::run`]): every reading of the
//! time inside a node goes through the one it was given.

use std::time::Duration;

use baton_core::Millis;
use tokio::time::Instant;

/// Milliseconds since the node started, from a monotonic clock: wall-clock
/// jumps never shorten or stretch a lease.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    start: Instant,
}

impl Clock {
    /// A clock that reads 0 now.
    pub fn new() -> Clock {
        Clock::starting_at(Instant::now())
    }

    /// A clock that read 0 at `start` (a simulation starts every node's
    /// clock at the simulation's start, say).
    pub fn starting_at(start: Instant) -> Clock {
        Clock { start }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn follows_tokios_clock() {
        let clock = Clock::new();
        assert_eq!(clock.now(), 0);
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        assert_eq!(clock.now(), 1_500);
        assert_eq!(clock.instant_at(1_500), Instant::now());
    }
}
