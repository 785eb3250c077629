//! Black-box tests of `Q <key>` (docs/protocol.md 1.1) in every mode: the live
//! grant's token and lease left, the waiters, a free key, malformed
//! queries, `M` from a node that does not serve, and a Raft leader that
//! lost its majority answering `M` within the answer time, never a stale
//! table.

use std::time::{Duration, Instant};

use baton_tests::cluster::Cluster;
use baton_tests::raft::{RaftCluster, SERIAL, SETTLE};
use baton_tests::{assert_error, grant_token, Batond, LineClient};

/// `Q <key> token=<t> lease=<s> waiters=<n>`: the token, the lease left in
/// seconds with three decimals, the waiters.
fn parse_q(line: &str, key: &str) -> (Option<u64>, Option<f64>, u64) {
    let fields: Vec<&str> = line.split(' ').collect();
    assert_eq!(fields.len(), 5, "{line:?}");
    assert_eq!((fields[0], fields[1]), ("Q", key), "{line:?}");
    let value = |i: usize, name: &str| {
        fields[i]
            .strip_prefix(name)
            .unwrap_or_else(|| panic!("field {i} of {line:?} is not {name}"))
            .to_string()
    };
    let token = value(2, "token=");
    let lease = value(3, "lease=");
    let waiters = value(4, "waiters=").parse().expect("waiters");
    match (token.as_str(), lease.as_str()) {
        ("-", "-") => (None, None, waiters),
        (t, l) => {
            let (_, decimals) = l.split_once('.').expect("three decimals");
            assert_eq!(decimals.len(), 3, "{line:?}");
            (
                Some(t.parse().expect("token")),
                Some(l.parse().expect("lease")),
                waiters,
            )
        }
    }
}

/// What every serving node must answer.
async fn queries_are_answered(serving: std::net::SocketAddr) {
    let mut c = LineClient::connect(serving).await;
    assert_eq!(parse_q(&c.request("Q free").await, "free"), (None, None, 0));
    let token = grant_token(&c.request("A held 0 30").await, "held");
    let (t, lease, waiters) = parse_q(&c.request("Q held").await, "held");
    assert_eq!((t, waiters), (Some(token), 0));
    let lease = lease.unwrap_or_default();
    assert!(lease > 28.0 && lease <= 30.0, "lease left {lease}");
    let mut waiter = LineClient::connect(serving).await;
    waiter.send("A held 0 30").await;
    waiter.send("A held 0 30").await;
    waiter.expect_silence(Duration::from_millis(200)).await;
    let (t, _, waiters) = parse_q(&c.request("Q held").await, "held");
    assert_eq!((t, waiters), (Some(token), 2));
    // An operator breaks the lock with Q then R: the next waiter has it.
    assert_eq!(c.request(&format!("R held {token}")).await, "R held");
    let next = grant_token(&waiter.recv().await, "held");
    let (t, _, waiters) = parse_q(&c.request("Q held").await, "held");
    assert_eq!((t, waiters), (Some(next), 1));
    assert_error(&c.request("Q").await, "Q", None);
    assert_error(&c.request("Q held extra").await, "Q", Some("held"));
    // Q changed nothing.
    assert_eq!(waiter.request(&format!("R held {next}")).await, "R held");
}

#[tokio::test]
async fn a_single_node_answers_q() {
    let node = Batond::start(&[]);
    queries_are_answered(node.addr()).await;
    let mut c = node.connect().await;
    let token = grant_token(&c.request("A short 0 0.3").await, "short");
    assert!(parse_q(&c.request("Q short").await, "short").0 == Some(token));
    let deadline = Instant::now() + Duration::from_secs(5);
    while parse_q(&c.request("Q short").await, "short").0.is_some() {
        assert!(Instant::now() < deadline, "the lease never ran out");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_priority_active_answers_q_and_a_standby_redirects() {
    let mut cluster = Cluster::start(2, &[]);
    let active = cluster.wait_single_active(Duration::from_secs(10)).await;
    queries_are_answered(cluster.addr(active)).await;
    let mut standby = LineClient::connect(cluster.addr(1 - active)).await;
    assert_eq!(
        standby.request("Q k").await,
        format!("M Q k {}", cluster.addr(active))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raft_leader_answers_q_after_confirming_its_lead() {
    let _serial = SERIAL.lock().await;
    let mut cluster = RaftCluster::start(3);
    let (leader, _) = cluster.wait_leader(SETTLE).await;
    queries_are_answered(cluster.peers[leader]).await;
    for i in (0..3).filter(|i| *i != leader) {
        let mut follower = LineClient::connect(cluster.peers[i]).await;
        assert_eq!(
            follower.request("Q k").await,
            format!("M Q k {}", cluster.peers[leader])
        );
    }
    // Cut off from its majority, the leader cannot know its table is
    // current: it answers M, within the answer time.
    let mut c = LineClient::connect(cluster.peers[leader]).await;
    let token = grant_token(&c.request("A k 0 60").await, "k");
    for i in (0..3).filter(|i| *i != leader) {
        cluster.nodes[i].kill();
    }
    c.set_timeout(Duration::from_secs(5));
    let sent = Instant::now();
    let answer = c.request("Q k").await;
    let took = sent.elapsed();
    assert!(answer.starts_with("M Q k "), "{answer:?} (token {token})");
    assert!(took < Duration::from_secs(3), "answered after {took:?}");
}
