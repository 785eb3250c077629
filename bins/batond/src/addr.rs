//! `host:port` addresses on batond's command line (`--listen`, `--peers`,
//! `--advertise`, `--http-listen`): the syntax is checked at start-up, a
//! name is resolved where it is used. A listen address is resolved once,
//! to bind; a peer's name is resolved by every dial (a peer restarted with
//! a new IP is found), so a peer whose name does not resolve yet does not
//! stop start-up.

use std::net::{SocketAddr, ToSocketAddrs};

/// The longest address taken: a DNS name (253) and a port.
const MAX_ADDR_LEN: usize = 253 + 1 + 5;

/// clap's parser for a `host:port` flag: an IP address (`[v6]` in
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

/// The text a node is known by in `--peers` when it gave no --advertise:
/// an IP address in its canonical form (as before host names were taken),
/// a name as written.
pub fn as_known(text: &str) -> String {
    text.parse::<SocketAddr>()
        .map_or_else(|_| text.to_string(), |addr| addr.to_string())
}

/// Whether `text` is a name rather than an IP address.
pub fn is_name(text: &str) -> bool {
    text.parse::<SocketAddr>().is_err()
}

/// The address to bind for `text` (`flag` names it in the error): an IP
/// address as is, a name resolved now (its first address).
pub fn resolve_to_bind(flag: &str, text: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let mut found = text
        .to_socket_addrs()
        .map_err(|e| format!("{flag} {text}: cannot resolve the name: {e}"))?;
    found
        .next()
        .ok_or_else(|| format!("{flag} {text}: the name has no address"))
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

    #[test]
    fn names_resolve_to_bind_and_ips_are_kept() {
        let local = resolve_to_bind("--listen", "localhost:7411").expect("localhost");
        assert!(local.ip().is_loopback() && local.port() == 7411, "{local}");
        assert_eq!(
            resolve_to_bind("--listen", "127.0.0.1:1"),
            Ok(SocketAddr::from(([127, 0, 0, 1], 1)))
        );
        assert_eq!(as_known("127.0.0.1:7411"), "127.0.0.1:7411");
        assert_eq!(as_known("localhost:7411"), "localhost:7411");
    }
}
