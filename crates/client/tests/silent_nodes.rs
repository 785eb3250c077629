//! A node that stops answering, against scripted fake nodes: a silent
//! connection with requests in flight is probed with `S`, given up when the
//! probe goes unanswered, and its acquire fails over with the wait left
//! (its renewals are retried elsewhere in time); a wait nobody answered is
//! not a timeout; a redirect to a connection that is down dials it at once,
//! and one that comes after the wait ran out is still followed.

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use baton_client::{Client, Error};
use baton_tests::proxy::FaultProxy;
use common::fake::{FakeNode, Script};
use common::secs;

/// Silence after which the tests' clients give a connection up.
const UNRESPONSIVE: Duration = Duration::from_secs(1);

async fn client_of(addrs: &[SocketAddr]) -> Client {
    Client::builder()
        .servers(addrs.iter().map(ToString::to_string))
        .connect_timeout(secs(2))
        .unresponsive_after(UNRESPONSIVE)
        .build()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_connection_is_probed_then_its_acquire_fails_over() {
    let frozen = FakeNode::start(Script::Serve).await;
    let serving = FakeNode::start(Script::Serve).await;
    let client = client_of(&[frozen.addr, serving.addr]).await;
    frozen.freeze();
    // Round-robin: one of the two acquires goes to the frozen node first.
    for key in ["silent/a", "silent/b"] {
        let started = Instant::now();
        let guard = tokio::time::timeout(secs(4), client.acquire(key, secs(5), secs(30)))
            .await
            .expect("the acquire sat on the frozen node")
            .unwrap();
        eprintln!("{key} granted after {:?}", started.elapsed());
        let _ = guard.into_token();
    }
    let seen = frozen.lines();
    let acquire = seen
        .iter()
        .position(|l| l.starts_with("A silent/"))
        .unwrap_or_else(|| panic!("the frozen node got no acquire: {seen:?}"));
    assert!(
        seen[acquire..].iter().any(|l| l == "S"),
        "no probe after the acquire: {seen:?}"
    );
    let granted = serving.lines();
    for key in ["A silent/a", "A silent/b"] {
        assert!(
            granted.iter().any(|l| l.starts_with(key)),
            "{key} not on the serving node: {granted:?}"
        );
    }
}

/// Holds `key` with a 3 s lease and keep-alive (renewed every second),
/// freezes `frozen`, and checks for 7 s that the lease is never lost though
/// round-robin sent a renewal to the frozen node, which never answered.
async fn hold_through_a_freeze(client: &Client, frozen: &FakeNode, key: &str) {
    let mut guard = client.acquire(key, secs(5), secs(3)).await.unwrap();
    guard.keep_alive();
    frozen.freeze();
    let frozen_at = Instant::now();
    tokio::select! {
        lost = guard.lost() => panic!("{lost} after {:?}", frozen_at.elapsed()),
        () = tokio::time::sleep(secs(7)) => {}
    }
    let renewal = format!("K {key} ");
    assert!(
        frozen.lines().iter().any(|l| l.starts_with(&renewal)),
        "{:?}",
        frozen.lines()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_renewals_go_elsewhere_when_a_node_goes_silent() {
    let frozen = FakeNode::start(Script::Serve).await;
    let serving = FakeNode::start(Script::Serve).await;
    let client = client_of(&[frozen.addr, serving.addr]).await;
    hold_through_a_freeze(&client, &frozen, "renewed").await;
    let renewed = serving
        .lines()
        .iter()
        .filter(|l| l.starts_with("K renewed "))
        .count();
    assert!(renewed >= 4, "{renewed} renewals on the serving node");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_keep_alive_lease_outlasts_a_silent_node_before_it_is_found_out() {
    let frozen = FakeNode::start(Script::Serve).await;
    let serving = FakeNode::start(Script::Serve).await;
    // The default 4 s before a silent connection is given up: longer than
    // the whole lease. A renewal waits for one node half the time left.
    let client = common::client(&[frozen.addr, serving.addr]).await;
    hold_through_a_freeze(&client, &frozen, "short").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_no_node_answered_is_no_server_not_a_timeout() {
    let first = FakeNode::start(Script::Serve).await;
    let second = FakeNode::start(Script::Serve).await;
    let client = client_of(&[first.addr, second.addr]).await;
    first.freeze();
    second.freeze();
    let started = Instant::now();
    let result = client.acquire("nobody", secs(2), secs(30)).await;
    let took = started.elapsed();
    assert!(matches!(result, Err(Error::NoServer)), "{result:?}");
    // Two connections given up one after the other, at most.
    assert!(took < secs(2) + 2 * UNRESPONSIVE + secs(1), "took {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_to_a_connection_that_is_down_dials_it_at_once() {
    let serving = FakeNode::start(Script::Serve).await;
    let proxy = FaultProxy::start(serving.addr).await;
    let standby = FakeNode::start(Script::Redirect(proxy.addr(), Duration::ZERO)).await;
    let client = client_of(&[standby.addr, proxy.addr()]).await;
    // The connection through the proxy breaks: the background redial is
    // 3 s away.
    proxy.cut_all();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = Instant::now();
    let guard = client
        .acquire("moved/now", secs(10), secs(30))
        .await
        .unwrap();
    let took = started.elapsed();
    assert!(
        took < Duration::from_millis(1500),
        "the redirect waited for the background redial: {took:?}"
    );
    assert!(standby.lines().iter().any(|l| l.starts_with("A moved/now")));
    let _ = guard.into_token();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_try_follows_a_redirect_that_came_after_its_wait_ran_out() {
    let serving = FakeNode::start(Script::Serve).await;
    // The redirect comes 50 ms after the try's 1 ms wait ran out: the node
    // it names still decides.
    let slow = Duration::from_millis(50);
    let standby = FakeNode::start(Script::Redirect(serving.addr, slow)).await;
    let client = client_of(&[standby.addr]).await;
    let guard = client.try_acquire("moved/try", secs(30)).await.unwrap();
    assert!(serving
        .lines()
        .iter()
        .any(|l| l.starts_with("A moved/try 0.001 ")));
    let _ = guard.into_token();
}
