//! Checks on single response lines, with failure messages that quote the
//! line the node actually sent.

/// The token of a grant `A <key> <token>`; panics on anything else.
pub fn grant_token(line: &str, key: &str) -> u64 {
    let Some(token) = line
        .strip_prefix("A ")
        .and_then(|rest| rest.strip_prefix(key))
        .and_then(|rest| rest.strip_prefix(' '))
    else {
        panic!("expected a grant `A {key} <token>`, got {line:?}");
    };
    match token.parse::<u64>() {
        Ok(t) if t > 0 && token == t.to_string() => t,
        _ => panic!("grant of {key} has a bad token: {line:?}"),
    }
}

/// Panics unless `line` is `E <op> <key> <reason>` with a non-empty reason.
/// `key: None` accepts any key field (the spec leaves it to the node whether
/// a bad key can be echoed).
pub fn assert_error(line: &str, op: &str, key: Option<&str>) {
    let mut fields = line.splitn(4, ' ');
    let ok = fields.next() == Some("E")
        && fields.next() == Some(op)
        && fields
            .next()
            .is_some_and(|k| key.is_none_or(|want| k == want))
        && fields.next().is_some_and(|reason| !reason.is_empty());
    if !ok {
        let key = key.unwrap_or("<any>");
        panic!("expected `E {op} {key} <reason>`, got {line:?}");
    }
}

/// Panics unless `line` is some `E` response with op, key and reason fields.
pub fn assert_any_error(line: &str) {
    let fields: Vec<&str> = line.splitn(4, ' ').collect();
    if fields.len() < 4 || fields[0] != "E" || fields[3].is_empty() {
        panic!("expected `E <op> <key> <reason>`, got {line:?}");
    }
}

/// The (op, key) of the request a response answers, by the matching rule of
/// the protocol: `A`/`T` answer `A`, `R` and `K` themselves, `N`/`M`/`E` name
/// their op, and `S` has no key.
pub fn answers(line: &str) -> (String, String) {
    let fields: Vec<&str> = line.split(' ').collect();
    let pair = |op: &str, key: Option<&&str>| key.map(|k| (op.to_owned(), (*k).to_owned()));
    let found = match fields.first().copied() {
        Some("A") | Some("T") => pair("A", fields.get(1)),
        Some("R") => pair("R", fields.get(1)),
        Some("K") => pair("K", fields.get(1)),
        Some("N") | Some("M") | Some("E") => match fields.get(1) {
            Some(op) => pair(op, fields.get(2)),
            None => None,
        },
        Some("S") => Some(("S".to_owned(), String::new())),
        _ => None,
    };
    match found {
        Some(pair) => pair,
        None => panic!("not a protocol response: {line:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grant_token_reads_the_token() {
        assert_eq!(grant_token("A k 12", "k"), 12);
    }

    #[test]
    #[should_panic(expected = "bad token")]
    fn grant_token_rejects_zero() {
        grant_token("A k 0", "k");
    }

    #[test]
    #[should_panic(expected = "bad token")]
    fn grant_token_rejects_leading_zero() {
        grant_token("A k 012", "k");
    }

    #[test]
    #[should_panic(expected = "expected a grant")]
    fn grant_token_rejects_other_key() {
        grant_token("A kk 12", "k");
    }

    #[test]
    fn assert_error_accepts_reason_with_spaces() {
        assert_error("E A k lease must be greater than 0", "A", Some("k"));
        assert_error("E ? ? line too long", "?", Some("?"));
        assert_error("E A whatever bad key", "A", None);
    }

    #[test]
    #[should_panic(expected = "expected `E A k <reason>`")]
    fn assert_error_needs_a_reason() {
        assert_error("E A k", "A", Some("k"));
    }

    #[test]
    fn answers_follows_the_matching_rule() {
        assert_eq!(answers("T k"), ("A".to_owned(), "k".to_owned()));
        assert_eq!(answers("N K k"), ("K".to_owned(), "k".to_owned()));
        assert_eq!(answers("M R k -"), ("R".to_owned(), "k".to_owned()));
        assert_eq!(answers("S role=single").0, "S");
    }
}
