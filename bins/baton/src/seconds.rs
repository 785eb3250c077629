//! Parses durations given on the command line in the protocol's own form.

use std::time::Duration;

/// Seconds as the protocol writes them: digits, optionally a point and 1
/// to 3 more digits (`30`, `0.5`, `2.125`). Anything finer than a
/// millisecond cannot be sent, so it is refused rather than rounded.
pub fn parse_seconds(text: &str) -> Result<Duration, String> {
    let bad = || format!("`{text}` is not a number of seconds with at most 3 decimals");
    let (whole, frac) = text.split_once('.').unwrap_or((text, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() || !digits(whole) || !digits(frac) || frac.len() > 3 {
        return Err(bad());
    }
    if text.contains('.') && frac.is_empty() {
        return Err(bad());
    }
    let secs: u64 = whole.parse().map_err(|_| bad())?;
    let millis = format!("{frac:0<3}").parse::<u64>().map_err(|_| bad())?;
    secs.checked_mul(1000)
        .and_then(|ms| ms.checked_add(millis))
        .map(Duration::from_millis)
        .ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_protocol_durations() {
        assert_eq!(parse_seconds("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_seconds("0.5"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_seconds("2.125"), Ok(Duration::from_millis(2125)));
        assert_eq!(parse_seconds("0"), Ok(Duration::ZERO));
    }

    #[test]
    fn refuses_the_rest() {
        for bad in [
            "",
            ".5",
            "1.",
            "1.2345",
            "-1",
            "+1",
            "1e3",
            "abc",
            "99999999999999999999",
        ] {
            assert!(parse_seconds(bad).is_err(), "{bad:?}");
        }
    }
}
