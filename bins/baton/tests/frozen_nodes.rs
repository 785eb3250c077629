//! The CLI against real clusters with frozen nodes (SIGSTOP: sockets open,
//! nothing answered). With the serving node frozen an acquire with a 5 s
//! wait is granted by the new serving node; with every node frozen, or no
//! Raft majority, the CLI exits 4 (no server), not 3 (a node said the wait
//! ran out), within a few seconds of the wait.

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test

mod common;

use std::time::{Duration, Instant};

use baton_tests::frozen::{ClusterMode, FreezableCluster};
use baton_tests::raft::SERIAL;
use common::{baton, expect_code, stderr};

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// The `--servers` list with `frozen` second: the first request after the
/// client is built goes to the second connection, so a client that sat on
/// a frozen node could not pass by round-robin luck.
fn servers_with_second(cluster: &FreezableCluster, frozen: usize) -> String {
    let peers = cluster.peers();
    let mut order: Vec<usize> = (0..peers.len()).filter(|i| *i != frozen).collect();
    order.insert(1, frozen);
    let list: Vec<String> = order.iter().map(|i| peers[*i].to_string()).collect();
    list.join(",")
}

async fn the_cli_rides_out_frozen_nodes(mode: ClusterMode) {
    let _one_cluster_at_a_time = SERIAL.lock().await;
    let mut cluster = FreezableCluster::start(mode);
    let serving = cluster.wait_serving(secs(15)).await;
    let servers = servers_with_second(&cluster, serving);

    let stopped_at = Instant::now();
    cluster.freeze(serving);
    let out = baton(
        &servers,
        &["acquire", "cli/fresh", "--wait", "5", "--lease", "10"],
    );
    let took = stopped_at.elapsed();
    expect_code(&out, 0);
    eprintln!("{mode:?}: the CLI's acquire was granted {took:?} after SIGSTOP");

    // Every node frozen: nobody answers, which is not "timed out".
    for i in 0..cluster.peers().len() {
        if i != serving {
            cluster.freeze(i);
        }
    }
    let started = Instant::now();
    let out = baton(
        &servers,
        &["acquire", "cli/nobody", "--wait", "5", "--lease", "10"],
    );
    let took = started.elapsed();
    expect_code(&out, 4);
    assert!(
        took < secs(5 + 4),
        "{mode:?}: exit 4 only {took:?} after the start"
    );
    eprintln!(
        "{mode:?}: every node frozen: exit 4 after {took:?}: {}",
        stderr(&out).trim_end()
    );
    cluster.resume_all();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_priority_cluster_with_frozen_nodes() {
    the_cli_rides_out_frozen_nodes(ClusterMode::Priority).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raft_cluster_with_frozen_nodes() {
    the_cli_rides_out_frozen_nodes(ClusterMode::Raft).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_without_a_raft_majority_is_no_server_not_held() {
    let _one_cluster_at_a_time = SERIAL.lock().await;
    let mut cluster = FreezableCluster::start(ClusterMode::Raft);
    let leader = cluster.wait_serving(secs(15)).await;
    for i in 0..cluster.peers().len() {
        if i != leader {
            cluster.freeze(i);
        }
    }
    let leader_only = cluster.peers()[leader].to_string();
    let started = Instant::now();
    let out = baton(&leader_only, &["acquire", "cli/try", "--try"]);
    let took = started.elapsed();
    expect_code(&out, 4);
    let said = stderr(&out);
    assert!(!said.contains("timed out"), "{said}");
    // The protocol's 3 s to answer, and the client's 5 s for an answer.
    assert!(took < secs(8), "took {took:?}");
    eprintln!(
        "no majority: --try exits 4 after {took:?}: {}",
        said.trim_end()
    );
    cluster.resume_all();
}
