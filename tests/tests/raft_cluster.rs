//! Black-box tests of the Raft cluster: three real `batond` nodes
//! on loopback with `--mode raft`, one peer list and a data directory each,
//! seen only through the client protocol and signals.
//!
//! Covered: one leader and redirecting followers; kill -9 of the leader
//! (election time, locks kept, old tokens still release, new tokens
//! higher); two of three killed (the survivor grants nothing); a follower
//! killed and restarted (catches up); all three killed and restarted (locks
//! and token order kept); graceful stop of the leader (handoff gap);
//! tokens above the wall clock, in a fresh, a restarted and a rebuilt
//! cluster (data directories emptied: tokens above the old cluster's).
//! Faults beyond kills and stops are in `raft_faults.rs`.
//!
//! Timing-sensitive, so the tests run one at a time and print what they
//! measured.

use std::time::Duration;

use baton_tests::cluster::{field, ClusterClient};
use baton_tests::raft::{
    grant, release, wall_clock_floor, RaftCluster, ELECTION_BOUND, REQUEST, SERIAL, SETTLE,
};
use baton_tests::{grant_token, status_u64, LineClient};
use tokio::time::Instant;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_and_followers_redirect_to_it() {
    let _serial = SERIAL.lock().await;
    let floor = wall_clock_floor();
    let mut cluster = RaftCluster::start(3);
    let (leader, took) = cluster.wait_leader(SETTLE).await;
    println!("fresh raft cluster: leader {leader} agreed after {took:?}");
    let want = cluster.peers[leader].to_string();
    for i in (0..3).filter(|i| *i != leader) {
        let mut c = LineClient::connect(cluster.peers[i]).await;
        assert_eq!(c.request("A k 0 10").await, format!("M A k {want}"));
        assert_eq!(c.request("R k 1").await, format!("M R k {want}"));
        assert_eq!(c.request("K k 1 5").await, format!("M K k {want}"));
        let status = c.status().await;
        assert_eq!(field(&status, "role"), "follower");
    }
    let mut c = LineClient::connect(cluster.peers[leader]).await;
    // Tokens start above the wall clock, as a single node's do.
    let k = grant_token(&c.request("A k 0 10").await, "k");
    assert!(k > floor, "token {k} below the wall-clock floor {floor}");
    assert_eq!(c.request("A j 0 10").await, format!("A j {}", k + 1));
    assert_eq!(c.request(&format!("K k {k} 20")).await, "K k");
    assert_eq!(c.request(&format!("R k {k}")).await, "R k");
    assert_eq!(c.request(&format!("R k {k}")).await, "N R k");
    // Every follower applies the same commands.
    for i in 0..3 {
        let mut f = LineClient::connect(cluster.peers[i]).await;
        let status = f
            .wait_status("in step with the leader", Duration::from_secs(5), |s| {
                status_u64(s, "token") == k + 1 && status_u64(s, "locks") == 1
            })
            .await;
        assert_eq!(field(&status, "mode"), "raft");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_leader_elects_another_that_keeps_locks_and_raises_tokens() {
    let _serial = SERIAL.lock().await;
    let mut cluster = RaftCluster::start(3);
    let (leader, _) = cluster.wait_leader(SETTLE).await;
    let mut client = cluster.client(leader);
    let a = grant(&mut client, "held-a").await;
    let b = grant(&mut client, "held-b").await;
    assert!(b > a);
    cluster.nodes[leader].kill();
    let (next, took) = cluster.wait_leader(SETTLE).await;
    println!("raft: new leader {next} agreed {took:?} after kill -9 of leader {leader}");
    assert_ne!(next, leader);
    assert!(took < ELECTION_BOUND, "election took {took:?}");
    let mut client = cluster.client(next);
    // The held locks survived: their holders can still release them, and
    // the key stays taken meanwhile.
    let reply = client.request("A held-b 0.2 60", REQUEST).await;
    assert_eq!(reply.line, "T held-b");
    release(&mut client, "held-a", a).await;
    let c = grant(&mut client, "fresh").await;
    assert!(c > b, "token {c} after {b}");
    let again = grant(&mut client, "held-a").await;
    assert!(again > c);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_survivor_of_three_grants_nothing() {
    let _serial = SERIAL.lock().await;
    let mut cluster = RaftCluster::start(3);
    let (leader, _) = cluster.wait_leader(SETTLE).await;
    let survivor = (leader + 1) % 3;
    for i in (0..3).filter(|i| *i != survivor) {
        cluster.nodes[i].kill();
    }
    let mut c = LineClient::connect(cluster.peers[survivor]).await;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(3) {
        c.send("A lonely 0.2 10").await;
        let answer = c.recv_timeout(Duration::from_secs(2)).await;
        if let Some(line) = answer {
            assert!(
                line.starts_with("M A lonely "),
                "a node without a majority answered {line:?}"
            );
        }
        let status = c.status().await;
        assert_ne!(field(&status, "role"), "leader", "{status:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_follower_catches_up() {
    let _serial = SERIAL.lock().await;
    let mut cluster = RaftCluster::start(3);
    let (leader, _) = cluster.wait_leader(SETTLE).await;
    let follower = (leader + 1) % 3;
    let mut client = cluster.client(leader);
    grant(&mut client, "before").await;
    cluster.nodes[follower].kill();
    let mut last = 0;
    for i in 0..20 {
        last = grant(&mut client, &format!("while-down-{i}")).await;
    }
    cluster.nodes[follower].restart();
    let mut c = LineClient::connect(cluster.peers[follower]).await;
    let status = c
        .wait_status("caught up", Duration::from_secs(10), |s| {
            status_u64(s, "token") == last
        })
        .await;
    assert_eq!(status_u64(&status, "locks"), 21, "{status:?}");
    assert_eq!(field(&status, "role"), "follower");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_cluster_restart_keeps_locks_and_token_order() {
    let _serial = SERIAL.lock().await;
    let mut cluster = RaftCluster::start(3);
    let (leader, _) = cluster.wait_leader(SETTLE).await;
    let mut client = cluster.client(leader);
    let kept = grant(&mut client, "kept").await;
    let mut last = kept;
    for i in 0..5 {
        let token = grant(&mut client, &format!("gone-{i}")).await;
        release(&mut client, &format!("gone-{i}"), token).await;
        last = token;
    }
    for i in 0..3 {
        cluster.nodes[i].kill();
    }
    let floor = wall_clock_floor();
    let (leader, took) = cluster.restart_all().await;
    println!("raft: leader {leader} agreed {took:?} after a full restart");
    let mut client = cluster.client(leader);
    let reply = client.request("A kept 0.2 60", REQUEST).await;
    assert_eq!(reply.line, "T kept", "the lock held before the restart");
    let fresh = grant(&mut client, "after").await;
    assert!(fresh > last, "token {fresh} after {last}");
    // The new leader's floor is the wall clock's at its election.
    assert!(
        fresh > floor,
        "token {fresh} below the restart's floor {floor}"
    );
    release(&mut client, "kept", kept).await;
}

/// A cluster re-created from empty data directories (after a disaster, or
/// moving from another mode) issues tokens above the old cluster's, which
/// every fence has seen: its tokens start above the wall clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_rebuilt_from_empty_data_directories_issues_higher_tokens() {
    let _serial = SERIAL.lock().await;
    let mut cluster = RaftCluster::start(3);
    let (leader, _) = cluster.wait_leader(SETTLE).await;
    let mut client = cluster.client(leader);
    let mut last = 0;
    for i in 0..5 {
        let token = grant(&mut client, &format!("old-{i}")).await;
        assert!(token > last, "token {token} after {last}");
        last = token;
    }
    for i in 0..3 {
        cluster.wipe(i);
    }
    let (leader, took) = cluster.restart_all().await;
    println!("raft: rebuilt cluster's leader {leader} agreed after {took:?}");
    let mut client = cluster.client(leader);
    let reply = client.request("A old-0 0 60", REQUEST).await;
    let fresh = grant_token(&reply.line, "old-0");
    assert!(
        fresh > last,
        "rebuilt cluster's token {fresh} not above {last}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_stop_of_the_leader_hands_the_lead_over() {
    let _serial = SERIAL.lock().await;
    let mut cluster = RaftCluster::start(3);
    let (leader, _) = cluster.wait_leader(SETTLE).await;
    let held = grant(&mut cluster.client(leader), "held").await;
    // A client cycling acquire/release measures the gap in service.
    let peers = cluster.peers.clone();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let cycling = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut client = ClusterClient::new(peers, leader);
            let mut served = Vec::new();
            let mut last = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let token = grant(&mut client, "cycle").await;
                assert!(token > last, "token {token} after {last}");
                last = token;
                release(&mut client, "cycle", token).await;
                served.push(Instant::now());
            }
            served
        })
    };
    // The cycling client is served (ten cycles) before the stop.
    cluster
        .wait_status(leader, "serving the cycles", REQUEST, |s| {
            status_u64(s, "token") >= held + 10
        })
        .await;
    let signalled = Instant::now();
    let status = cluster.nodes[leader].terminate();
    let exited = signalled.elapsed();
    assert!(status.success(), "the stopped leader exited {status:?}");
    let (next, took) = cluster.wait_leader(SETTLE).await;
    // And by the new leader (ten cycles more) before it stops.
    let at_handover = status_u64(
        &cluster
            .wait_status(next, "answering", REQUEST, |_| true)
            .await,
        "token",
    );
    cluster
        .wait_status(next, "serving the cycles", REQUEST, |s| {
            status_u64(s, "token") >= at_handover + 10
        })
        .await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let served = cycling
        .await
        .unwrap_or_else(|e| panic!("cycling client: {e}"));
    let gap = served
        .windows(2)
        .map(|w| w[1] - w[0])
        .max()
        .unwrap_or_default();
    println!(
        "raft graceful stop: leader {leader} exited {exited:?} after SIGTERM, leader {next} agreed {took:?} later; \
         longest gap between two served cycles {gap:?} ({} cycles)",
        served.len()
    );
    assert_ne!(next, leader);
    assert!(served.len() > 10, "only {} cycles", served.len());
    assert!(gap < Duration::from_secs(2), "service gap {gap:?}");
    release(&mut cluster.client(next), "held", held).await;
}

/// A dead peer costs one log line, not one per heartbeat: openraft's own
/// lines (a failed heartbeat every 50 ms, about 500 MB a day) are filtered
/// out by default, and Baton says once that the peer is out of reach.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_peer_is_logged_once_not_per_heartbeat() {
    if std::env::var_os("RUST_LOG").is_some() {
        println!("RUST_LOG is set: the default log filter is not what runs; skipped");
        return;
    }
    let _serial = SERIAL.lock().await;
    let mut cluster = RaftCluster::start(3);
    let (leader, _) = cluster.wait_leader(SETTLE).await;
    let dead = (leader + 1) % 3;
    cluster.nodes[dead].kill();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !cluster.nodes[leader]
        .log_tail(50)
        .contains("peer unreachable")
    {
        assert!(Instant::now() < deadline, "the dead peer was never logged");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let before = cluster.nodes[leader].log_tail(100_000).len();
    // 60 heartbeats' worth of time.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let grown = cluster.nodes[leader].log_tail(100_000).len() - before;
    assert!(
        grown < 1_000,
        "{grown} bytes of log in 3 s with one peer down:\n{}",
        cluster.nodes[leader].log_tail(20)
    );
}
