//! Guards: keep-alive past the lease, lease loss signalled, release on drop.

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test

mod common;

use std::time::Duration;

use baton_client::Error;
use baton_tests::{status_u64, Batond};
use common::{client, secs};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_holds_the_lock_past_its_lease() {
    let node = Batond::start(&[]);
    let client = client(&[node.addr()]).await;
    let mut guard = client
        .acquire("ka", secs(5), Duration::from_millis(600))
        .await
        .unwrap();
    guard.keep_alive();
    tokio::time::sleep(Duration::from_millis(2000)).await;
    assert!(!guard.is_lost());
    let mut probe = node.connect().await;
    assert_eq!(
        probe.request("A ka 0.1 5").await,
        "T ka",
        "renewed, so still held"
    );
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_loss_is_signalled_to_the_holder() {
    let node = Batond::start(&[]);
    let client = client(&[node.addr()]).await;
    let mut guard = client
        .acquire("lost", secs(5), Duration::from_millis(600))
        .await
        .unwrap();
    guard.keep_alive();
    // Someone else ends the grant: the next renewal is answered `N K`.
    let mut other = node.connect().await;
    let released = other.request(&format!("R lost {}", guard.token())).await;
    assert_eq!(released, "R lost");
    let lost = tokio::time::timeout(secs(3), guard.lost()).await.unwrap();
    assert!(matches!(lost, Error::LeaseLost { .. }), "{lost:?}");
    assert!(guard.is_lost());
    let result = guard.release().await;
    assert!(matches!(result, Err(Error::NotHeld { .. })), "{result:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renew_reports_a_lost_lease() {
    let node = Batond::start(&[]);
    let client = client(&[node.addr()]).await;
    let guard = client
        .acquire("short", secs(5), Duration::from_millis(200))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    let result = guard.renew(secs(5)).await;
    assert!(matches!(result, Err(Error::LeaseLost { .. })), "{result:?}");
    assert!(guard.is_lost());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_guard_releases_in_the_background() {
    let node = Batond::start(&[]);
    let client = client(&[node.addr()]).await;
    let guard = client.acquire("drop", secs(5), secs(60)).await.unwrap();
    drop(guard);
    let mut probe = node.connect().await;
    probe
        .wait_status("released", secs(3), |s| status_u64(s, "locks") == 0)
        .await;
    let token = client
        .acquire("drop", secs(1), secs(60))
        .await
        .unwrap()
        .into_token();
    // `into_token` gives the guard up without releasing.
    let still = probe.request("A drop 0.1 5").await;
    assert_eq!(still, "T drop");
    client.release("drop", token).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_acquire_fails_at_once_on_a_held_key() {
    let node = Batond::start(&[]);
    let client = client(&[node.addr()]).await;
    let held = client.try_acquire("busy", secs(30)).await.unwrap();
    let started = std::time::Instant::now();
    let result = client.try_acquire("busy", secs(30)).await;
    assert!(matches!(result, Err(Error::TimedOut { .. })), "{result:?}");
    assert!(started.elapsed() < secs(1));
    held.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_nobody_waits_for_any_more_is_given_back() {
    let node = Batond::start(&[]);
    let client = client(&[node.addr()]).await;
    let held = client.acquire("abandon", secs(5), secs(60)).await.unwrap();
    // The caller gives up while its acquire is queued on the node ...
    let gave_up = tokio::time::timeout(
        Duration::from_millis(300),
        client.acquire("abandon", secs(30), secs(60)),
    )
    .await;
    assert!(gave_up.is_err());
    // ... so when the key passes to that request, the client releases it.
    held.release().await.unwrap();
    let mut probe = node.connect().await;
    probe
        .wait_status("abandoned grant released", secs(3), |s| {
            status_u64(s, "locks") == 0 && status_u64(s, "waiters") == 0
        })
        .await;
    let token = status_u64(&probe.status().await, "token");
    assert!(
        token >= 2,
        "the abandoned request was granted first (token {token})"
    );
}
