//! The few Baton protocol lines the driver sends and reads, written and
//! parsed by hand so the driver's own cost stays small and it does not
//! depend on the crates it measures.

/// Appends `A <key> <wait> <lease>\n`, durations as protocol seconds.
pub fn acquire(out: &mut Vec<u8>, key: &[u8], wait_ms: u64, lease_ms: u64) {
    out.extend_from_slice(b"A ");
    out.extend_from_slice(key);
    out.push(b' ');
    push_seconds(out, wait_ms);
    out.push(b' ');
    push_seconds(out, lease_ms);
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
