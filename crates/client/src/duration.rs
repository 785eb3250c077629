//! Conversions from `Duration` to the protocol's millisecond resolution.

use std::time::Duration;

use crate::error::Error;

/// Milliseconds, rounded up so that a non-zero duration never becomes 0
/// (which would mean "the node's maximum" for a wait and be refused for a lease).
pub(crate) fn ceil_ms(d: Duration) -> u64 {
    let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    if d.subsec_nanos().is_multiple_of(1_000_000) {
        ms
    } else {
        ms.saturating_add(1)
    }
}

/// A lease in milliseconds; the protocol requires it to be greater than 0.
pub(crate) fn lease_ms(lease: Duration) -> Result<u64, Error> {
    match ceil_ms(lease) {
        0 => Err(Error::InvalidDuration {
            what: "lease",
            why: "must be greater than 0",
        }),
        ms => Ok(ms),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test
mod tests {
    use super::*;

    #[test]
    fn rounds_up_to_the_millisecond() {
        assert_eq!(ceil_ms(Duration::ZERO), 0);
        assert_eq!(ceil_ms(Duration::from_nanos(1)), 1);
        assert_eq!(ceil_ms(Duration::from_millis(1500)), 1500);
        assert_eq!(ceil_ms(Duration::from_micros(1500)), 2);
        assert_eq!(ceil_ms(Duration::MAX), u64::MAX);
    }

    #[test]
    fn refuses_a_zero_lease() {
        assert!(matches!(
            lease_ms(Duration::ZERO),
            Err(Error::InvalidDuration { what: "lease", .. })
        ));
        assert_eq!(lease_ms(Duration::from_secs(30)).unwrap(), 30_000);
    }
}
