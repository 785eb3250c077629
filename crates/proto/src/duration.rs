//! `<wait>` and `<lease>`: seconds with at most 3 decimals on the wire,
//! whole milliseconds in memory. Converted exactly, never through floats.
//!
//! [`parse_duration_ms`] is the one reader of the protocol's seconds, for
//! requests and responses alike (and the bench's flags); durations typed
//! by people (flags, config files) are read by
//! [`crate::parse_flag_duration_ms`], which also takes units.

use std::fmt;

use bytes::{BufMut, BytesMut};

use crate::number::{digits, is_digits, DigitBuf};

/// Why a duration was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// Not digits, optionally a point and 1 to 3 digits.
    #[error("not a number of seconds with at most 3 decimals")]
    Syntax,
    /// Well formed but beyond `u64` milliseconds, so beyond any maximum.
    #[error("too many seconds")]
    Overflow,
}

/// Reads the protocol's seconds into milliseconds: `2.125` is 2125, `007`
/// is 7000, `0.5` is 500. Digits, optionally a point and 1 to 3 more
/// digits; no sign, no exponent, no space. Anything finer than a
/// millisecond is refused rather than rounded.
pub fn parse_duration_ms(s: &[u8]) -> Result<u64, DurationError> {
    let (whole, frac) = match s.iter().position(|&b| b == b'.') {
        Some(dot) => (&s[..dot], Some(&s[dot + 1..])),
        None => (s, None),
    };
    if !is_digits(whole) {
        return Err(DurationError::Syntax);
    }
    let frac_ms = match frac {
        None => 0,
        Some(f) if f.len() <= 3 && is_digits(f) => {
            // Pad to three digits: ".5" is 500 ms, ".05" is 50 ms.
            let mut ms = 0u64;
            for i in 0..3 {
                ms = ms * 10 + f.get(i).map_or(0, |&d| u64::from(d - b'0'));
            }
            ms
        }
        Some(_) => return Err(DurationError::Syntax),
    };
    // Many leading zeros are legal, so overflow is checked digit by digit
    // rather than guessed from the length.
    whole
        .iter()
        .try_fold(0u64, |acc, &d| {
            acc.checked_mul(10)?.checked_add(u64::from(d - b'0'))
        })
        .and_then(|secs| secs.checked_mul(1000))
        .and_then(|ms| ms.checked_add(frac_ms))
        .ok_or(DurationError::Overflow)
}

/// Room for `u64::MAX` ms as seconds: 17 digits, a point and 3 decimals.
type DurationBuf = [u8; 24];

/// Formats `ms` as seconds into `buf`, shortest form: 1500 is `1.5`.
fn duration_text(ms: u64, buf: &mut DurationBuf) -> &[u8] {
    let mut digit_buf = DigitBuf::default();
    let whole = digits(ms / 1000, &mut digit_buf);
    let mut len = whole.len();
    buf[..len].copy_from_slice(whole);
    let frac = ms % 1000;
    if frac != 0 {
        buf[len] = b'.';
        len += 1;
        let mut rest = frac;
        let mut divisor = 100;
        while rest != 0 {
            // Each step yields one decimal digit, below 10.
            buf[len] = b'0' + (rest / divisor) as u8;
            len += 1;
            rest %= divisor;
            divisor /= 10;
        }
    }
    &buf[..len]
}

/// Writes `ms` as the protocol's seconds: 1500 is `1.5`, 30000 is `30`,
/// 1 is `0.001`.
pub fn format_duration_ms(ms: u64, dst: &mut BytesMut) {
    let mut buf = DurationBuf::default();
    dst.put_slice(duration_text(ms, &mut buf));
}

/// Displays milliseconds as the protocol's seconds, for error texts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Seconds(pub u64);

impl fmt::Display for Seconds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut buf = DurationBuf::default();
        let text = std::str::from_utf8(duration_text(self.0, &mut buf)).map_err(|_| fmt::Error)?;
        f.write_str(text)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test
mod tests {
    use super::*;

    fn formatted(ms: u64) -> String {
        let mut dst = BytesMut::new();
        format_duration_ms(ms, &mut dst);
        String::from_utf8(dst.to_vec()).unwrap()
    }

    #[test]
    fn formats_shortest_seconds() {
        assert_eq!(formatted(1500), "1.5");
        assert_eq!(formatted(30000), "30");
        assert_eq!(formatted(1), "0.001");
        assert_eq!(formatted(0), "0");
        assert_eq!(formatted(2125), "2.125");
        assert_eq!(formatted(2120), "2.12");
        assert_eq!(formatted(50), "0.05");
        assert_eq!(formatted(86_400_000), "86400");
        assert_eq!(formatted(u64::MAX), "18446744073709551.615");
        assert_eq!(Seconds(1500).to_string(), "1.5");
    }

    #[test]
    fn errors_say_what_is_wrong() {
        assert_eq!(
            DurationError::Syntax.to_string(),
            "not a number of seconds with at most 3 decimals"
        );
        assert_eq!(DurationError::Overflow.to_string(), "too many seconds");
    }

    #[test]
    fn parses_exactly() {
        for (text, ms) in [
            ("2.125", 2125),
            ("0.5", 500),
            ("007", 7000),
            ("0", 0),
            ("0.0", 0),
            ("0.000", 0),
            ("0.001", 1),
            ("0.05", 50),
            ("30", 30000),
            ("18446744073709551.615", u64::MAX),
        ] {
            assert_eq!(parse_duration_ms(text.as_bytes()), Ok(ms), "{text}");
        }
    }

    #[test]
    fn refuses_what_is_not_seconds_with_three_decimals() {
        for text in [
            "", ".5", "1.", "1.2345", "+1", "-1", "1e3", " 1", "1 ", "0x10", "１", "1.2.3", "1..2",
            "1,5", ".",
        ] {
            assert_eq!(
                parse_duration_ms(text.as_bytes()),
                Err(DurationError::Syntax),
                "{text:?}"
            );
        }
    }

    proptest::proptest! {
        /// Whatever this crate writes, it reads back to the millisecond.
        #[test]
        fn formatted_seconds_read_back(ms in proptest::prelude::any::<u64>()) {
            let text = formatted(ms);
            proptest::prop_assert_eq!(parse_duration_ms(text.as_bytes()), Ok(ms));
        }

        /// Every spelling with up to 3 decimals, zeros padded or not,
        /// reads as whole seconds plus the decimals as milliseconds.
        #[test]
        fn padded_spellings_mean_the_same(
            secs in 0u64..=1_000_000, ms in 0u64..1000, zeros in 0usize..4, decimals in 1usize..=3
        ) {
            let frac = format!("{ms:03}");
            let kept = &frac[..decimals];
            let dropped_digits_are_zero = frac[decimals..].bytes().all(|b| b == b'0');
            let text = format!("{}{secs}.{kept}", "0".repeat(zeros));
            let expected = if dropped_digits_are_zero { Ok(secs * 1000 + ms) } else {
                // Cut digits that were not zero: a different number, read exactly.
                Ok(secs * 1000 + kept.parse::<u64>().unwrap() * 10u64.pow(3 - decimals as u32))
            };
            proptest::prop_assert_eq!(parse_duration_ms(text.as_bytes()), expected);
        }
    }

    #[test]
    fn huge_values_overflow_without_panicking() {
        for text in [
            "18446744073709551.616",
            "18446744073709552",
            "99999999999999999999999999999999999999.999",
        ] {
            assert_eq!(
                parse_duration_ms(text.as_bytes()),
                Err(DurationError::Overflow),
                "{text}"
            );
        }
        let zeros = format!("{}1", "0".repeat(1000));
        assert_eq!(parse_duration_ms(zeros.as_bytes()), Ok(1000));
    }
}
