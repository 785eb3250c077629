//! Acquires pending while their node dies complete once it is back, within
//! their wait; and the wait left is what is resent, not the whole wait.

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test

mod common;

use std::time::{Duration, Instant};

use baton_client::Error;
use baton_tests::proxy::FaultProxy;
use baton_tests::{status_u64, Batond};
use common::{client, secs};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_acquires_complete_after_the_node_restarts() {
    let mut node = Batond::start(&[]);
    let client = client(&[node.addr()]).await;
    let mut holder = node.connect().await;
    let granted = holder.request("A restart 5 60").await;
    assert!(granted.starts_with("A restart "), "{granted}");

    let mut tasks = Vec::new();
    for _ in 0..4 {
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            let guard = client.acquire("restart", secs(20), secs(30)).await?;
            let token = guard.token();
            guard.release().await?;
            Ok::<_, Error>(token)
        }));
    }
    // One acquire of the key in flight on each of the two connections; the
    // other two wait in the client behind them.
    let mut probe = node.connect().await;
    probe
        .wait_status("2 waiters", secs(5), |s| status_u64(s, "waiters") == 2)
        .await;
    drop(probe);
    drop(holder);

    let started = Instant::now();
    node.restart();
    for task in tasks {
        let token = tokio::time::timeout(secs(20), task)
            .await
            .expect("acquire still pending 20 s after the restart")
            .unwrap()
            .expect("acquire failed instead of failing over");
        assert!(token > 0);
    }
    assert!(started.elapsed() < secs(20));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_during_acquire_resends_with_the_wait_left() {
    let node = Batond::start(&[]);
    let proxy = FaultProxy::start(node.addr()).await;
    let client = client(&[proxy.addr()]).await;
    let mut holder = node.connect().await;
    let granted = holder.request("A cut 5 60").await;
    assert!(granted.starts_with("A cut "), "{granted}");

    let started = Instant::now();
    let pending = {
        let client = client.clone();
        tokio::spawn(async move { client.acquire("cut", secs(8), secs(30)).await })
    };
    let mut probe = node.connect().await;
    probe
        .wait_status("1 waiter", secs(5), |s| status_u64(s, "waiters") == 1)
        .await;
    proxy.cut_all();
    // The node drops the waiter of the dead connection ...
    probe
        .wait_status("no waiter", secs(5), |s| status_u64(s, "waiters") == 0)
        .await;
    // ... and the client queues it again once it has reconnected.
    probe
        .wait_status("waiter back", secs(7), |s| status_u64(s, "waiters") == 1)
        .await;
    let result = tokio::time::timeout(secs(15), pending)
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(result, Err(Error::TimedOut { .. })), "{result:?}");
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(7900) && took < Duration::from_millis(9500),
        "the resent acquire must keep the original deadline, took {took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_during_acquire_is_granted_after_reconnecting() {
    let node = Batond::start(&[]);
    let proxy = FaultProxy::start(node.addr()).await;
    let client = client(&[proxy.addr()]).await;
    let mut holder = node.connect().await;
    let granted = holder.request("A cut2 5 60").await;
    let first = baton_tests::grant_token(&granted, "cut2");

    let pending = {
        let client = client.clone();
        tokio::spawn(async move { client.acquire("cut2", secs(15), secs(30)).await })
    };
    let mut probe = node.connect().await;
    probe
        .wait_status("1 waiter", secs(5), |s| status_u64(s, "waiters") == 1)
        .await;
    proxy.cut_all();
    // The node must see the old waiter go before the key is handed on, or
    // the grant could go to the dead connection (a write into a socket the
    // peer just closed can still succeed) and stay held for its lease.
    probe
        .wait_status("no waiter", secs(5), |s| status_u64(s, "waiters") == 0)
        .await;
    probe
        .wait_status("waiter back", secs(8), |s| {
            status_u64(s, "waiters") == 1 && status_u64(s, "locks") == 1
        })
        .await;
    let released = holder.request(&format!("R cut2 {first}")).await;
    assert_eq!(released, "R cut2");
    let guard = tokio::time::timeout(secs(10), pending)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(guard.token() > first);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_during_release_is_retried_until_the_node_answers() {
    let node = Batond::start(&[]);
    let proxy = FaultProxy::start(node.addr()).await;
    let client = client(&[proxy.addr()]).await;
    let guard = client.acquire("rel", secs(5), secs(60)).await.unwrap();

    // The release goes out but its bytes die in the proxy with the cut.
    proxy.stall(true);
    let started = Instant::now();
    let release = tokio::spawn(guard.release());
    tokio::time::sleep(Duration::from_millis(300)).await;
    proxy.cut_all();
    proxy.stall(false);
    let mut probe = node.connect().await;
    assert_eq!(
        status_u64(&probe.status().await, "locks"),
        1,
        "release must not have arrived yet"
    );

    tokio::time::timeout(secs(10), release)
        .await
        .unwrap()
        .unwrap()
        .expect("the release was not retried after the cut");
    assert!(started.elapsed() < Duration::from_millis(5500));
    let again = probe.request("A rel 0.5 5").await;
    assert!(again.starts_with("A rel "), "the lock stayed held: {again}");
}
