//! The peer hellos on the client port: a stranger who sends one, then junk
//! or a huge frame length, is dropped without hurting the node. The hellos
//! are the ones this build speaks (version 2, with the cluster key).

use std::time::Duration;

use baton_tests::{Batond, LineClient};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn rss_kib(node: &Batond) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", node.pid())).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS")
}

/// Sends `hello` then `junk`, and expects the node to close the link.
async fn stranger(node: &Batond, hello: &[u8], junk: &[u8]) {
    let mut stream = TcpStream::connect(node.addr()).await.expect("connect");
    stream.write_all(hello).await.expect("hello");
    stream.write_all(junk).await.expect("junk");
    let mut buf = [0u8; 64];
    let closed = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "the node kept a stranger's link open");
}

async fn check_node_survives(node: &Batond, hello: &[u8]) {
    let before = rss_kib(node);
    // A frame length of about 512 MiB, then nothing.
    stranger(node, hello, &[0x1f, 0xff, 0xff, 0xff]).await;
    // A small frame that is not a link hello.
    stranger(node, hello, &[0, 0, 0, 3, 0xff, 0xff, 0xff]).await;
    let after = rss_kib(node);
    assert!(
        after < before + 64 * 1024,
        "RSS grew from {before} KiB to {after} KiB"
    );
    let mut client = LineClient::connect(node.addr()).await;
    let granted = client.request("A after-strangers 1 10").await;
    assert!(granted.starts_with("A after-strangers "), "{granted}");
}

#[tokio::test]
async fn a_stranger_on_the_priority_peer_port_is_dropped() {
    let addr = baton_tests::free_addr().to_string();
    let node = Batond::start_at(
        addr.parse().expect("addr"),
        &["--peers", &addr, "--mode", "priority"],
    );
    let mut probe = LineClient::connect(node.addr()).await;
    probe
        .wait_status("active", Duration::from_secs(10), |s| {
            s.get("role").map(String::as_str) == Some("active")
        })
        .await;
    check_node_survives(&node, baton_cluster::peer::PEER_HELLO).await;
}

#[tokio::test]
async fn a_stranger_on_the_raft_peer_port_is_dropped() {
    let addr = baton_tests::free_addr().to_string();
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().to_string_lossy().into_owned();
    let node = Batond::start_at(
        addr.parse().expect("addr"),
        &["--peers", &addr, "--mode", "raft", "--data-dir", &data],
    );
    let mut probe = LineClient::connect(node.addr()).await;
    probe
        .wait_status("leader", Duration::from_secs(10), |s| {
            s.get("role").map(String::as_str) == Some("leader")
        })
        .await;
    check_node_survives(&node, baton_cluster::raft::net::rpc::RAFT_HELLO).await;
}
