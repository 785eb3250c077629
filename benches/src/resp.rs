//! The few Redis (RESP2) commands and replies the driver needs, written
//! and parsed by hand like Baton's lines, so Redis is driven by the same
//! loops with the same per-request cost and needs no client crate.

use crate::wire::push_u64;

/// The standard compare-and-delete release: delete the key only if it
/// still holds this client's value.
pub const RELEASE_SCRIPT: &str =
    "if redis.call('get',KEYS[1]) == ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end";

/// Appends one command as a RESP array of bulk strings.
pub fn command(out: &mut Vec<u8>, args: &[&[u8]]) {
    out.push(b'*');
    push_u64(out, args.len() as u64);
    out.extend_from_slice(b"\r\n");
    for arg in args {
        out.push(b'$');
        push_u64(out, arg.len() as u64);
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
}

/// `SET key value NX PX lease`: the acquire.
pub fn set_nx(out: &mut Vec<u8>, key: &[u8], value: u64, lease_ms: u64) {
    let mut value_text = Vec::with_capacity(20);
    push_u64(&mut value_text, value);
    let mut lease = Vec::with_capacity(20);
    push_u64(&mut lease, lease_ms);
    command(out, &[b"SET", key, &value_text, b"NX", b"PX", &lease]);
}

/// `EVALSHA sha 1 key value`: the release.
pub fn release(out: &mut Vec<u8>, sha: &[u8], key: &[u8], value: u64) {
    let mut value_text = Vec::with_capacity(20);
    push_u64(&mut value_text, value);
    command(out, &[b"EVALSHA", sha, b"1", key, &value_text]);
}

/// One reply line (without CRLF), as far as the driver cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RespReply<'a> {
    /// `+OK`: SET NX took the key.
    Ok,
    /// `$-1`: SET NX found the key taken.
    Nil,
    /// `:n`
    Int(i64),
    /// `$n`: a bulk string of n bytes follows on the next line.
    Bulk(usize),
    /// `-ERR ...`
    Error(&'a [u8]),
    Other,
}

pub fn parse(line: &[u8]) -> RespReply<'_> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let Some((&kind, rest)) = line.split_first() else {
        return RespReply::Other;
    };
    let number = || std::str::from_utf8(rest).ok()?.parse::<i64>().ok();
    match kind {
        b'+' if rest == b"OK" => RespReply::Ok,
        b'$' if rest == b"-1" => RespReply::Nil,
        b'$' => number()
            .and_then(|n| usize::try_from(n).ok())
            .map_or(RespReply::Other, RespReply::Bulk),
        b':' => number().map_or(RespReply::Other, RespReply::Int),
        b'-' => RespReply::Error(rest),
        _ => RespReply::Other,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test
mod tests {
    use super::*;

    #[test]
    fn writes_acquire_and_release() {
        let mut out = Vec::new();
        set_nx(&mut out, b"k1", 42, 10_000);
        release(&mut out, b"abc", b"k1", 42);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "*6\r\n$3\r\nSET\r\n$2\r\nk1\r\n$2\r\n42\r\n$2\r\nNX\r\n$2\r\nPX\r\n$5\r\n10000\r\n\
             *5\r\n$7\r\nEVALSHA\r\n$3\r\nabc\r\n$1\r\n1\r\n$2\r\nk1\r\n$2\r\n42\r\n"
        );
    }

    #[test]
    fn parses_replies() {
        assert_eq!(parse(b"+OK\r"), RespReply::Ok);
        assert_eq!(parse(b"$-1\r"), RespReply::Nil);
        assert_eq!(parse(b":1\r"), RespReply::Int(1));
        assert_eq!(parse(b":0"), RespReply::Int(0));
        assert_eq!(parse(b"$40\r"), RespReply::Bulk(40));
        assert_eq!(
            parse(b"-NOSCRIPT No matching script\r"),
            RespReply::Error(b"NOSCRIPT No matching script")
        );
        for junk in [&b""[..], b"+PONG", b":x", b"$-2", b"*1", b"A k 1"] {
            assert_eq!(parse(junk), RespReply::Other, "{junk:?}");
        }
    }
}
