//! Property tests of the numbers of a request line as docs/protocol.md
//! reads them: a token or a duration with leading zeros is the same
//! number; a token is any decimal u64 above 0 and nothing past u64::MAX;
//! seconds take 0 to 3 decimals, exactly, and a fourth is refused; a
//! number past the maximum, however long, is `exceeds the maximum`.

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test

use baton_core::Key;
use baton_proto::{parse_request, AcquireOptions, Limits, Request, RequestErrorKind};
use proptest::prelude::*;

fn limits() -> Limits {
    Limits {
        max_wait_ms: u64::MAX,
        max_lease_ms: u64::MAX,
    }
}

fn key() -> Key {
    Key::new(b"k").unwrap()
}

fn zeros() -> impl Strategy<Value = String> {
    (0usize..30).prop_map(|n| "0".repeat(n))
}

/// Seconds as text with 0 to 3 decimals (trailing zeros kept), and their
/// milliseconds.
fn seconds() -> impl Strategy<Value = (String, u64)> {
    (0u64..=10_000_000_000, 0usize..=3, 0u64..1000).prop_map(|(secs, places, frac)| {
        let frac = frac % 10u64.pow(places as u32);
        let text = match places {
            0 => secs.to_string(),
            _ => format!("{secs}.{frac:0places$}"),
        };
        let ms = secs * 1000 + frac * 10u64.pow(3 - places as u32);
        (text, ms)
    })
}

proptest! {
    #[test]
    fn tokens_with_leading_zeros_are_the_same_token(token in 1u64.., pad in zeros()) {
        let line = format!("R k {pad}{token}");
        prop_assert_eq!(
            parse_request(line.as_bytes(), &limits()),
            Ok(Request::Release { key: key(), token })
        );
    }

    #[test]
    fn tokens_past_u64_or_zero_are_refused(extra in 1u64..1_000_000, pad in zeros()) {
        let past = u128::from(u64::MAX) + u128::from(extra);
        for text in [format!("{pad}{past}"), format!("{pad}0")] {
            let line = format!("R k {text}");
            let err = parse_request(line.as_bytes(), &limits()).unwrap_err();
            prop_assert_eq!(err.kind, RequestErrorKind::BadToken);
        }
    }

    #[test]
    fn seconds_are_read_exactly((wait, wait_ms) in seconds(), (lease, lease_ms) in seconds(), pad in zeros()) {
        prop_assume!(lease_ms > 0);
        let line = format!("A k {pad}{wait} {lease}");
        let want = Request::Acquire {
            key: key(),
            wait_ms,
            lease_ms,
            options: AcquireOptions::default(),
        };
        prop_assert_eq!(parse_request(line.as_bytes(), &limits()), Ok(want));
    }

    #[test]
    fn a_fourth_decimal_or_a_sign_is_refused((wait, _) in seconds(), digit in 0u8..10, sign in "[+-]") {
        // Padded to four decimals, whatever it had.
        let places = wait.split_once('.').map_or(0, |(_, frac)| frac.len());
        let point = if places == 0 { "." } else { "" };
        let text = format!("{wait}{point}{}{digit}", "0".repeat(3 - places));
        for bad in [text, format!("{sign}{wait}")] {
            let line = format!("A k {bad} 1");
            let err = parse_request(line.as_bytes(), &limits()).unwrap_err();
            prop_assert!(matches!(err.kind, RequestErrorKind::BadDuration(_)), "{bad}: {err:?}");
        }
    }

    #[test]
    fn any_number_past_the_maximum_exceeds_it(digits in "[1-9][0-9]{0,40}", max_ms in 1u64..=86_400_000) {
        let line = format!("A k {digits} 1");
        let value_ms = digits.parse::<u128>().ok().and_then(|s| s.checked_mul(1000));
        let limits = Limits { max_wait_ms: max_ms, max_lease_ms: max_ms };
        let got = parse_request(line.as_bytes(), &limits);
        match value_ms {
            Some(ms) if ms <= u128::from(max_ms) => prop_assert!(got.is_ok(), "{got:?}"),
            _ => {
                let exceeds = matches!(got, Err(ref e) if matches!(e.kind, RequestErrorKind::ExceedsMax { .. }));
                prop_assert!(exceeds, "{:?}", got);
            }
        }
    }
}
