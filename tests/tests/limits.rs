//! Black-box tests of the node's limits: `--max-connections`,
//! `--max-pending`, `--max-locks` and `--max-waiters` (in every mode), and
//! a thousand connections at once.

use std::time::{Duration, Instant};

use baton_tests::cluster::Cluster;
use baton_tests::raft::{RaftCluster, SERIAL, SETTLE};
use baton_tests::{assert_error, grant_token, status_u64, Batond, LineClient};

#[tokio::test]
async fn connections_over_the_limit_get_one_line_and_are_closed() {
    let node = Batond::start(&["--max-connections", "3"]);
    let mut open = Vec::new();
    for _ in 0..3 {
        let mut c = node.connect().await;
        assert!(c.request("S").await.starts_with("S "));
        open.push(c);
    }
    let mut refused = node.connect().await;
    assert_eq!(refused.recv().await, "E ? ? too many connections");
    refused.expect_eof().await;
    for c in &mut open {
        assert!(
            c.request("S").await.starts_with("S "),
            "existing connections still served"
        );
    }

    // A freed slot is usable again once the node has noticed the close.
    drop(open.pop());
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut c = node.connect().await;
        c.send("S").await;
        let line = c.recv().await;
        if line.starts_with("S ") {
            break;
        }
        assert_eq!(line, "E ? ? too many connections");
        assert!(
            Instant::now() < deadline,
            "the closed connection's slot was never freed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn requests_over_max_pending_are_refused_and_the_connection_goes_on() {
    let node = Batond::start(&["--max-pending", "2"]);
    let mut holder = node.connect().await;
    let mut tokens = Vec::new();
    for key in ["k1", "k2", "k3"] {
        tokens.push(grant_token(
            &holder.request(&format!("A {key} 0 30")).await,
            key,
        ));
    }
    let mut c = node.connect().await;
    c.send("A k1 0 30").await;
    c.send("A k2 0 30").await;
    c.expect_silence(Duration::from_millis(300)).await;
    // Two acquires await an answer: a third pending request is over the limit.
    let answer = c.request("A k3 0 30").await;
    assert_error(&answer, "A", Some("k3"));
    let s = holder.status().await;
    assert_eq!(
        status_u64(&s, "waiters"),
        2,
        "the refused acquire must not queue: {s:?}"
    );

    // Once one is answered there is room again.
    assert_eq!(holder.request(&format!("R k1 {}", tokens[0])).await, "R k1");
    grant_token(&c.recv().await, "k1");
    c.send("A k3 0 30").await;
    c.expect_silence(Duration::from_millis(300)).await;
    let s = holder.status().await;
    assert_eq!(status_u64(&s, "waiters"), 2, "{s:?}");
    assert_eq!(holder.request(&format!("R k3 {}", tokens[2])).await, "R k3");
    grant_token(&c.recv().await, "k3");
    assert_eq!(holder.request(&format!("R k2 {}", tokens[1])).await, "R k2");
    grant_token(&c.recv().await, "k2");
    // Nothing pending now: an ordinary request works.
    assert!(c.request("S").await.starts_with("S "));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_concurrent_connections_each_served() {
    const N: usize = 1000;
    if let Err(e) = rlimit::increase_nofile_limit(4 * N as u64) {
        panic!("cannot raise the open-file limit for {N} connections: {e}");
    }
    let node = Batond::start(&["--max-connections", "2000"]);
    let addr = node.addr();
    let mut tasks = Vec::with_capacity(N);
    for i in 0..N {
        tasks.push(tokio::spawn(async move {
            let mut c = LineClient::connect(addr).await;
            c.set_timeout(Duration::from_secs(20));
            let key = format!("conn/{i}");
            let t = grant_token(&c.request(&format!("A {key} 0 60")).await, &key);
            (c, key, t)
        }));
    }
    let mut held = Vec::with_capacity(N);
    for task in tasks {
        match task.await {
            Ok(done) => held.push(done),
            Err(e) => panic!("a connection task failed: {e}"),
        }
    }
    let mut tokens: Vec<u64> = held.iter().map(|(_, _, t)| *t).collect();
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!(tokens.len(), N, "every grant needs its own token");

    let mut observer = node.connect().await;
    let s = observer.status().await;
    assert_eq!(status_u64(&s, "locks"), N as u64, "{s:?}");

    // All still open and usable: each releases its own key.
    let mut tasks = Vec::with_capacity(N);
    for (mut c, key, t) in held {
        tasks.push(tokio::spawn(async move {
            assert_eq!(c.request(&format!("R {key} {t}")).await, format!("R {key}"));
        }));
    }
    for task in tasks {
        if let Err(e) = task.await {
            panic!("a release task failed: {e}");
        }
    }
    assert_eq!(status_u64(&observer.status().await, "locks"), 0);
}

/// The quota, as docs/protocol.md words it, on a serving node started with
/// `--max-locks 3 --max-waiters 2`: a fourth grant and a third waiter are
/// refused and change nothing; a hand-over at the cap still happens (it
/// adds no grant), and a freed slot is usable again.
async fn quota_is_kept(serving: std::net::SocketAddr) {
    let mut holder = LineClient::connect(serving).await;
    let mut tokens = Vec::new();
    for key in ["q1", "q2", "q3"] {
        tokens.push(grant_token(
            &holder.request(&format!("A {key} 0 30")).await,
            key,
        ));
    }
    assert_eq!(holder.request("A q4 0 30").await, "E A q4 too many locks");
    let mut waiters = LineClient::connect(serving).await;
    waiters.send("A q1 0 30").await;
    waiters.send("A q2 0 30").await;
    waiters.expect_silence(Duration::from_millis(300)).await;
    assert_eq!(
        waiters.request("A q3 0 30").await,
        "E A q3 too many waiters"
    );
    let s = holder.status().await;
    assert_eq!(
        (status_u64(&s, "locks"), status_u64(&s, "waiters")),
        (3, 2),
        "{s:?}"
    );
    // The release of q1 hands it to its waiter, though the node is full.
    assert_eq!(holder.request(&format!("R q1 {}", tokens[0])).await, "R q1");
    let q1 = grant_token(&waiters.recv().await, "q1");
    assert!(q1 > tokens[2], "the hand-over has a new token");
    // One waiter left: there is room for another.
    waiters.send("A q3 0 30").await;
    waiters.expect_silence(Duration::from_millis(300)).await;
    // Freeing q2 and q3 hands them on; releasing those frees two slots.
    assert_eq!(holder.request(&format!("R q2 {}", tokens[1])).await, "R q2");
    let q2 = grant_token(&waiters.recv().await, "q2");
    assert_eq!(holder.request(&format!("R q3 {}", tokens[2])).await, "R q3");
    let q3 = grant_token(&waiters.recv().await, "q3");
    assert_eq!(waiters.request(&format!("R q2 {q2}")).await, "R q2");
    assert_eq!(waiters.request(&format!("R q3 {q3}")).await, "R q3");
    grant_token(&holder.request("A q4 0 30").await, "q4");
    let s = holder.status().await;
    assert_eq!(
        (status_u64(&s, "locks"), status_u64(&s, "waiters")),
        (2, 0),
        "{s:?}"
    );
    assert_eq!(waiters.request(&format!("R q1 {q1}")).await, "R q1");
}

const QUOTA: [&str; 4] = ["--max-locks", "3", "--max-waiters", "2"];

#[tokio::test]
async fn a_single_node_keeps_its_quota_of_locks_and_waiters() {
    let node = Batond::start(&QUOTA);
    quota_is_kept(node.addr()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_priority_active_keeps_its_quota() {
    let mut cluster = Cluster::start(2, &QUOTA);
    let active = cluster.wait_single_active(Duration::from_secs(10)).await;
    quota_is_kept(cluster.addr(active)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raft_leader_keeps_its_quota() {
    let _serial = SERIAL.lock().await;
    let mut cluster = RaftCluster::start_with(3, &QUOTA);
    let (leader, _) = cluster.wait_leader(SETTLE).await;
    quota_is_kept(cluster.peers[leader]).await;
}

#[tokio::test]
async fn quota_flags_are_checked() {
    let out = std::process::Command::new(baton_tests::batond_bin())
        .args(["--max-locks", "0"])
        .output()
        .unwrap_or_else(|e| panic!("run batond: {e}"));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--max-locks"), "{err}");
}
