//! Decimal u64 text, read and written without allocating.

use bytes::{BufMut, BytesMut};

/// Room for the 20 digits of `u64::MAX`.
pub(crate) type DigitBuf = [u8; 20];

/// Writes `n` in decimal at the end of `buf` and returns the digits.
pub(crate) fn digits(mut n: u64, buf: &mut DigitBuf) -> &[u8] {
    let mut start = buf.len();
    loop {
        start -= 1;
        // `n % 10` is below 10, so the cast cannot truncate.
        buf[start] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[start..];
        }
    }
}

pub(crate) fn put_u64(dst: &mut BytesMut, n: u64) {
    let mut buf = DigitBuf::default();
    dst.put_slice(digits(n, &mut buf));
}

pub(crate) fn is_digits(s: &[u8]) -> bool {
    !s.is_empty() && s.iter().all(u8::is_ascii_digit)
}

/// Reads ASCII digits only: no sign, no space, not empty. `None` also on
/// overflow, which a peer can cause at will.
pub(crate) fn parse_u64(s: &[u8]) -> Option<u64> {
    if !is_digits(s) {
        return None;
    }
    s.iter().try_fold(0u64, |acc, &d| {
        acc.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_decimal() {
        let mut buf = DigitBuf::default();
        assert_eq!(digits(0, &mut buf), b"0");
        assert_eq!(digits(7, &mut buf), b"7");
        assert_eq!(digits(1057, &mut buf), b"1057");
        assert_eq!(digits(u64::MAX, &mut buf), b"18446744073709551615");
        let mut dst = BytesMut::new();
        put_u64(&mut dst, 42);
        put_u64(&mut dst, 0);
        assert_eq!(&dst[..], b"420");
    }

    #[test]
    fn reads_digits_only() {
        assert_eq!(parse_u64(b"0"), Some(0));
        assert_eq!(parse_u64(b"007"), Some(7));
        assert_eq!(parse_u64(b"18446744073709551615"), Some(u64::MAX));
        for bad in [
            &b""[..],
            b"18446744073709551616",
            b"99999999999999999999999",
            b"+1",
            b"-1",
            b" 1",
            b"1 ",
            b"0x10",
            b"1.0",
            "\u{ff11}".as_bytes(),
        ] {
            assert_eq!(parse_u64(bad), None, "{bad:?}");
        }
    }
}
