//! Waiters on different clients are served in the order they asked.

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test

mod common;

use std::time::Duration;

use baton_tests::{status_u64, Batond};
use common::{client, secs};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_on_separate_clients_get_the_lock_first_come_first_served() {
    let node = Batond::start(&[]);
    let mut probe = node.connect().await;
    let holder = client(&[node.addr()]).await;
    let held = holder.acquire("fifo", secs(5), secs(30)).await.unwrap();
    let (order_tx, mut order_rx) = tokio::sync::mpsc::unbounded_channel();
    let mut tasks = Vec::new();
    for i in 0..5u64 {
        let waiter = client(&[node.addr()]).await;
        let order_tx = order_tx.clone();
        tasks.push(tokio::spawn(async move {
            let guard = waiter.acquire("fifo", secs(30), secs(30)).await.unwrap();
            order_tx.send((i, guard.token())).unwrap();
            // Hold a moment so a wrong order would show.
            tokio::time::sleep(Duration::from_millis(50)).await;
            guard.release().await.unwrap();
        }));
        // Wait until the node has queued this waiter before the next asks.
        let queued = probe
            .wait_status("queued", secs(5), move |s| {
                status_u64(s, "waiters") == i + 1
            })
            .await;
        assert_eq!(status_u64(&queued, "waiters"), i + 1);
    }
    let first = held.token();
    held.release().await.unwrap();
    let mut last = first;
    for expected in 0..5 {
        let (i, token) = tokio::time::timeout(secs(10), order_rx.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(i, expected, "waiter {i} served out of turn");
        assert!(token > last, "tokens grow with each handoff");
        last = token;
    }
    for task in tasks {
        task.await.unwrap();
    }
}
