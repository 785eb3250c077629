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

/// `n` distinct free loopback addresses, for a cluster's peer list.
pub fn distinct_free_addrs(n: usize) -> Vec<SocketAddr> {
    let mut addrs: Vec<SocketAddr> = Vec::with_capacity(n);
    let mut tries = 0;
    while addrs.len() < n {
        tries += 1;
        if tries > 100 * n.max(1) {
            panic!("cannot find {n} distinct free loopback ports");
        }
        let addr = free_addr();
        if !addrs.contains(&addr) {
            addrs.push(addr);
        }
    }
    addrs
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
