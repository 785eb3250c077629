//! The client against real clusters: an application keeps its locks and
//! keeps getting new ones while the serving node dies and another takes
//! over (priority failover and Raft election).

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use baton_client::Error;
use baton_tests::cluster::{field, probe_status, Cluster};
use baton_tests::{free_addr, Batond};
use common::{client, secs};

/// Grants a lock, waits until `successor` has it (a priority cluster
/// replicates asynchronously: a grant made a moment before a crash may be
/// lost, as docs/cluster.md says), kills the serving node, then checks
/// through the same client that a new lock is granted with a higher token
/// and that the old one is still held and can be released.
async fn survive_failover(peers: &[SocketAddr], successor: SocketAddr, kill: impl FnOnce()) {
    let client = client(peers).await;
    let first = client
        .acquire("app/first", secs(10), secs(60))
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + secs(5);
    loop {
        let status = probe_status(successor, Duration::from_millis(500)).await;
        if status.is_some_and(|s| field(&s, "locks") == "1") {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the grant never reached {successor}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    kill();
    let second = client
        .acquire("app/second", secs(10), secs(60))
        .await
        .unwrap();
    assert!(
        second.token() > first.token(),
        "token {} after the failover, {} before",
        second.token(),
        first.token()
    );
    // The first lock survived: another acquire of it times out...
    let denied = client
        .acquire("app/first", Duration::from_millis(300), secs(60))
        .await;
    assert!(
        matches!(denied, Err(Error::TimedOut { .. })),
        "app/first should still be held: {:?}",
        denied.map(|g| g.token())
    );
    // ...and its holder can still release it.
    first.release().await.unwrap();
    second.release().await.unwrap();
    let again = client
        .acquire("app/first", secs(10), secs(60))
        .await
        .unwrap();
    again.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_priority_cluster_fails_over_under_the_client() {
    let mut cluster = Cluster::start(3, &[]);
    cluster.wait_active(0, secs(10)).await;
    let peers = cluster.peers().to_vec();
    survive_failover(&peers, peers[1], || cluster.kill(0)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raft_cluster_elects_a_new_leader_under_the_client() {
    let mut peers: Vec<SocketAddr> = Vec::new();
    while peers.len() < 3 {
        let addr = free_addr();
        if !peers.contains(&addr) {
            peers.push(addr);
        }
    }
    let list = peers
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut nodes: Vec<Batond> = peers
        .iter()
        .zip(&dirs)
        .map(|(addr, dir)| {
            let data = dir.path().to_string_lossy().into_owned();
            Batond::start_at(
                *addr,
                &["--peers", &list, "--mode", "raft", "--data-dir", &data],
            )
        })
        .collect();
    let leader = wait_leader(&peers, secs(15)).await;
    // A Raft grant is committed on a majority before it is answered.
    let follower = peers[(leader + 1) % peers.len()];
    survive_failover(&peers, follower, || nodes[leader].kill()).await;
}

/// The index of the node every node agrees leads.
async fn wait_leader(peers: &[SocketAddr], within: Duration) -> usize {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let mut leaders = Vec::new();
        for (i, addr) in peers.iter().enumerate() {
            if let Some(status) = probe_status(*addr, Duration::from_millis(500)).await {
                if field(&status, "role") == "leader" {
                    leaders.push(i);
                }
            }
        }
        if let [leader] = leaders[..] {
            return leader;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no single leader within {within:?}: {leaders:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
