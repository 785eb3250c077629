//! Parses durations given on the command line in the protocol's own form.

use std::time::Duration;

/// Seconds as the protocol writes them: digits, optionally a point and 1
/// to 3 more digits (`30`, `0.5`, `2.125`), read by the protocol's own
/// parser. Anything finer than a millisecond cannot be sent, so it is
/// refused rather than rounded.
pub fn parse_seconds(text: &str) -> Result<Duration, String> {
    baton_proto::parse_duration_ms(text.as_bytes())
        .map(Duration::from_millis)
        .map_err(|_| format!("`{text}` is not a number of seconds with at most 3 decimals"))
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
    fn says_which_text_it_refused() {
        assert_eq!(
            parse_seconds("1e3"),
            Err("`1e3` is not a number of seconds with at most 3 decimals".into())
        );
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
            "1.2.3",
            " 1",
            "1 ",
        ] {
            assert!(parse_seconds(bad).is_err(), "{bad:?}");
        }
    }
}
