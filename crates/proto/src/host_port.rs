//! `host:port` addresses as nodes and clients are given them: an IP
//! address (`[v6]` in brackets) or a DNS name, and a port. Only the syntax
//! is checked here; a name is resolved where it is dialled or bound.

use std::net::SocketAddr;

/// The longest `host:port` anywhere in Baton (flags, peer lists, Raft
/// membership): the longest DNS name (253 bytes), a colon and a port's 5
/// digits.
pub const MAX_ADDR_LEN: usize = 253 + 1 + 5;

/// Checks `host:port` (also clap's parser for such a flag): an IP address (`[v6]` in
/// brackets) or a DNS name, and a port.
pub fn host_port(text: &str) -> Result<String, String> {
    let expected = || {
        format!("expected host:port (e.g. 127.0.0.1:7411 or baton-1.internal:7411), got {text:?}")
    };
    if text.len() > MAX_ADDR_LEN {
        return Err(format!("an address is at most {MAX_ADDR_LEN} bytes"));
    }
    if text.parse::<SocketAddr>().is_ok() {
        return Ok(text.to_string());
    }
    let (host, port) = text.rsplit_once(':').ok_or_else(expected)?;
    if port.parse::<u16>().is_err() || port.starts_with('+') {
        return Err(format!(
            "{}: the port must be a number up to 65535",
            expected()
        ));
    }
    if !is_dns_name(host) {
        return Err(expected());
    }
    Ok(text.to_string())
}

/// Letters, digits, `-` and `_` in dot-separated labels of 1 to 63 bytes.
fn is_dns_name(host: &str) -> bool {
    let host = host.strip_suffix('.').unwrap_or(host);
    !host.is_empty()
        && host.split('.').all(|label| {
            (1..=63).contains(&label.len())
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_and_names_with_ports_are_taken() {
        for good in [
            "127.0.0.1:7411",
            "[::1]:7411",
            "localhost:0",
            "baton-1.example.internal:65535",
            "node_2:7411",
            "host.:1",
        ] {
            assert_eq!(host_port(good), Ok(good.to_string()), "{good}");
        }
    }

    #[test]
    fn anything_else_is_refused() {
        let long = format!("{}:1", "a".repeat(300));
        for bad in [
            "",
            "localhost",
            ":7411",
            "localhost:",
            "localhost:65536",
            "localhost:+1",
            "local host:1",
            "-bad:1",
            "a..b:1",
            "::1:7411",
            "host:port",
            "é:1",
            long.as_str(),
        ] {
            assert!(host_port(bad).is_err(), "{bad}");
        }
    }
}
