//! Durations given by people, in flags and config files: plain seconds in
//! the protocol's own form (`30`, `0.5`), or a number with a unit
//! (`500ms`, `5s`, `2m`, `1h`, `1.5s`), as `etcdctl` and `consul` take
//! them. One grammar for `baton`'s and `batond`'s every duration; the wire
//! itself takes plain seconds only ([`crate::parse_duration_ms`]).

/// The units a duration may carry, with their length in milliseconds.
const UNITS: [(&str, u64); 4] = [("ms", 1), ("s", 1000), ("m", 60_000), ("h", 3_600_000)];

/// Digits a number may have after its point (more cannot be meant).
const MAX_DECIMALS: usize = 9;

/// What a duration flag accepts, for error messages.
const ACCEPTED: &str = "a duration: seconds (`30`, `0.5`) or a number with a unit \
     (`500ms`, `5s`, `2m`, `1h`)";

/// A duration flag's text that was refused, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{text}` is not {ACCEPTED}{why}")]
pub struct FlagDurationError {
    text: String,
    why: &'static str,
}

/// A duration as the protocol carries it: a whole number of milliseconds.
/// Anything finer than a millisecond cannot be sent, so it is refused
/// rather than rounded (`1.2345`, `0.5ms`).
pub fn parse_flag_duration_ms(text: &str) -> Result<u64, FlagDurationError> {
    let refuse = |why: &'static str| FlagDurationError {
        text: text.to_string(),
        why,
    };
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
    // before the checks below; a whole part longer is refused first (its
    // leading zeros do not count, as on the wire).
    let whole = match whole.trim_start_matches('0') {
        "" => "0",
        significant => significant,
    };
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
    u64::try_from(scaled / scale).map_err(|_| refuse(": too large"))
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

    fn ms(text: &str) -> Result<u64, String> {
        parse_flag_duration_ms(text).map_err(|e| e.to_string())
    }

    #[test]
    fn reads_protocol_durations() {
        assert_eq!(ms("30"), Ok(30_000));
        assert_eq!(ms("0.5"), Ok(500));
        assert_eq!(ms("2.125"), Ok(2125));
        assert_eq!(ms("0"), Ok(0));
        assert_eq!(ms("007"), Ok(7000));
    }

    #[test]
    fn reads_units() {
        assert_eq!(ms("500ms"), Ok(500));
        assert_eq!(ms("5s"), Ok(5000));
        assert_eq!(ms("1.5s"), Ok(1500));
        assert_eq!(ms("2m"), Ok(120_000));
        assert_eq!(ms("0.5m"), Ok(30_000));
        assert_eq!(ms("1h"), Ok(3_600_000));
        let zeros = format!("{}1s", "0".repeat(100));
        assert_eq!(ms(&zeros), Ok(1000));
        assert_eq!(ms("0ms"), Ok(0));
        assert_eq!(ms("1.0001h"), Ok(3_600_360));
    }

    #[test]
    fn says_which_text_it_refused() {
        let err = ms("1e3").expect_err("refused");
        assert!(err.starts_with("`1e3` is not a duration"), "{err}");
        assert!(err.contains("500ms"), "{err}");
        let err = ms("0.5ms").expect_err("refused");
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
            "000000000000000000000099999999999999999999",
        ] {
            assert!(ms(bad).is_err(), "{bad:?}");
        }
    }
}
