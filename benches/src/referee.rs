//! Watches the grants of the one contended key from every driver
//! connection at once: no two grants may overlap and tokens must rise. It
//! also times each handoff, from a release being sent to the next grant
//! arriving at another connection.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use crate::error::Violation;

/// Shared by all connections of a contended run.
#[derive(Debug)]
pub struct Referee {
    /// Off for targets without lock semantics (the echo ceiling).
    enforce: bool,
    /// Off for targets whose tokens are not fencing tokens (Redis values).
    rising: bool,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    holder: Option<(usize, u64)>,
    last_token: u64,
    last_release: Option<(usize, Instant)>,
}

impl Referee {
    pub fn new(enforce: bool) -> Self {
        Self {
            enforce,
            rising: true,
            state: Mutex::new(State::default()),
        }
    }

    /// Checks overlap only: the "tokens" are the client's own lock values.
    pub fn without_token_order(mut self) -> Self {
        self.rising = false;
        self
    }

    /// A grant of `token` arrived at `client` at `at`. Returns the handoff
    /// latency when it follows another client's release.
    pub fn granted(
        &self,
        client: usize,
        token: u64,
        at: Instant,
    ) -> Result<Option<Duration>, Violation> {
        // A panic elsewhere fails the run anyway; the state stays usable.
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if !self.enforce {
            return Ok(None);
        }
        if let Some((holder, holder_token)) = state.holder {
            return Err(Violation::Overlap {
                client,
                token,
                holder,
                holder_token,
            });
        }
        if self.rising && token <= state.last_token {
            return Err(Violation::TokenNotRising {
                client,
                token,
                previous: state.last_token,
            });
        }
        state.holder = Some((client, token));
        state.last_token = token;
        Ok(match state.last_release.take() {
            Some((from, sent)) if from != client => Some(at.saturating_duration_since(sent)),
            _ => None,
        })
    }

    /// `client` is about to send the release of `token`. Called before the
    /// write, so the server cannot grant the key to anyone before the
    /// referee knows it is free.
    pub fn releasing(&self, client: usize, token: u64, at: Instant) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.holder == Some((client, token)) {
            state.holder = None;
        }
        state.last_release = Some((client, at));
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test
mod tests {
    use super::*;

    #[test]
    fn times_a_handoff_to_another_client() {
        let r = Referee::new(true);
        let t0 = Instant::now();
        assert_eq!(r.granted(0, 5, t0), Ok(None));
        r.releasing(0, 5, t0);
        let handoff = r.granted(1, 6, t0 + Duration::from_micros(40)).unwrap();
        assert_eq!(handoff, Some(Duration::from_micros(40)));
    }

    #[test]
    fn regrant_to_the_releaser_is_not_a_handoff() {
        let r = Referee::new(true);
        let t0 = Instant::now();
        r.granted(0, 5, t0).unwrap();
        r.releasing(0, 5, t0);
        assert_eq!(r.granted(0, 6, t0), Ok(None));
        // The release was consumed: a later grant elsewhere is no handoff.
        r.releasing(0, 6, t0);
        assert!(r.granted(1, 7, t0).unwrap().is_some());
    }

    #[test]
    fn overlapping_grants_are_a_violation() {
        let r = Referee::new(true);
        let t0 = Instant::now();
        r.granted(0, 5, t0).unwrap();
        assert_eq!(
            r.granted(1, 6, t0),
            Err(Violation::Overlap {
                client: 1,
                token: 6,
                holder: 0,
                holder_token: 5
            })
        );
    }

    #[test]
    fn a_token_that_does_not_rise_is_a_violation() {
        let r = Referee::new(true);
        let t0 = Instant::now();
        r.granted(0, 5, t0).unwrap();
        r.releasing(0, 5, t0);
        assert_eq!(
            r.granted(1, 5, t0),
            Err(Violation::TokenNotRising {
                client: 1,
                token: 5,
                previous: 5
            })
        );
    }

    #[test]
    fn releasing_a_stale_token_does_not_free_the_key() {
        let r = Referee::new(true);
        let t0 = Instant::now();
        r.granted(0, 5, t0).unwrap();
        r.releasing(1, 4, t0);
        assert!(matches!(
            r.granted(2, 6, t0),
            Err(Violation::Overlap { holder: 0, .. })
        ));
    }

    #[test]
    fn without_token_order_still_catches_overlap() {
        let r = Referee::new(true).without_token_order();
        let t0 = Instant::now();
        r.granted(0, 9, t0).unwrap();
        r.releasing(0, 9, t0);
        assert!(r.granted(1, 3, t0).unwrap().is_some());
        assert!(matches!(
            r.granted(2, 4, t0),
            Err(Violation::Overlap { holder: 1, .. })
        ));
    }

    #[test]
    fn not_enforcing_accepts_anything_and_times_nothing() {
        let r = Referee::new(false);
        let t0 = Instant::now();
        assert_eq!(r.granted(0, 1, t0), Ok(None));
        assert_eq!(r.granted(1, 1, t0), Ok(None));
        r.releasing(0, 1, t0);
        assert_eq!(r.granted(1, 2, t0), Ok(None));
    }
}
