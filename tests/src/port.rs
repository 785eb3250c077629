//! Free loopback addresses, for tests that must know a node's address before
//! it starts (restarts on the same address, peer lists), and the cluster
//! nodes started on them.

use std::net::{SocketAddr, TcpListener};

/// A 127.0.0.1 address whose port was free a moment ago.
///
/// The port is released before returning, so another process could take it in
/// between; on a test machine that race is rare enough, and callers that
/// restart a node retry the bind anyway.
pub fn free_addr() -> SocketAddr {
    let listener = match TcpListener::bind("127.0.0.1:0") {
        Ok(l) => l,
        Err(e) => panic!("cannot bind 127.0.0.1:0 to find a free port: {e}"),
    };
    match listener.local_addr() {
        Ok(addr) => addr,
        Err(e) => panic!("cannot read the address of a bound listener: {e}"),
    }
}

/// `n` distinct loopback addresses whose ports the OS just handed out:
/// all held at once, so it cannot hand the same port out twice, then
/// released (another process could take one in between; the start-up of
/// whatever binds it then fails clearly). The bench uses it too.
pub fn free_addrs(n: usize) -> std::io::Result<Vec<SocketAddr>> {
    let listeners = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<std::io::Result<Vec<_>>>()?;
    listeners.iter().map(TcpListener::local_addr).collect()
}

/// `n` distinct free loopback addresses, for a cluster's peer list.
pub fn distinct_free_addrs(n: usize) -> Vec<SocketAddr> {
    match free_addrs(n) {
        Ok(addrs) => addrs,
        Err(e) => panic!("cannot find {n} free loopback ports: {e}"),
    }
}

/// A peer list as `--peers` takes it.
pub fn peer_list(peers: &[SocketAddr]) -> String {
    peers
        .iter()
        .map(SocketAddr::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// Starts one `batond --peers <all> --mode <mode>` on each of `peers`, in
/// order, node `i` with `extra(i)` after those; each must announce the
/// address it was given.
pub fn start_cluster_nodes(
    peers: &[SocketAddr],
    mode: &str,
    extra: impl Fn(usize) -> Vec<String>,
) -> Vec<crate::Batond> {
    let list = peer_list(peers);
    peers
        .iter()
        .enumerate()
        .map(|(i, addr)| {
            let own = extra(i);
            let mut args = vec!["--peers", list.as_str(), "--mode", mode];
            args.extend(own.iter().map(String::as_str));
            let node = crate::Batond::start_at(*addr, &args);
            assert_eq!(
                node.addr(),
                *addr,
                "batond announced another address than its --listen"
            );
            node
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_addrs_are_distinct_loopback_ports() {
        let addrs = free_addrs(3).expect("three free ports");
        assert_eq!(addrs.len(), 3);
        assert!(addrs.iter().all(|a| a.ip().is_loopback() && a.port() != 0));
        assert_ne!(addrs[0], addrs[1]);
        assert_ne!(addrs[1], addrs[2]);
        assert_ne!(addrs[0], addrs[2]);
    }
}
