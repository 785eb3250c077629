//! When a link may dial its peer again: at once the first time, then,
//! while dials keep failing, after a wait that doubles from
//! [`REDIAL_FIRST_WAIT`] up to [`REDIAL_MAX_WAIT`]. openraft calls a dead
//! peer at every heartbeat (20 times a second by default); without this
//! each call was a dial. Pure: the caller gives the time.

use std::time::Duration;

use tokio::time::Instant;

/// The wait after the first failed dial.
pub const REDIAL_FIRST_WAIT: Duration = Duration::from_millis(50);
/// The longest wait between two dials: a peer that comes back is reached
/// within about this, a couple of default election timeouts, while a dead
/// one costs one dial a second.
pub const REDIAL_MAX_WAIT: Duration = Duration::from_secs(1);

/// The dials of one link that have failed in a row, and when the next may
/// start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Redial {
    failed_in_a_row: u32,
    not_before: Option<Instant>,
}

impl Redial {
    /// Whether a dial may start at `now`; else how long until it may.
    pub fn may_dial(&self, now: Instant) -> Result<(), Duration> {
        match self.not_before {
            Some(at) if at > now => Err(at - now),
            _ => Ok(()),
        }
    }

    /// A dial starts at `now`. It counts as failed until
    /// [`Redial::connected`] says otherwise, so that a dial cut short by
    /// its caller's timeout (a peer that accepts but never answers the
    /// handshake) backs off too. Returns the wait before the next one.
    pub fn dialling(&mut self, now: Instant) -> Duration {
        let wait = wait_after(self.failed_in_a_row);
        self.failed_in_a_row = self.failed_in_a_row.saturating_add(1);
        self.not_before = Some(now + wait);
        wait
    }

    /// The dial got through (handshake included): the next may start at once.
    pub fn connected(&mut self) {
        *self = Redial::default();
    }

    /// Dials that failed in a row (the one under way included).
    pub fn failed_in_a_row(&self) -> u32 {
        self.failed_in_a_row
    }
}

/// The wait after `earlier` failed dials in a row and one more.
fn wait_after(earlier: u32) -> Duration {
    let doublings = earlier.min(31);
    REDIAL_FIRST_WAIT
        .saturating_mul(1u32 << doublings)
        .min(REDIAL_MAX_WAIT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_doubles_up_to_the_cap_and_a_connection_resets_it() {
        let start = Instant::now();
        let mut redial = Redial::default();
        assert_eq!(redial.may_dial(start), Ok(()));
        let waits: Vec<u64> = (0..8)
            .map(|_| redial.dialling(start).as_millis() as u64)
            .collect();
        assert_eq!(waits, [50, 100, 200, 400, 800, 1_000, 1_000, 1_000]);
        assert_eq!(redial.failed_in_a_row(), 8);
        assert!(redial.may_dial(start).is_err());
        assert!(redial.may_dial(start + REDIAL_MAX_WAIT).is_ok());
        redial.connected();
        assert_eq!(redial.may_dial(start), Ok(()));
        assert_eq!(redial.dialling(start), REDIAL_FIRST_WAIT);
        // Thousands of failures later, the wait is still the cap.
        for _ in 0..10_000 {
            redial.dialling(start);
        }
        assert_eq!(redial.dialling(start), REDIAL_MAX_WAIT);
    }

    /// A dead peer called at every heartbeat for a minute is dialled about
    /// once a second once the wait reached its cap, not 20 times.
    #[test]
    fn a_dead_peer_called_every_heartbeat_is_dialled_about_once_a_second() {
        let start = Instant::now();
        let mut redial = Redial::default();
        let heartbeat = Duration::from_millis(50);
        let mut dials = 0;
        for i in 0..1_200u32 {
            let now = start + heartbeat * i;
            if redial.may_dial(now).is_ok() {
                redial.dialling(now);
                dials += 1;
            }
        }
        // About 5 dials while the wait grows, then one per second.
        assert!((58..=66).contains(&dials), "{dials} dials in 60 s");
    }
}
