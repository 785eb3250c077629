//! Parses the durations given on the command line with the one grammar of
//! every duration flag ([`baton_proto::parse_flag_duration_ms`]): plain
//! seconds (`30`, `0.5`) or a number with a unit (`500ms`, `5s`, `2m`, `1h`).

use std::time::Duration;

/// The duration `text` means, or one line saying why it means none.
pub fn parse_seconds(text: &str) -> Result<Duration, String> {
    baton_proto::parse_flag_duration_ms(text)
        .map(Duration::from_millis)
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_seconds_and_units_as_every_flag_does() {
        assert_eq!(parse_seconds("0.5"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_seconds("2m"), Ok(Duration::from_secs(120)));
        let err = parse_seconds("1e3").expect_err("refused");
        assert!(err.starts_with("`1e3` is not a duration"), "{err}");
    }
}
