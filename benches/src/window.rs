//! The time frame of one run: warm-up, a measured stretch, then a bounded
//! drain. Every load loop checks against it, so none runs unbounded.

use std::time::Duration;

use tokio::time::Instant;

/// How long each phase of a run lasts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Timing {
    pub warmup: Duration,
    pub duration: Duration,
    /// How long after the measured stretch outstanding requests may take.
    pub drain: Duration,
}

/// One run's phases as instants.
#[derive(Clone, Copy, Debug)]
pub struct Window {
    pub measure_from: Instant,
    pub stop_at: Instant,
    pub give_up_at: Instant,
    pub drain: Duration,
}

impl Window {
    pub fn starting_now(timing: Timing) -> Self {
        let now = Instant::now();
        let measure_from = now + timing.warmup;
        let stop_at = measure_from + timing.duration;
        Self {
            measure_from,
            stop_at,
            give_up_at: stop_at + timing.drain,
            drain: timing.drain,
        }
    }

    /// Whether an event at `at` counts towards the figures.
    pub fn measures(&self, at: Instant) -> bool {
        at >= self.measure_from && at < self.stop_at
    }

    /// Whether new work may still be started at `at`.
    pub fn running(&self, at: Instant) -> bool {
        at < self.stop_at
    }

    pub fn measured_seconds(&self) -> f64 {
        (self.stop_at - self.measure_from).as_secs_f64()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test
mod tests {
    use super::*;

    #[test]
    fn phases_follow_each_other() {
        let timing = Timing {
            warmup: Duration::from_secs(1),
            duration: Duration::from_secs(2),
            drain: Duration::from_secs(3),
        };
        let w = Window::starting_now(timing);
        assert!(!w.measures(w.measure_from - Duration::from_millis(1)));
        assert!(w.measures(w.measure_from));
        assert!(w.running(w.stop_at - Duration::from_millis(1)));
        assert!(!w.measures(w.stop_at));
        assert!(!w.running(w.stop_at));
        assert_eq!(w.give_up_at - w.stop_at, Duration::from_secs(3));
        assert!((w.measured_seconds() - 2.0).abs() < 1e-9);
    }
}
