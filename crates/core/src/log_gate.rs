//! The throttle behind every "at most one log line per source per
//! interval" in Baton: a flood of refused handshakes, implausible peer
//! messages, failed logins or redials must not become a flood of lines,
//! yet the line that is written says how many were held back since the
//! last one. Pure: the caller gives the time, as an `Instant` or as the
//! engines' milliseconds, so the same gate serves the async shells and the
//! pure engines.

use std::time::{Duration, Instant};

/// Sources a per-source table (a throttle, a log's gates) keeps at once:
/// past it, the sources beyond share one entry, so that a flood from many
/// addresses costs bounded memory (each entry is some tens of bytes).
pub const MAX_SOURCES: usize = 4096;

/// A point in time a [`LogGate`] can measure intervals between.
pub trait Moment: Copy {
    /// The length of an interval.
    type Span: PartialOrd;
    /// How long after `earlier` this is (zero if before it).
    fn since(self, earlier: Self) -> Self::Span;
}

impl Moment for Instant {
    type Span = Duration;
    fn since(self, earlier: Instant) -> Duration {
        self.saturating_duration_since(earlier)
    }
}

/// The engines' milliseconds ([`crate::Millis`]).
impl Moment for u64 {
    type Span = u64;
    fn since(self, earlier: u64) -> u64 {
        self.saturating_sub(earlier)
    }
}

/// When one source was last logged, and how many of its events were held
/// back since.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogGate<T> {
    logged_at: Option<T>,
    held_back: u64,
}

impl<T> Default for LogGate<T> {
    fn default() -> Self {
        LogGate {
            logged_at: None,
            held_back: 0,
        }
    }
}

impl<T: Moment> LogGate<T> {
    /// An event at `now`. `Some(n)` if a line is due (the first event, or
    /// `every` after the last line): log it, saying `n` were held back
    /// since; `None` if it is held back (and counted).
    pub fn note(&mut self, now: T, every: T::Span) -> Option<u64> {
        if self.is_recent(now, every) {
            self.held_back = self.held_back.saturating_add(1);
            return None;
        }
        self.logged_at = Some(now);
        Some(std::mem::take(&mut self.held_back))
    }

    /// Whether a line was written less than `every` before `now` (the next
    /// event would be held back).
    pub fn is_recent(&self, now: T, every: T::Span) -> bool {
        self.logged_at.is_some_and(|at| now.since(at) < every)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_event_logs_then_one_line_per_interval_counts_the_rest() {
        let mut gate = LogGate::<u64>::default();
        assert_eq!(gate.note(1_000, 60_000), Some(0));
        assert!(gate.is_recent(1_000, 60_000));
        assert_eq!(gate.note(2_000, 60_000), None);
        assert_eq!(gate.note(60_999, 60_000), None);
        assert_eq!(gate.note(61_000, 60_000), Some(2));
        assert_eq!(gate.note(200_000, 60_000), Some(0));
        assert!(!gate.is_recent(260_000, 60_000));
    }

    #[test]
    fn instants_measure_the_same_way() {
        let start = Instant::now();
        let mut gate = LogGate::default();
        let second = Duration::from_secs(1);
        assert_eq!(gate.note(start, second), Some(0));
        assert_eq!(gate.note(start + second / 2, second), None);
        assert_eq!(gate.note(start + second, second), Some(1));
        // A time before the last line is no later than it: held back.
        assert_eq!(gate.note(start, second), None);
    }
}
