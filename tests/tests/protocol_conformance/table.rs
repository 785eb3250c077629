//! The text's side of the conformance test: the documented refusals, byte
//! for byte, and the patterns answers are checked against.

/// Whether `line` fits `pattern` (see the module doc).
pub(crate) fn fits(line: &str, pattern: &str) -> bool {
    let (line, pattern) = (line.as_bytes(), pattern.as_bytes());
    if let Some(rest) = pattern.strip_prefix(b"{#}") {
        let digits = line.iter().take_while(|b| b.is_ascii_digit()).count();
        return line.first().is_some_and(|&b| (b'1'..=b'9').contains(&b))
            && (1..=digits).any(|n| fits_bytes(&line[n..], rest));
    }
    fits_bytes(line, pattern)
}

fn fits_bytes(line: &[u8], pattern: &[u8]) -> bool {
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    if pattern.starts_with(b"{#}") {
        return fits(&text(line), &text(pattern));
    }
    if let Some(rest) = pattern.strip_prefix(b"{~}") {
        let whole = line.iter().take_while(|b| b.is_ascii_digit()).count();
        let frac = line.get(whole + 1..whole + 4);
        return whole > 0
            && line.get(whole) == Some(&b'.')
            && frac.is_some_and(|f| f.iter().all(u8::is_ascii_digit))
            && fits_bytes(&line[whole + 4..], rest);
    }
    if let Some(rest) = pattern.strip_prefix(b"{*}") {
        let field = line.iter().take_while(|&&b| b != b' ').count();
        return (1..=field).any(|n| fits_bytes(&line[n..], rest));
    }
    match (pattern.first(), line.first()) {
        (None, None) => true,
        (Some(p), Some(l)) if p == l => fits_bytes(&line[1..], &pattern[1..]),
        _ => false,
    }
}

/// Every reason docs/protocol.md writes out, byte for byte. The node runs
/// with [`super::LIMIT_FLAGS`]; the key `k` is free throughout.
pub(crate) fn documented_errors() -> Vec<(Vec<u8>, String)> {
    let key250 = "k".repeat(250);
    let key251 = "k".repeat(251);
    let name32 = "n".repeat(32);
    let value129 = "v".repeat(129);
    let mut table: Vec<(Vec<u8>, String)> = [
        ("", "E ? ? empty line"),
        ("X foo", "E ? ? unknown op"),
        ("a k 1 1", "E ? ? unknown op"),
        ("s", "E ? ? unknown op"),
        ("AA k 1 1", "E ? ? unknown op"),
        ("A\tk 1 1", "E ? ? unknown op"),
        (" S", "E ? ? empty field"),
        ("A", "E A ? missing key"),
        ("A k", "E A k missing wait"),
        ("A k 1", "E A k missing lease"),
        ("A k 1 1 1", "E A k too many fields"),
        ("A k 1 1 ", "E A k empty field"),
        ("A  k 1 1", "E A ? empty field"),
        ("A k  1 1", "E A k empty field"),
        (
            "A k 1.2345 1",
            "E A k wait is not a decimal number of seconds with at most 3 decimals",
        ),
        (
            "A k 1 1.2345",
            "E A k lease is not a decimal number of seconds with at most 3 decimals",
        ),
        ("A k 6 1", "E A k wait exceeds the maximum of 5 seconds"),
        ("A k 5.001 1", "E A k wait exceeds the maximum of 5 seconds"),
        (
            "A k 1 10.001",
            "E A k lease exceeds the maximum of 10 seconds",
        ),
        (
            "A k 99999999999999999999 1",
            "E A k wait exceeds the maximum of 5 seconds",
        ),
        ("K k 1 11", "E K k lease exceeds the maximum of 10 seconds"),
        ("S x", "E S ? too many fields"),
        ("S ", "E S ? empty field"),
        ("R k", "E R k missing token"),
        ("R k 1 1", "E R k too many fields"),
        ("K k 1", "E K k missing lease"),
        ("Q", "E Q ? missing key"),
        ("Q k x", "E Q k too many fields"),
        ("U", "E U ? missing user"),
        ("U u", "E U u missing secret"),
        ("U u s x", "E U u too many fields"),
        (
            "A bad-lease 0 0",
            "E A bad-lease lease must be greater than 0",
        ),
        ("A k 1 0.000", "E A k lease must be greater than 0"),
        ("K k 1 0", "E K k lease must be greater than 0"),
        (
            "A k 1 1 permits=0",
            "E A k permits must be a decimal integer from 1 to 10000",
        ),
        (
            "A k 1 1 permits=",
            "E A k permits must be a decimal integer from 1 to 10000",
        ),
        (
            "A k 1 1 permits=01",
            "E A k permits must be a decimal integer from 1 to 10000",
        ),
        (
            "A k 1 1 permits=+2",
            "E A k permits must be a decimal integer from 1 to 10000",
        ),
        (
            "A k 1 1 permits=10001",
            "E A k permits must be a decimal integer from 1 to 10000",
        ),
        (
            "A k 1 1 permits=99999999999999999999",
            "E A k permits must be a decimal integer from 1 to 10000",
        ),
        (
            "A k 1 1 mode=shared permits=2",
            "E A k shared locks take no permits",
        ),
        (
            "A k 1 1 mode=SHARED",
            "E A k mode must be shared or exclusive",
        ),
        ("A k 1 1 mode=", "E A k mode must be shared or exclusive"),
        ("A k 1 1 value=", "E A k value is empty"),
        (
            "A k 1 1 value=-",
            "E A k value cannot be -, which means no value",
        ),
        ("A k 1 1 x=1", "E A k unknown option x"),
        ("A k 1 1 MODE=shared", "E A k unknown option MODE"),
        ("A k 1 1 =x", "E A k unknown option ?"),
        ("A k 1 1 x", "E A k too many fields"),
        ("A k 1 1 x=1 y", "E A k unknown option x"),
        ("A k 1 1 y x=1", "E A k too many fields"),
        (
            "A k 1 1 mode=shared mode=shared",
            "E A k repeated option mode",
        ),
        ("V k 7", "E V k missing value"),
        ("V k 7 a b", "E V k too many fields"),
        ("W k 1", "E W k missing seen"),
        ("W k 1 - x", "E W k too many fields"),
        ("W k 6 -", "E W k wait exceeds the maximum of 5 seconds"),
        (
            "W k x -",
            "E W k wait is not a decimal number of seconds with at most 3 decimals",
        ),
    ]
    .iter()
    .map(|(l, a)| (l.as_bytes().to_vec(), (*a).to_owned()))
    .collect();
    let seen_refused = "seen must be - or a state tag from a Q or W answer";
    for seen in [
        "007",
        "0",
        "1.0.0123456789abcdef",
        "1.1.0123456789ABCDEF",
        "1.1.0123456789abcde",
        "1.1",
        "+5",
        "18446744073709551616",
    ] {
        table.push((
            format!("W k 1 {seen}").into_bytes(),
            format!("E W k {seen_refused}"),
        ));
    }
    let token_refused = "token must be a decimal integer greater than 0";
    for token in ["0", "00", "+1", "-1", "1.5", "0x10", "18446744073709551616"] {
        table.push((
            format!("R k {token}").into_bytes(),
            format!("E R k {token_refused}"),
        ));
        table.push((
            format!("K k {token} 1").into_bytes(),
            format!("E K k {token_refused}"),
        ));
        table.push((
            format!("V k {token} x").into_bytes(),
            format!("E V k {token_refused}"),
        ));
    }
    let wait_refused = "wait is not a decimal number of seconds with at most 3 decimals";
    for wait in [".5", "1.", "+1", "-1", "1e3", "1,5", "1.2.3", "0x10", "١"] {
        table.push((
            format!("A k {wait} 1").into_bytes(),
            format!("E A k {wait_refused}"),
        ));
    }
    let mut raw = |line: &[u8], answer: String| table.push((line.to_vec(), answer));
    raw(
        format!("Q {key251}").as_bytes(),
        format!("E Q {key251} key is 251 bytes, longer than 250"),
    );
    raw(
        format!("Q {key250} x").as_bytes(),
        format!("E Q {key250} too many fields"),
    );
    raw(b"A k\x01 1 1", "E A ? key has a forbidden byte 0x01".into());
    raw(b"A k\x7f 1 1", "E A ? key has a forbidden byte 0x7f".into());
    raw(b"Q k\r\r", "E Q ? key has a forbidden byte 0x0d".into());
    raw(b"Q k\rx", "E Q ? key has a forbidden byte 0x0d".into());
    raw(
        b"A k 1 1 value=a\x01",
        "E A k value has a forbidden byte 0x01".into(),
    );
    raw(
        format!("A k 1 1 value={value129}").as_bytes(),
        "E A k value is 129 bytes, longer than 128".into(),
    );
    raw(
        format!("V k 1 {value129}").as_bytes(),
        "E V k value is 129 bytes, longer than 128".into(),
    );
    raw(
        format!("A k 1 1 {name32}=1").as_bytes(),
        format!("E A k unknown option {name32}"),
    );
    raw(
        format!("A k 1 1 n{name32}=1").as_bytes(),
        "E A k unknown option ?".into(),
    );
    raw(
        b"U u s\x7f",
        "E U u secret has a space, a control character or DEL".into(),
    );
    raw(
        format!("U u {}", "s".repeat(251)).as_bytes(),
        "E U u secret is 251 bytes, longer than 250".into(),
    );
    table
}
