//! Telling a node that stopped answering (a frozen process: SIGSTOP, a
//! long pause, a stuck disk) from one that is only slow to grant.
//!
//! A frozen node keeps its sockets open: nothing breaks, it just never
//! answers. The protocol bounds its answer time (every request within 3 s,
//! an acquire within its wait plus 3 s), so while a connection has requests
//! in flight and has heard nothing for a while, the client asks it for its
//! status (`S`), which a live node answers at once even while every other
//! request waits. A connection that still hears nothing is given up exactly
//! like a cut one. This module is the pure part: what the silence calls for.

use std::time::Duration;

use tokio::time::Instant;

/// The default for [`Liveness::unresponsive_after`]: a probe after 1 s of
/// silence, and the protocol's 3 s for its answer.
pub(crate) const UNRESPONSIVE_AFTER: Duration = Duration::from_secs(4);

/// The shortest silence a connection is given up after: below it a node
/// busy for a moment would be dropped.
pub(crate) const MIN_UNRESPONSIVE_AFTER: Duration = Duration::from_millis(100);

/// The share of the silence after which the probe goes out: 1 s of 4, so a
/// live node has the protocol's 3 s to answer it.
const PROBE_DIVISOR: u32 = 4;

/// How long a connection with requests in flight may stay silent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Liveness {
    /// Silence after which the connection is given up.
    pub(crate) unresponsive_after: Duration,
}

impl Default for Liveness {
    fn default() -> Self {
        Liveness {
            unresponsive_after: UNRESPONSIVE_AFTER,
        }
    }
}

impl Liveness {
    /// Raised to [`MIN_UNRESPONSIVE_AFTER`].
    pub(crate) fn new(unresponsive_after: Duration) -> Liveness {
        Liveness {
            unresponsive_after: unresponsive_after.max(MIN_UNRESPONSIVE_AFTER),
        }
    }

    /// Silence after which the `S` probe goes out.
    pub(crate) fn probe_after(self) -> Duration {
        self.unresponsive_after / PROBE_DIVISOR
    }
}

/// What the silence on a connection calls for now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Nothing to do before this moment.
    WaitUntil(Instant),
    /// Send the `S` probe now, then look again at this moment.
    Probe(Instant),
    /// The node did not answer in time: give the connection up.
    Unresponsive,
}

/// What a connection owes and when it last heard from its node.
#[derive(Debug)]
pub(crate) struct Silence {
    /// Requests registered for writing and not answered yet.
    in_flight: usize,
    /// Since when nothing was heard while requests were in flight.
    since: Instant,
    /// Whether this silence's probe went out.
    probed: bool,
}

impl Silence {
    pub(crate) fn new(now: Instant) -> Silence {
        Silence {
            in_flight: 0,
            since: now,
            probed: false,
        }
    }

    /// A request is about to be written. The first after a quiet spell
    /// starts the silence: a connection idle for an hour owes nothing.
    pub(crate) fn sent(&mut self, now: Instant) {
        if self.in_flight == 0 {
            self.since = now;
            self.probed = false;
        }
        self.in_flight += 1;
    }

    /// A line came from the node; `answered` when it matched a request.
    /// Any line shows the node alive.
    pub(crate) fn heard(&mut self, now: Instant, answered: bool) {
        self.since = now;
        self.probed = false;
        if answered {
            self.in_flight = self.in_flight.saturating_sub(1);
        }
    }

    /// What to do at `now`.
    pub(crate) fn verdict(&mut self, now: Instant, liveness: Liveness) -> Verdict {
        if self.in_flight == 0 {
            return Verdict::WaitUntil(now + liveness.probe_after());
        }
        let give_up = self.since + liveness.unresponsive_after;
        if now >= give_up {
            return Verdict::Unresponsive;
        }
        let probe_at = self.since + liveness.probe_after();
        if self.probed {
            Verdict::WaitUntil(give_up)
        } else if now >= probe_at {
            self.probed = true;
            Verdict::Probe(give_up)
        } else {
            Verdict::WaitUntil(probe_at)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn an_idle_connection_is_never_probed() {
        let start = Instant::now();
        let mut silence = Silence::new(start);
        let later = start + Duration::from_secs(3600);
        let liveness = Liveness::default();
        assert_eq!(
            silence.verdict(later, liveness),
            Verdict::WaitUntil(later + Duration::from_secs(1))
        );
    }

    #[test]
    fn silence_with_requests_in_flight_is_probed_then_given_up() {
        let start = Instant::now();
        let mut silence = Silence::new(start);
        let liveness = Liveness::default();
        // Idle for a while, then a request: the silence counts from it.
        let sent = start + Duration::from_secs(60);
        silence.sent(sent);
        let probe_at = sent + Duration::from_secs(1);
        let give_up = sent + Duration::from_secs(4);
        assert_eq!(
            silence.verdict(sent + 10 * MS, liveness),
            Verdict::WaitUntil(probe_at)
        );
        assert_eq!(silence.verdict(probe_at, liveness), Verdict::Probe(give_up));
        // The probe is sent once per silence.
        silence.sent(probe_at);
        assert_eq!(
            silence.verdict(probe_at + MS, liveness),
            Verdict::WaitUntil(give_up)
        );
        assert_eq!(silence.verdict(give_up, liveness), Verdict::Unresponsive);
    }

    #[test]
    fn any_line_heard_restarts_the_silence() {
        let start = Instant::now();
        let mut silence = Silence::new(start);
        let liveness = Liveness::default();
        silence.sent(start);
        silence.sent(start);
        let probe_at = start + Duration::from_secs(1);
        assert!(matches!(
            silence.verdict(probe_at, liveness),
            Verdict::Probe(_)
        ));
        // The probe's answer: alive, and one of the two requests answered.
        let answered = start + Duration::from_millis(1500);
        silence.heard(answered, true);
        assert_eq!(
            silence.verdict(answered, liveness),
            Verdict::WaitUntil(answered + Duration::from_secs(1))
        );
        // An answer to nothing still shows the node alive.
        silence.heard(answered + Duration::from_secs(2), false);
        assert!(matches!(
            silence.verdict(answered + Duration::from_secs(3), liveness),
            Verdict::Probe(_)
        ));
        silence.heard(answered, true);
        silence.heard(answered, true);
        assert_eq!(
            silence.verdict(answered + Duration::from_secs(10), liveness),
            Verdict::WaitUntil(answered + Duration::from_secs(11)),
            "nothing in flight"
        );
    }

    #[test]
    fn the_bound_is_configurable_with_a_floor() {
        let liveness = Liveness::new(Duration::from_secs(2));
        assert_eq!(liveness.probe_after(), Duration::from_millis(500));
        assert_eq!(
            Liveness::new(Duration::ZERO).unresponsive_after,
            MIN_UNRESPONSIVE_AFTER
        );
    }
}
