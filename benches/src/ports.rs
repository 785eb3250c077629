//! Free loopback ports for servers that must be told their port up front
//! (cluster peers list each other; Redis, etcd and ZooKeeper take a port).

use std::net::{Ipv4Addr, SocketAddr, TcpListener};

/// Distinct ports the OS just handed out on 127.0.0.1. The listeners are
/// closed before returning, so another process could take one in between;
/// on a loopback bench box that race is rare and ends in a clear start-up
/// error, not a wrong figure.
pub fn free_ports(count: usize) -> std::io::Result<Vec<SocketAddr>> {
    // All held at once so the OS cannot hand the same port out twice.
    let listeners = (0..count)
        .map(|_| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)))
        .collect::<std::io::Result<Vec<_>>>()?;
    listeners.iter().map(TcpListener::local_addr).collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test
mod tests {
    use super::*;

    #[test]
    fn distinct_loopback_ports() {
        let ports = free_ports(3).unwrap();
        assert_eq!(ports.len(), 3);
        assert!(ports.iter().all(|a| a.ip().is_loopback() && a.port() != 0));
        assert_ne!(ports[0], ports[1]);
        assert_ne!(ports[1], ports[2]);
        assert_ne!(ports[0], ports[2]);
    }
}
