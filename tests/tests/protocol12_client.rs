//! Protocol 1.2 through the Rust client against real nodes: semaphores,
//! shared locks, values, watches and elections on a single node, and
//! watches and elections across a priority cluster's failover.
//!
//! These need the node side of protocol 1.2: until it is merged, a node
//! refuses the new requests ('not served by this node yet') and every
//! test here fails.

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test

use std::net::SocketAddr;
use std::time::Duration;

use baton_client::{Client, Error, KeyStateExt, LockMode, StateTag};
use baton_tests::cluster::{field, probe_status, Cluster};
use baton_tests::Batond;
use futures_util::{Stream, StreamExt};

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

async fn client(addrs: &[SocketAddr]) -> Client {
    Client::builder()
        .servers(addrs.iter().map(ToString::to_string))
        .connect_timeout(secs(2))
        .request_timeout(secs(5))
        .build()
        .await
        .unwrap()
}

/// The next item of a stream, within `within`.
async fn next_within<S: Stream + Unpin>(stream: &mut S, within: Duration) -> S::Item {
    tokio::time::timeout(within, stream.next())
        .await
        .expect("an item in time")
        .expect("the stream goes on")
}

/// Waits until node `addr` reports `locks=n` (a priority standby has the
/// grants replicated).
async fn until_locks(addr: SocketAddr, n: u64) {
    let deadline = tokio::time::Instant::now() + secs(10);
    loop {
        let status = probe_status(addr, Duration::from_millis(500)).await;
        if status.is_some_and(|s| field(&s, "locks") == n.to_string()) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{addr} never had {n} locks"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_semaphore_permits_hand_over_in_order() {
    let node = Batond::start(&[]);
    let client = client(&[node.addr()]).await;
    let a = client
        .acquire("sem", secs(5), secs(30))
        .permits(2)
        .value("a")
        .await
        .unwrap();
    let b = client
        .acquire("sem", secs(5), secs(30))
        .permits(2)
        .value("b")
        .await
        .unwrap();
    let full = client.try_acquire("sem", secs(30)).permits(2).await;
    assert!(matches!(full, Err(Error::TimedOut { .. })), "{full:?}");
    let other = client.try_acquire("sem", secs(30)).permits(3).await;
    assert!(
        matches!(&other, Err(Error::Rejected { reason }) if reason == "the key has 2 permits"),
        "{other:?}"
    );

    let state = client.inspect("sem").await.unwrap();
    assert_eq!((state.permits(), state.holder_count()), (2, 2));
    let values: Vec<_> = state
        .holders()
        .into_iter()
        .map(|h| (h.token, h.value))
        .collect();
    assert_eq!(values[0].0, a.token());
    assert_eq!(values[0].1.as_ref().unwrap().as_bytes(), b"a");
    assert_eq!(values[1].1.as_ref().unwrap().as_bytes(), b"b");

    // A waiter gets the permit a release frees, with a greater token.
    let waiting = {
        let client = client.clone();
        tokio::spawn(async move { client.acquire("sem", secs(10), secs(30)).permits(2).await })
    };
    let deadline = tokio::time::Instant::now() + secs(5);
    while client.inspect("sem").await.unwrap().waiters != 1 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the third never queued"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    a.release().await.unwrap();
    let c = waiting.await.unwrap().unwrap();
    assert!(c.token() > b.token());
    b.release().await.unwrap();
    c.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_shared_grants_exclude_a_writer_and_values_change() {
    let node = Batond::start(&[]);
    let client = client(&[node.addr()]).await;
    let r1 = client
        .acquire("rw", secs(5), secs(30))
        .shared()
        .await
        .unwrap();
    let r2 = client
        .acquire("rw", secs(5), secs(30))
        .shared()
        .await
        .unwrap();
    let state = client.inspect("rw").await.unwrap();
    assert_eq!((state.mode(), state.holder_count()), (LockMode::Shared, 2));
    let writer = client.try_acquire("rw", secs(30)).await;
    assert!(matches!(writer, Err(Error::TimedOut { .. })), "{writer:?}");

    r1.set_value("reader-1").await.unwrap();
    let state = client.inspect("rw").await.unwrap();
    assert_eq!(
        state.holders()[0].value.as_ref().unwrap().as_bytes(),
        b"reader-1"
    );
    r2.clear_value().await.unwrap();
    let token = r1.token();
    r1.release().await.unwrap();
    let gone = client.set_value("rw", token, "x").await;
    assert!(matches!(gone, Err(Error::NotHeld { .. })), "{gone:?}");
    r2.release().await.unwrap();
    client.try_acquire("rw", secs(30)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_watch_sees_each_change_and_survives_a_restart() {
    let mut node = Batond::start(&[]);
    let client = client(&[node.addr()]).await;
    let mut watch = client.watch("watched").unwrap();
    assert_eq!(
        next_within(&mut watch, secs(5)).await.unwrap().tag(),
        StateTag::Free
    );
    let guard = client
        .acquire("watched", secs(5), secs(30))
        .value("v1")
        .await
        .unwrap();
    let held = next_within(&mut watch, secs(5)).await.unwrap();
    assert_eq!(held.holders()[0].token, guard.token());
    guard.set_value("v2").await.unwrap();
    let changed = next_within(&mut watch, secs(5)).await.unwrap();
    assert_eq!(
        changed.holders()[0].value.as_ref().unwrap().as_bytes(),
        b"v2"
    );
    let token = guard.into_token();

    // Without a data directory the restarted node has forgotten the grant:
    // the watch, sent again after the reconnect, sees the key free.
    let mut watch = tokio::spawn(async move {
        let state = next_within(&mut watch, secs(20)).await;
        (state, watch)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    node.restart();
    let (state, _watch) = (&mut watch).await.unwrap();
    assert_eq!(
        state.unwrap().tag(),
        StateTag::Free,
        "token {token} forgotten"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_election_hands_over_to_the_next_candidate() {
    let node = Batond::start(&[]);
    let first = client(&[node.addr()]).await;
    let second = client(&[node.addr()]).await;
    let election = first.election("elect/single").unwrap();
    let mut observe = election.observe().unwrap();
    assert_eq!(next_within(&mut observe, secs(5)).await.unwrap(), None);
    let leading = election.campaign("a", secs(5)).await.unwrap();
    let leader = next_within(&mut observe, secs(5)).await.unwrap().unwrap();
    assert_eq!(leader.value.unwrap().as_bytes(), b"a");

    let rival = second.election("elect/single").unwrap();
    let campaign = tokio::spawn(async move { rival.campaign("b", secs(5)).await });
    leading.proclaim("a2").await.unwrap();
    let leader = next_within(&mut observe, secs(5)).await.unwrap().unwrap();
    assert_eq!(leader.value.unwrap().as_bytes(), b"a2");
    let old = leading.token();
    leading.resign().await.unwrap();
    let next = tokio::time::timeout(secs(10), campaign)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(next.token() > old);
    // The hand-over is one change; a node may show the key free between.
    let mut leader = next_within(&mut observe, secs(5)).await.unwrap();
    if leader.is_none() {
        leader = next_within(&mut observe, secs(5)).await.unwrap();
    }
    let leader = leader.unwrap();
    assert_eq!(
        (leader.token, leader.value.unwrap().as_bytes()),
        (next.token(), &b"b"[..])
    );
    next.resign().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn priority_watch_and_election_follow_a_failover() {
    let mut cluster = Cluster::start(3, &[]);
    cluster.wait_active(0, secs(10)).await;
    let peers = cluster.peers().to_vec();
    let client = client(&peers).await;
    let election = client.election("elect/priority").unwrap();
    let leading = election.campaign("node-a", secs(10)).await.unwrap();
    until_locks(peers[1], 1).await;

    let mut observe = election.observe().unwrap();
    let leader = next_within(&mut observe, secs(5)).await.unwrap().unwrap();
    assert_eq!(leader.token, leading.token());
    let mut observing = tokio::spawn(async move {
        let item = next_within(&mut observe, secs(30)).await;
        (item, observe)
    });

    // The active dies with the watch pending on it: the W is sent again to
    // the new active, which has the grant and its value.
    cluster.kill(0);
    cluster.wait_active(1, secs(10)).await;
    let still = election.leader().await.unwrap().unwrap();
    assert_eq!(
        (still.token, still.value.unwrap().as_bytes()),
        (leading.token(), &b"node-a"[..])
    );
    assert!(!observing.is_finished(), "the leader did not change");

    // Kept alive through the new active, proclaimed there, seen by the watch.
    leading.proclaim("node-a2").await.unwrap();
    let (item, mut observe) = (&mut observing).await.unwrap();
    let leader = item.unwrap().unwrap();
    assert_eq!(leader.value.unwrap().as_bytes(), b"node-a2");
    leading.resign().await.unwrap();
    assert_eq!(next_within(&mut observe, secs(10)).await.unwrap(), None);
}
