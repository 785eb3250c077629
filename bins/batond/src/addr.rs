//! `host:port` addresses on batond's command line (`--listen`, `--peers`,
//! `--advertise`, `--http-listen`): the syntax is checked at start-up, a
//! name is resolved where it is used. A listen address is resolved once,
//! to bind; a peer's name is resolved by every dial (a peer restarted with
//! a new IP is found), so a peer whose name does not resolve yet does not
//! stop start-up.

use std::net::{SocketAddr, ToSocketAddrs};

pub use baton_proto::host_port;

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
