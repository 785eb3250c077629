//! The CLI against real clusters with frozen nodes (SIGSTOP: sockets open,
//! nothing answered). With the serving node frozen an acquire with a 5 s
//! wait is granted by the new serving node; with every node frozen, or no
//! Raft majority, the CLI exits 4 (no server), not 3 (a node said the wait
//! ran out), within a few seconds of the wait. The same with two of three
//! Raft nodes killed, for every command, a wait of 0 (the node's maximum,
//! which no node can measure then) included.

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test

mod common;

use std::time::{Duration, Instant};

use baton_tests::frozen::{ClusterMode, FreezableCluster};
use baton_tests::raft::{RaftCluster, SERIAL, SETTLE};
use common::{baton, baton_within, expect_code, stderr, stdout};

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

/// With one of three Raft nodes left: acquires (with `--try`, with a wait
/// of 0, with `run`), an election's campaign, release and renew exit 4
/// naming no timeout, within the protocol's answer time plus the
/// client's (a wait of 0, a campaign: plus the outage limit).
fn nothing_is_held_or_timed_out(servers: &str, held: &str, token: &str, what: &str) {
    let cases: [(&[&str], u64); 7] = [
        (&["acquire", "cli/free", "--try"], 8),
        (&["acquire", held, "--try"], 8),
        (&["release", held, token], 8),
        (&["renew", held, token], 8),
        (&["acquire", "cli/wait0"], 10 + 8),
        (&["run", "cli/run", "--", "true"], 10 + 8),
        (
            &["elect", "cli/elect", "--value", "me", "--", "true"],
            10 + 8,
        ),
    ];
    for (args, bound) in cases {
        let (out, took) = baton_within(servers, args, secs(bound));
        expect_code(&out, 4);
        let said = stderr(&out);
        assert!(!said.contains("timed out"), "{what}: {args:?}: {said}");
        eprintln!(
            "{what}: {args:?}: exit 4 after {took:?}: {}",
            said.trim_end()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_two_of_three_raft_nodes_killed_every_command_exits_4() {
    let _one_cluster_at_a_time = SERIAL.lock().await;
    let mut cluster = RaftCluster::start(3);
    let servers: Vec<String> = cluster.peers.iter().map(ToString::to_string).collect();
    let servers = servers.join(",");
    let (leader, _) = cluster.wait_leader(SETTLE).await;
    let out = baton(&servers, &["acquire", "cli/held", "--lease", "600"]);
    expect_code(&out, 0);
    let token = stdout(&out).trim().to_owned();

    // The leader alone: it steps down and answers `M ... -`.
    let followers: Vec<usize> = (0..3).filter(|i| *i != leader).collect();
    for &i in &followers {
        cluster.nodes[i].kill();
    }
    nothing_is_held_or_timed_out(&servers, "cli/held", &token, "leader alone");

    // A follower alone: it may still name the dead leader.
    for &i in &followers {
        cluster.nodes[i].restart();
    }
    let (leader, _) = cluster.wait_leader(SETTLE).await;
    let survivor = (leader + 1) % 3;
    for i in (0..3).filter(|i| *i != survivor) {
        cluster.nodes[i].kill();
    }
    nothing_is_held_or_timed_out(&servers, "cli/held", &token, "follower alone");
}
