//! The connection set: two connections to a single address, round-robin,
//! a broken one taken out at once and reconnected in the background.

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test

mod common;

use std::time::{Duration, Instant};

use baton_client::{Client, Error};
use baton_tests::proxy::FaultProxy;
use baton_tests::Batond;
use common::{client, secs};

/// Waits until `proxy` forwards `n` connections (it counts one once its
/// upstream side is connected, a moment after the client sees it open).
async fn wait_open(proxy: &FaultProxy, n: usize, within: Duration) {
    let deadline = Instant::now() + within;
    while proxy.open_connections() != n {
        assert!(
            Instant::now() < deadline,
            "{} connections open, not {n}, after {within:?}",
            proxy.open_connections()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_gets_two_connections_and_survives_losing_one() {
    let node = Batond::start(&[]);
    let proxy = FaultProxy::start(node.addr()).await;
    let client = client(&[proxy.addr()]).await;
    wait_open(&proxy, 2, secs(2)).await;

    proxy.cut(0);
    // No pause in service: every request goes to the connection left, well
    // before the broken one is reconnected.
    let started = Instant::now();
    for i in 0..20 {
        let guard = client
            .try_acquire(format!("two/{i}"), secs(30))
            .await
            .unwrap();
        guard.release().await.unwrap();
    }
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );

    // The broken one comes back in the background, about 3 s later.
    wait_open(&proxy, 1, secs(1)).await;
    wait_open(&proxy, 2, secs(8)).await;
    assert_eq!(proxy.accepted(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_are_spread_round_robin() {
    let node = Batond::start(&[]);
    let first = FaultProxy::start(node.addr()).await;
    let second = FaultProxy::start(node.addr()).await;
    let client = client(&[first.addr(), second.addr()]).await;
    wait_open(&first, 1, secs(2)).await;
    wait_open(&second, 1, secs(2)).await;

    // With one path stalled, every other acquire goes to it and hangs.
    second.stall(true);
    let mut held = Vec::new();
    for i in 0..4 {
        let attempt = tokio::time::timeout(
            Duration::from_millis(500),
            client.try_acquire(format!("rr/{i}"), secs(5)),
        )
        .await;
        // Held, not dropped: a release on drop would take a turn too.
        if let Ok(guard) = attempt {
            held.push(guard.unwrap());
        }
    }
    assert_eq!(
        held.len(),
        2,
        "requests alternate between the two connections"
    );
}

#[tokio::test]
async fn building_fails_when_no_node_is_reachable() {
    let refused = baton_tests::free_addr();
    let result = Client::builder()
        .servers([refused.to_string()])
        .build()
        .await;
    assert!(matches!(result, Err(Error::NoServer)), "{result:?}");
    let result = Client::builder()
        .servers(Vec::<String>::new())
        .build()
        .await;
    assert!(matches!(result, Err(Error::NoAddress)), "{result:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caller_side_errors_send_nothing() {
    let node = Batond::start(&[]);
    let client = client(&[node.addr()]).await;
    let result = client.acquire("has space", secs(1), secs(1)).await;
    assert!(matches!(result, Err(Error::InvalidKey(_))), "{result:?}");
    let result = client.acquire("k", secs(1), Duration::ZERO).await;
    assert!(
        matches!(result, Err(Error::InvalidDuration { .. })),
        "{result:?}"
    );
    let result = client.acquire("k", secs(1), secs(10 * 86_400)).await;
    assert!(matches!(result, Err(Error::Rejected { .. })), "{result:?}");
    let result = client.release("k", 12345).await;
    assert!(matches!(result, Err(Error::NotHeld { .. })), "{result:?}");
    let result = client.renew("k", 12345, secs(5)).await;
    assert!(matches!(result, Err(Error::LeaseLost { .. })), "{result:?}");
}
