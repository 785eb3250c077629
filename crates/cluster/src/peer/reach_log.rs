//! Logs a peer going out of reach once, then, while it stays out, one
//! summary per interval with the count of failed attempts, and a line when
//! it is back: a dead peer is dialled many times a second, and each of
//! those must not be a log line. Used by both cluster modes.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use baton_core::LogGate;
use tokio::time::Instant;

/// While a peer stays out of reach, one line per this.
pub const UNREACHABLE_SUMMARY_INTERVAL: Duration = Duration::from_secs(10);

#[derive(Debug, Default)]
struct Down {
    since: Option<Instant>,
    /// The last line, and the failed attempts held back since.
    log: LogGate<std::time::Instant>,
    /// Failed attempts since it went out of reach.
    total: u64,
}

/// The reachability log of one peer, named by its address.
#[derive(Debug)]
pub struct ReachLog {
    addr: String,
    down: Mutex<Down>,
}

impl ReachLog {
    pub fn new(addr: impl Into<String>) -> ReachLog {
        ReachLog {
            addr: addr.into(),
            down: Mutex::new(Down::default()),
        }
    }

    /// An attempt to reach the peer failed. Returns whether it logged.
    pub fn failed(&self, error: &dyn std::fmt::Display) -> bool {
        self.failed_at(error, Instant::now())
    }

    fn failed_at(&self, error: &dyn std::fmt::Display, now: Instant) -> bool {
        let mut down = self.down.lock().unwrap_or_else(PoisonError::into_inner);
        down.total = down.total.saturating_add(1);
        let Some(held_back) = down.log.note(now.into_std(), UNREACHABLE_SUMMARY_INTERVAL) else {
            return false;
        };
        let Some(since) = down.since else {
            down.since = Some(now);
            tracing::warn!(peer = %self.addr, %error, "peer unreachable");
            return true;
        };
        tracing::warn!(
            peer = %self.addr,
            %error,
            // This attempt and those held back since the last line.
            failed_attempts = held_back.saturating_add(1),
            down_for_s = now.duration_since(since).as_secs(),
            "peer still unreachable"
        );
        true
    }

    /// An attempt got through. Returns whether it logged (the peer had
    /// been out of reach).
    pub fn reached(&self) -> bool {
        let mut down = self.down.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(since) = down.since else {
            return false;
        };
        tracing::info!(
            peer = %self.addr,
            failed_attempts = down.total,
            down_for_s = since.elapsed().as_secs(),
            "peer reachable again"
        );
        *down = Down::default();
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn once_then_a_summary_per_interval_then_back() {
        let log = ReachLog::new("localhost:7412");
        let start = Instant::now();
        assert!(log.failed_at(&"refused", start));
        let lines = (1..200u64)
            .filter(|i| log.failed_at(&"refused", start + Duration::from_millis(i * 100)))
            .count();
        // 20 s of attempts every 100 ms: the first line and one per 10 s.
        assert_eq!(lines, 1, "one summary within the 20 s (at 10 s)");
        assert!(log.failed_at(&"refused", start + Duration::from_secs(20)));
        assert!(log.reached());
        assert!(!log.reached(), "back once");
        assert!(log.failed(&"refused"), "out again: logged again");
    }
}
