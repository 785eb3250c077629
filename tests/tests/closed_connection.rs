//! A node thawed after SIGSTOP finds an acquire and the client's close in
//! the same socket buffer: it must not grant the key to a client that is
//! gone (the grant would go nowhere and the key stay held by nobody until
//! its lease ran out), in every mode. Under SIGSTOP the kernel still takes
//! the bytes and the FIN, so the order is certain.

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test

use std::net::SocketAddr;
use std::time::Duration;

use baton_tests::cluster::Cluster;
use baton_tests::http::{http_get, Scrape};
use baton_tests::raft::{RaftCluster, SETTLE};
use baton_tests::{free_addr, free_addrs, grant_token, Batond};
use tokio::time::Instant;

/// Far longer than the test: a grant that went to the closed connection
/// would still hold the key when the other client asks.
const LEASE_S: u64 = 120;

/// An acquire of `k` that would hold it far longer than the test.
fn long_acquire() -> String {
    format!("A k 0 {LEASE_S}")
}

/// A single node, and the address of its metrics.
fn single_node() -> (Batond, SocketAddr) {
    let http = free_addr();
    (Batond::start(&["--http-listen", &http.to_string()]), http)
}

/// The node's client connections: open now, and accepted in all.
async fn connections(http: SocketAddr) -> (f64, f64) {
    let reply = http_get(http, "/metrics", None).await;
    let metrics = Scrape::parse(&reply.body);
    (
        metrics.get("baton_connections_open"),
        metrics.get("baton_connections_total"),
    )
}

/// Polls the node's metrics until its connections are `want`.
async fn until_connections(http: SocketAddr, want: (f64, f64)) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = connections(http).await;
        if now == want {
            return;
        }
        let late = Instant::now() >= deadline;
        assert!(!late, "connections (open, total) {now:?}, not {want:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// When the client that will close connects.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Dialled {
    /// Before the node stops: its connection is being served.
    Before,
    /// While the node is stopped: the kernel accepts it, and the node
    /// finds the requests and the close with the connection itself.
    WhileStopped,
}

/// With `node` (the serving one) stopped, a client writes `request` and
/// closes; once the node, thawed, has closed that connection, another
/// client's acquire of `k` is granted at once. `http` is the node's
/// metrics address.
async fn closed_request_then_acquire(
    node: &mut Batond,
    http: SocketAddr,
    request: &str,
    dialled: Dialled,
) {
    let mut other = node.connect().await;
    other.status().await;
    let early = match dialled {
        Dialled::Before => {
            let mut gone = node.connect().await;
            gone.status().await;
            Some(gone)
        }
        Dialled::WhileStopped => None,
    };
    // Every connection so far served, the node's count of them settled.
    let (open, total) = connections(http).await;

    node.stop_signal();
    let mut gone = match early {
        Some(gone) => gone,
        None => node.connect().await,
    };
    gone.send(request).await;
    drop(gone);
    node.cont();
    let accepted = if dialled == Dialled::WhileStopped {
        1.0
    } else {
        0.0
    };
    until_connections(http, (open - 1.0 + accepted, total + accepted)).await;

    let answer = other.request("A k 2 30").await;
    grant_token(&answer, "k");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_node_does_not_grant_to_a_connection_closed_while_it_was_stopped() {
    let (mut node, http) = single_node();
    closed_request_then_acquire(&mut node, http, &long_acquire(), Dialled::Before).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_before_the_close_is_still_done() {
    let (mut node, http) = single_node();
    let mut holder = node.connect().await;
    let token = grant_token(&holder.request(&long_acquire()).await, "k");
    // The release and a new acquire in one write, then the close: the
    // release is done (else the holder's long lease would keep the other
    // client waiting), the acquire is not.
    let requests = format!("R k {token}\n{}", long_acquire());
    closed_request_then_acquire(&mut node, http, &requests, Dialled::Before).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_priority_active_does_not_grant_to_a_connection_closed_while_it_was_stopped() {
    let http = free_addr();
    let mut cluster = Cluster::start_each(2, |i| match i {
        0 => vec!["--http-listen".to_string(), http.to_string()],
        _ => Vec::new(),
    });
    cluster.wait_active(0, Duration::from_secs(20)).await;
    let active = cluster.node_mut(0);
    closed_request_then_acquire(active, http, &long_acquire(), Dialled::Before).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raft_leader_does_not_grant_to_a_connection_closed_while_it_was_stopped() {
    let https = free_addrs(3).unwrap();
    let mut cluster = RaftCluster::start_each(3, |i| {
        vec!["--http-listen".to_string(), https[i].to_string()]
    });
    let (leader, _) = cluster.wait_leader(SETTLE).await;
    let node = &mut cluster.nodes[leader];
    closed_request_then_acquire(node, https[leader], &long_acquire(), Dialled::Before).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_made_and_closed_while_the_node_was_stopped_is_not_granted() {
    let (mut node, http) = single_node();
    closed_request_then_acquire(&mut node, http, &long_acquire(), Dialled::WhileStopped).await;
}
