//! `Client::close`: the locks the guards still hold are released before the
//! program exits, including a guard dropped right before the runtime ends
//!, and the client refuses new work afterwards.

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test

mod common;

use std::time::{Duration, Instant};

use baton_client::Error;
use baton_tests::{grant_token, Batond};
use common::{client, secs};

/// What a program's `main` is: a runtime that ends when the closure returns,
/// killing every task still running on it.
fn in_a_main_of_its_own<F>(body: impl FnOnce() -> F + Send + 'static)
where
    F: std::future::Future<Output = ()>,
{
    let main = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(body());
        drop(runtime);
    });
    main.join().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_releases_a_guard_still_held() {
    let node = Batond::start(&[]);
    let client = client(&[node.addr()]).await;
    let mut guard = client.acquire("held", secs(5), secs(60)).await.unwrap();
    guard.keep_alive();
    client.close().await.unwrap();
    // Someone else gets the key at once, not after the 60 s lease.
    let mut other = node.connect().await;
    let line = other.request("A held 0.5 5").await;
    let token = grant_token(&line, "held");
    assert!(token > guard.token());
    assert!(guard.is_lost(), "close ends the guard's claim");
    let _ = tokio::time::timeout(secs(1), guard.lost()).await.unwrap();
}

#[test]
fn a_guard_dropped_at_the_end_of_main_is_released_by_close() {
    let node = Batond::start(&[]);
    let addr = node.addr();
    in_a_main_of_its_own(move || async move {
        let client = client(&[addr]).await;
        let guard = client.acquire("main", secs(5), secs(60)).await.unwrap();
        // The usual end of a program: the guard goes out of scope, and the
        // runtime ends right after. Without close, the release spawned by
        // the drop dies with the runtime and the key stays held 60 s.
        drop(guard);
        client.close().await.unwrap();
    });
    in_a_main_of_its_own(move || async move {
        let mut other = baton_tests::LineClient::connect(addr).await;
        let line = other.request("A main 0.5 5").await;
        grant_token(&line, "main");
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_close_requests_fail_and_given_up_tokens_stay_held() {
    let node = Batond::start(&[]);
    let client = client(&[node.addr()]).await;
    let clone = client.clone();
    let guard = client.acquire("refused", secs(5), secs(60)).await.unwrap();
    let kept = client
        .acquire("kept", secs(5), secs(60))
        .await
        .unwrap()
        .into_token();
    client.close().await.unwrap();

    let again = clone.acquire("other", secs(1), secs(5)).await;
    assert!(matches!(again, Err(Error::Closed)), "{again:?}");
    let renewed = guard.renew(secs(5)).await;
    assert!(matches!(renewed, Err(Error::Closed)), "{renewed:?}");
    let released = guard.release().await;
    assert!(matches!(released, Err(Error::Closed)), "{released:?}");
    client.close().await.unwrap();

    let mut probe = node.connect().await;
    assert_eq!(
        probe.request("A kept 0.2 5").await,
        "T kept",
        "into_token gave the lock up to its caller: close must leave it"
    );
    assert_eq!(probe.request(&format!("R kept {kept}")).await, "R kept");
    grant_token(&probe.request("A refused 0.5 5").await, "refused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_gives_up_an_acquire_still_waiting() {
    let node = Batond::start(&[]);
    let mut holder = node.connect().await;
    let held = grant_token(&holder.request("A queue 1 60").await, "queue");
    let client = client(&[node.addr()]).await;
    let waiting = {
        let client = client.clone();
        tokio::spawn(async move { client.acquire("queue", secs(30), secs(60)).await })
    };
    // Queued on the node behind the holder.
    let mut probe = node.connect().await;
    probe
        .wait_status("the acquire queued", secs(3), |s| {
            baton_tests::status_u64(s, "waiters") == 1
        })
        .await;
    let started = Instant::now();
    client.close().await.unwrap();
    let given_up = tokio::time::timeout(secs(2), waiting)
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(given_up, Err(Error::Closed)), "{given_up:?}");
    assert!(started.elapsed() < secs(2), "{:?}", started.elapsed());
    // The closed connection took the waiter out of the node's queue, so the
    // key is free once the holder lets go.
    probe
        .wait_status("the waiter gone", secs(3), |s| {
            baton_tests::status_u64(s, "waiters") == 0
        })
        .await;
    assert_eq!(holder.request(&format!("R queue {held}")).await, "R queue");
    grant_token(&probe.request("A queue 0.5 5").await, "queue");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_is_bounded_when_no_node_answers() {
    let mut node = Batond::start(&[]);
    let client = client(&[node.addr()]).await;
    let _guard = client.acquire("silent", secs(5), secs(60)).await.unwrap();
    node.stop_signal();
    let started = Instant::now();
    let closed = tokio::time::timeout(secs(10), client.close()).await;
    let took = started.elapsed();
    node.cont();
    let closed = closed.unwrap();
    assert!(
        matches!(closed, Err(Error::Unanswered { .. } | Error::NoServer)),
        "{closed:?}"
    );
    // The release retry rules: 5 s at most, plus scheduling slack.
    assert!(took < Duration::from_millis(6_500), "close took {took:?}");
}
