//! The few Baton protocol lines the driver sends and reads, written and
//! parsed by hand so the driver's own cost stays small and it does not
//! depend on the crates it measures.

/// Appends `A <key> <wait> <lease>\n`, durations as protocol seconds.
pub fn acquire(out: &mut Vec<u8>, key: &[u8], wait_ms: u64, lease_ms: u64) {
    acquire_with(out, key, wait_ms, lease_ms, &[]);
}

/// Appends a protocol 1.2 acquire, `A <key> <wait> <lease> <option>...\n`
/// (`permits=4`, `mode=shared`); with no option, the plain acquire.
pub fn acquire_with(out: &mut Vec<u8>, key: &[u8], wait_ms: u64, lease_ms: u64, options: &[&[u8]]) {
    out.extend_from_slice(b"A ");
    out.extend_from_slice(key);
    out.push(b' ');
    push_seconds(out, wait_ms);
    out.push(b' ');
    push_seconds(out, lease_ms);
    for option in options {
        out.push(b' ');
        out.extend_from_slice(option);
    }
    out.push(b'\n');
}

/// Appends `W <key> <wait> <seen>\n` (protocol 1.2), `seen` a state tag or `-`.
pub fn watch(out: &mut Vec<u8>, key: &[u8], wait_ms: u64, seen: &[u8]) {
    out.extend_from_slice(b"W ");
    out.extend_from_slice(key);
    out.push(b' ');
    push_seconds(out, wait_ms);
    out.push(b' ');
    out.extend_from_slice(seen);
    out.push(b'\n');
}

/// Appends `Q <key>\n`.
pub fn query(out: &mut Vec<u8>, key: &[u8]) {
    out.extend_from_slice(b"Q ");
    out.extend_from_slice(key);
    out.push(b'\n');
}

/// Appends `R <key> <token>\n`.
pub fn release(out: &mut Vec<u8>, key: &[u8], token: u64) {
    out.extend_from_slice(b"R ");
    out.extend_from_slice(key);
    out.push(b' ');
    push_u64(out, token);
    out.push(b'\n');
}

/// A response line, as far as the driver cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reply<'a> {
    /// `A <key> <token>`
    Granted { key: &'a [u8], token: u64 },
    /// `R <key>`
    Released { key: &'a [u8] },
    /// `T <key>`: the acquire's wait ran out.
    TimedOut { key: &'a [u8] },
    /// Anything else (`N`, `M`, `E`, garbage): never expected under load.
    Other,
}

/// Parses one response line without its LF (a trailing CR is dropped).
pub fn parse_reply(line: &[u8]) -> Reply<'_> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let mut fields = line.split(|&b| b == b' ');
    let (Some(op), Some(key)) = (fields.next(), fields.next()) else {
        return Reply::Other;
    };
    if key.is_empty() {
        return Reply::Other;
    }
    let third = fields.next();
    if fields.next().is_some() {
        return Reply::Other;
    }
    match (op, third) {
        (b"A", Some(token)) => match parse_token(token) {
            Some(token) => Reply::Granted { key, token },
            None => Reply::Other,
        },
        (b"R", None) => Reply::Released { key },
        (b"T", None) => Reply::TimedOut { key },
        _ => Reply::Other,
    }
}

/// The key and state tag of a watch's answer, `W <key> <fields of Q>
/// state=<tag>` (protocol 1.2: `state=` always last), or `None` for any
/// other line.
pub fn parse_watched(line: &[u8]) -> Option<(&[u8], &[u8])> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let rest = line.strip_prefix(b"W ")?;
    let mut fields = rest.split(|&b| b == b' ');
    let key = fields.next().filter(|key| !key.is_empty())?;
    let state = fields.next_back()?.strip_prefix(b"state=")?;
    (!state.is_empty()).then_some((key, state))
}

/// Whether `line` is the answer to `Q <key>`.
pub fn is_query_answer(line: &[u8], key: &[u8]) -> bool {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    line.strip_prefix(b"Q ")
        .and_then(|rest| rest.strip_prefix(key))
        .is_some_and(|rest| rest.starts_with(b" "))
}

/// A decimal u64 greater than 0, digits only.
fn parse_token(text: &[u8]) -> Option<u64> {
    if text.is_empty() || !text.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let value = text.iter().try_fold(0u64, |acc, &d| {
        acc.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })?;
    (value > 0).then_some(value)
}

/// Milliseconds as protocol seconds: 10000 -> `10`, 1500 -> `1.5`.
pub fn push_seconds(out: &mut Vec<u8>, ms: u64) {
    push_u64(out, ms / 1000);
    let frac = ms % 1000;
    if frac != 0 {
        out.push(b'.');
        let digits = [frac / 100, frac / 10 % 10, frac % 10];
        let used = if !frac.is_multiple_of(10) {
            3
        } else if !frac.is_multiple_of(100) {
            2
        } else {
            1
        };
        out.extend(digits[..used].iter().map(|&d| b'0' + d as u8));
    }
}

pub fn push_u64(out: &mut Vec<u8>, mut value: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test
mod tests {
    use super::*;

    #[test]
    fn writes_requests() {
        let mut out = Vec::new();
        acquire(&mut out, b"k7", 5000, 10_000);
        acquire(&mut out, b"k", 1500, 1);
        acquire(&mut out, b"k", 0, 2120);
        release(&mut out, b"k7", 18_446_744_073_709_551_615);
        release(&mut out, b"x", 1);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "A k7 5 10\nA k 1.5 0.001\nA k 0 2.12\nR k7 18446744073709551615\nR x 1\n"
        );
    }

    #[test]
    fn parses_the_replies_the_driver_expects() {
        assert_eq!(
            parse_reply(b"A k1 1057"),
            Reply::Granted {
                key: b"k1",
                token: 1057
            }
        );
        assert_eq!(parse_reply(b"R k1\r"), Reply::Released { key: b"k1" });
        assert_eq!(parse_reply(b"T k1"), Reply::TimedOut { key: b"k1" });
    }

    #[test]
    fn writes_and_reads_protocol_1_2_lines() {
        let mut out = Vec::new();
        acquire_with(&mut out, b"pool", 10_000, 10_000, &[b"permits=4"]);
        acquire_with(&mut out, b"rw", 0, 500, &[b"mode=shared"]);
        watch(&mut out, b"fan", 120_000, b"-");
        query(&mut out, b"fan");
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "A pool 10 10 permits=4\nA rw 0 0.5 mode=shared\nW fan 120 -\nQ fan\n"
        );
        let answer = b"W fan token=17 lease=9.998 waiters=0 state=17";
        assert_eq!(parse_watched(answer), Some((&b"fan"[..], &b"17"[..])));
        let shared = b"W rw token=9 lease=1.000 waiters=0 permits=1 mode=shared holders=2 \
            holder=8,1.000,- holder=9,1.000,- state=9.2.0c9a4f2e61d8b357";
        assert_eq!(
            parse_watched(shared),
            Some((&b"rw"[..], &b"9.2.0c9a4f2e61d8b357"[..]))
        );
        for other in [
            &b"W fan"[..],
            b"W fan token=- state=",
            b"Q fan state=-",
            b"W  state=-",
        ] {
            assert_eq!(parse_watched(other), None, "{other:?}");
        }
        assert!(is_query_answer(b"Q fan token=- lease=- waiters=0", b"fan"));
        assert!(!is_query_answer(
            b"Q fanout token=- lease=- waiters=0",
            b"fan"
        ));
        assert!(!is_query_answer(b"E Q fan bad", b"fan"));
    }

    #[test]
    fn everything_else_is_other() {
        for line in [
            &b""[..],
            b"A",
            b"A k1",
            b"A k1 0",
            b"A k1 -3",
            b"A k1 18446744073709551616",
            b"A k1 12 extra",
            b"R k1 5",
            b"R  k1",
            b"N R k1",
            b"M A k1 -",
            b"E ? ? unknown op",
            b"S role=single",
        ] {
            assert_eq!(parse_reply(line), Reply::Other, "{line:?}");
        }
    }
}
