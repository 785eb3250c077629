//! Helpers shared by the client's integration tests.

#![allow(dead_code)] // each test file uses its own subset

use std::net::SocketAddr;
use std::time::Duration;

use baton_client::Client;

pub mod fake;

/// A client of `addrs` with timeouts suited to a loaded test machine.
pub async fn client(addrs: &[SocketAddr]) -> Client {
    Client::builder()
        .servers(addrs.iter().map(ToString::to_string))
        .connect_timeout(Duration::from_secs(2))
        .request_timeout(Duration::from_secs(5))
        .build()
        .await
        .unwrap_or_else(|err| panic!("client of {addrs:?}: {err}"))
}

pub fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}
