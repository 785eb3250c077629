//! Free loopback addresses, for tests that must know a node's address before
//! it starts (restarts on the same address, peer lists).

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
