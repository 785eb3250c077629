//! Parses the durations given on the command line: plain seconds in the
//! protocol's own form (`30`, `0.5`), or a number with a unit (`500ms`,
//! `5s`, `2m`, `1h`, `1.5s`), as `etcdctl` and `consul` take them.

use std::time::Duration;

/// The units a duration may carry, with their length in milliseconds.
const UNITS: [(&str, u64); 4] = [("ms", 1), ("s", 1000), ("m", 60_000), ("h", 3_600_000)];

/// Digits a number may have after its point (more cannot be meant).
const MAX_DECIMALS: usize = 9;

/// What `--wait`, `--lease` and the like accept, for error messages.
const ACCEPTED: &str = "a duration: seconds (`30`, `0.5`) or a number with a unit \
     (`500ms`, `5s`, `2m`, `1h`)";

/// A duration as the protocol carries it: a whole number of milliseconds.
/// Anything finer than a millisecond cannot be sent, so it is refused
/// rather than rounded (`1.2345`, `0.5ms`).
pub fn parse_seconds(text: &str) -> Result<Duration, String> {
    let refuse = |why: &str| format!("`{text}` is not {ACCEPTED}{why}");
    let (number, unit_ms) = split_unit(text);
    let (whole, decimals) = match number.split_once('.') {
        Some((whole, decimals)) => (whole, decimals),
        None => (number, ""),
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) || (number.contains('.') && !digits(decimals)) {
        return Err(refuse(""));
    }
    if decimals.len() > MAX_DECIMALS {
        return Err(refuse(": too many decimals"));
    }
    let scale = 10u128.pow(decimals.len() as u32);
    // u128: up to 20 + 9 digits times an hour's milliseconds cannot overflow
    // before the checks below; a whole part that long is refused first.
    if whole.len() > 20 {
        return Err(refuse(": too large"));
    }
    let whole: u128 = whole.parse().map_err(|_| refuse(""))?;
    let decimals: u128 = if decimals.is_empty() {
        0
    } else {
        decimals.parse().map_err(|_| refuse(""))?
    };
    let scaled = (whole * scale + decimals) * u128::from(unit_ms);
    if !scaled.is_multiple_of(scale) {
        return Err(refuse(": finer than a millisecond"));
    }
    let ms = u64::try_from(scaled / scale).map_err(|_| refuse(": too large"))?;
    Ok(Duration::from_millis(ms))
}

/// The number and its unit's milliseconds; plain seconds without a unit.
fn split_unit(text: &str) -> (&str, u64) {
    // `ms` before `m` and `s`: the longest unit that fits wins.
    for (unit, ms) in UNITS {
        if let Some(number) = text.strip_suffix(unit) {
            return (number, ms);
        }
    }
    (text, 1000)
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
        assert_eq!(parse_seconds("007"), Ok(Duration::from_secs(7)));
    }

    #[test]
    fn reads_units() {
        assert_eq!(parse_seconds("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_seconds("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_seconds("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_seconds("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_seconds("0.5m"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_seconds("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_seconds("0ms"), Ok(Duration::ZERO));
        assert_eq!(
            parse_seconds("1.0001h"),
            Ok(Duration::from_millis(3_600_360))
        );
    }

    #[test]
    fn says_which_text_it_refused() {
        let err = parse_seconds("1e3").expect_err("refused");
        assert!(err.starts_with("`1e3` is not a duration"), "{err}");
        assert!(err.contains("500ms"), "{err}");
        let err = parse_seconds("0.5ms").expect_err("refused");
        assert!(err.ends_with("finer than a millisecond"), "{err}");
    }

    #[test]
    fn refuses_the_rest() {
        for bad in [
            "",
            ".5",
            "1.",
            "1.2345",
            "0.5ms",
            "-1",
            "+1",
            "1e3",
            "abc",
            "s",
            "ms",
            "5 s",
            "5S",
            "5sec",
            "5d",
            "1m30s",
            "99999999999999999999",
            "99999999999999999999h",
            "1.2.3",
            "1.2.3s",
            " 1",
            "1 ",
            "1.0000000001",
        ] {
            assert!(parse_seconds(bad).is_err(), "{bad:?}");
        }
    }
}
