//! Parsing of the `S` status response into its `name=value` fields.

use std::collections::BTreeMap;

/// The fields of an `S` response, by name.
pub type Status = BTreeMap<String, String>;

/// Splits `S f=v f=v ...` into its fields; panics, quoting the line, if the
/// line is not a well-formed status response.
pub fn parse_status(line: &str) -> Status {
    let Some(rest) = line.strip_prefix("S ") else {
        panic!("expected an S response, got {line:?}");
    };
    let mut fields = Status::new();
    for field in rest.split(' ') {
        let Some((name, value)) = field.split_once('=') else {
            panic!("status field {field:?} has no '=' in {line:?}");
        };
        if name.is_empty() {
            panic!("status field {field:?} has an empty name in {line:?}");
        }
        if fields.insert(name.to_owned(), value.to_owned()).is_some() {
            panic!("status field {name:?} appears twice in {line:?}");
        }
    }
    fields
}

/// A numeric status field, panicking if it is absent or not a number.
pub fn status_u64(status: &Status, name: &str) -> u64 {
    match status.get(name).map(|v| v.parse::<u64>()) {
        Some(Ok(n)) => n,
        Some(Err(_)) => panic!("status field {name} is not a number: {status:?}"),
        None => panic!("status has no field {name}: {status:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_fields_in_any_order() {
        let s = parse_status("S locks=2 role=single token=7");
        assert_eq!(s.get("role").map(String::as_str), Some("single"));
        assert_eq!(status_u64(&s, "locks"), 2);
        assert_eq!(status_u64(&s, "token"), 7);
        assert_eq!(s.len(), 3);
    }

    #[test]
    #[should_panic(expected = "expected an S response")]
    fn rejects_other_responses() {
        parse_status("E S ? nope");
    }

    #[test]
    #[should_panic(expected = "appears twice")]
    fn rejects_duplicate_fields() {
        parse_status("S a=1 a=2");
    }
}
