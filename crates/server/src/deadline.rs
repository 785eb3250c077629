//! A connection's line and idle timeouts, checked by one coarse sleep per
//! connection rather than a timer per request.
//!
//! - **Line timeout.** The clock of a line starts with its first byte (for
//!   a connection's first line: at connect, so a silent connection is
//!   closed too) and stops at its LF. A line unfinished for longer is the
//!   mark of a slowloris; the connection is closed.
//! - **Idle timeout** (off unless configured). A connection with nothing
//!   pending (no queued acquire, no deferred request, no unwritten answer)
//!   that sent nothing for that long is closed. Activity is a flag the
//!   connection sets per burst of input, sampled every quarter of the
//!   timeout, so an idle connection is closed between 1 and 1.25 timeouts
//!   after its last request.
//!
//! The hot path pays a branch per burst of input: a clock read happens
//! only when a burst leaves a new unfinished line behind.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::evict::ConnWatch;

/// The idle check runs this many times per idle timeout.
const IDLE_SAMPLES: u32 = 4;

/// Why a connection was closed by its deadlines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Expired {
    Line,
    Idle,
}

impl Expired {
    /// The line the client reads before the close.
    pub(crate) fn farewell(self) -> &'static [u8] {
        match self {
            Expired::Line => b"E ? ? line timeout: closing the connection\n",
            Expired::Idle => b"E ? ? idle timeout: closing the connection\n",
        }
    }
}

/// The deadlines of one connection.
#[derive(Debug)]
pub(crate) struct Deadlines {
    line_timeout: Option<Duration>,
    idle_timeout: Option<Duration>,
    /// When the unfinished line began, if there is one.
    line_since: Option<Instant>,
    /// Set by every burst of input, cleared by every check.
    active: bool,
    /// The last check that found the connection active or busy.
    last_active: Instant,
    watch: Arc<ConnWatch>,
}

impl Deadlines {
    /// Deadlines of a connection accepted at `connected`, before its first line.
    pub(crate) fn new(
        line_timeout: Option<Duration>,
        idle_timeout: Option<Duration>,
        watch: Arc<ConnWatch>,
        connected: Instant,
    ) -> Deadlines {
        Deadlines {
            line_timeout,
            idle_timeout,
            line_since: Some(connected),
            active: false,
            last_active: connected,
            watch,
        }
    }

    /// After a burst of input: `finished` whether it completed a line (or
    /// an error item), `mid_line` whether an unfinished one is left, and
    /// `discarding` whether that is a too-long line older than the burst.
    #[inline]
    pub(crate) fn after_input(&mut self, finished: bool, mid_line: bool, discarding: bool) {
        self.active = true;
        if !mid_line {
            if self.line_since.is_some() {
                self.line_since = None;
                self.watch.set_line_since(None);
            }
            return;
        }
        let new_line = finished && !discarding;
        if new_line || self.line_since.is_none() {
            self.started_line(Instant::now());
        }
    }

    #[cold]
    fn started_line(&mut self, now: Instant) {
        self.line_since = Some(now);
        self.watch.set_line_since(Some(now));
    }

    /// When the unfinished line (the first, before any) times out, if a
    /// line timeout is set.
    pub(crate) fn line_deadline(&self) -> Option<Instant> {
        Some(self.line_since? + self.line_timeout?)
    }

    /// When [`Deadlines::check`] should run next: nothing can expire before.
    pub(crate) fn next_check(&self, now: Instant) -> Instant {
        let far = now + Duration::from_secs(86_400);
        let line = match (self.line_timeout, self.line_since) {
            (Some(timeout), Some(since)) => since + timeout,
            // A line that starts now expires a timeout from now at the earliest.
            (Some(timeout), None) => now + timeout,
            (None, _) => far,
        };
        let idle = self.idle_timeout.map_or(far, |timeout| {
            now + (timeout / IDLE_SAMPLES).max(Duration::from_millis(10))
        });
        line.min(idle)
    }

    /// Whether a deadline has passed at `now`; `busy` whether the
    /// connection has anything pending, `held_back` whether the node
    /// stopped reading it (its client does not take its answers): an
    /// unfinished line is then the node's doing, and its clock restarts.
    pub(crate) fn check(&mut self, now: Instant, busy: bool, held_back: bool) -> Option<Expired> {
        if held_back && self.line_since.is_some() {
            self.started_line(now);
        }
        if let (Some(timeout), Some(since)) = (self.line_timeout, self.line_since) {
            if now.saturating_duration_since(since) >= timeout {
                return Some(Expired::Line);
            }
        }
        if busy || std::mem::take(&mut self.active) {
            self.last_active = now;
        }
        match self.idle_timeout {
            Some(timeout) if now.saturating_duration_since(self.last_active) >= timeout => {
                Some(Expired::Idle)
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: Duration = Duration::from_secs(10);

    #[tokio::test(start_paused = true)]
    async fn a_line_held_back_by_the_node_does_not_time_out() {
        let start = Instant::now();
        let mut d = deadlines(None, start);
        // Half a line is buffered while the node does not read (its client
        // does not take its answers): the clock restarts at each check.
        d.after_input(true, true, false);
        let later = start + LINE;
        assert_eq!(d.check(later, true, true), None);
        assert_eq!(d.next_check(later), later + LINE);
        assert_eq!(d.check(later + LINE, true, false), Some(Expired::Line));
    }
    const IDLE: Duration = Duration::from_secs(8);

    fn deadlines(idle: Option<Duration>, at: Instant) -> Deadlines {
        Deadlines::new(Some(LINE), idle, Arc::new(ConnWatch::for_test()), at)
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_connection_expires_a_line_timeout_after_connect() {
        let start = Instant::now();
        let mut d = deadlines(None, start);
        assert_eq!(d.next_check(start), start + LINE);
        assert_eq!(
            d.check(start + LINE - Duration::from_millis(1), false, false),
            None
        );
        assert_eq!(d.check(start + LINE, false, false), Some(Expired::Line));
    }

    #[tokio::test(start_paused = true)]
    async fn a_finished_line_stops_the_clock_and_the_next_starts_it() {
        let start = Instant::now();
        let mut d = deadlines(None, start);
        tokio::time::advance(Duration::from_secs(3)).await;
        d.after_input(true, false, false);
        assert_eq!(d.check(start + LINE, false, false), None);
        tokio::time::advance(Duration::from_secs(5)).await;
        // Half a line: its clock starts now, 8 s after connect.
        d.after_input(false, true, false);
        let began = start + Duration::from_secs(8);
        assert_eq!(d.next_check(began), began + LINE);
        // More bytes of the same line do not restart it.
        tokio::time::advance(Duration::from_secs(5)).await;
        d.after_input(false, true, false);
        assert_eq!(d.check(began + LINE, false, false), Some(Expired::Line));
    }

    #[tokio::test(start_paused = true)]
    async fn a_line_finished_within_a_burst_restarts_the_clock_for_the_next() {
        let start = Instant::now();
        let mut d = deadlines(None, start);
        tokio::time::advance(Duration::from_secs(9)).await;
        // "S\nA k" at 9 s: the first line is done, the second began at 9 s.
        d.after_input(true, true, false);
        assert_eq!(d.check(start + LINE, false, false), None);
        assert_eq!(
            d.check(start + Duration::from_secs(19), false, false),
            Some(Expired::Line)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_too_long_line_being_discarded_keeps_its_clock() {
        let start = Instant::now();
        let mut d = deadlines(None, start);
        // 2000 bytes without LF: answered `E`, then discarded to its LF.
        d.after_input(true, true, true);
        assert_eq!(d.check(start + LINE, false, false), Some(Expired::Line));
    }

    #[tokio::test(start_paused = true)]
    async fn idle_counts_only_while_nothing_is_pending() {
        let start = Instant::now();
        let mut d = deadlines(Some(IDLE), start);
        d.after_input(true, false, false);
        let tick = Duration::from_secs(2);
        assert_eq!(d.next_check(start), start + tick);
        assert_eq!(d.check(start + tick, false, false), None);
        // A queued acquire keeps it alive however long it waits.
        assert_eq!(d.check(start + Duration::from_secs(30), true, false), None);
        assert_eq!(d.check(start + Duration::from_secs(37), false, false), None);
        assert_eq!(
            d.check(start + Duration::from_secs(38), false, false),
            Some(Expired::Idle)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn without_timeouts_nothing_expires() {
        let start = Instant::now();
        let mut d = Deadlines::new(None, None, Arc::new(ConnWatch::for_test()), start);
        let much_later = start + Duration::from_secs(86_000);
        assert!(d.next_check(start) >= much_later);
        assert_eq!(d.check(much_later, false, false), None);
    }
}
