//! `M` answers: the client follows `M <op> <key> <addr>` to the node named,
//! connecting to it if it is new, and retries shortly after `M ... -`.

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use baton_tests::Batond;
use common::{client, secs};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

/// The `S` answer of the fake standby (the client probes every new
/// connection with `S` before using it).
const STANDBY_STATUS: &[u8] =
    b"S role=standby mode=priority self=127.0.0.1:1 active=- token=0 locks=0 waiters=0\n";

/// A node that is never active: it answers `S` as a standby, and every other
/// request `M <op> <key> X`,
/// where X is `-` for the first `unknown_for` requests (no active node
/// known yet) and `active` after that. Returns its address and a counter of
/// the requests it got.
async fn standby(active: SocketAddr, unknown_for: usize) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&seen);
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let seen = Arc::clone(&counter);
            tokio::spawn(async move {
                let (read, mut write) = socket.into_split();
                let mut lines = BufReader::new(read).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    if line == "S" {
                        if write.write_all(STANDBY_STATUS).await.is_err() {
                            return;
                        }
                        continue;
                    }
                    let fields: Vec<&str> = line.split(' ').collect();
                    let n = seen.fetch_add(1, Ordering::SeqCst);
                    let target = if n < unknown_for {
                        "-".to_owned()
                    } else {
                        active.to_string()
                    };
                    let reply = format!("M {} {} {target}\n", fields[0], fields[1]);
                    if write.write_all(reply.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follows_a_redirect_to_a_node_it_did_not_know() {
    let node = Batond::start(&[]);
    let (standby, seen) = standby(node.addr(), 0).await;
    let client = client(&[standby]).await;

    let guard = client.acquire("moved", secs(5), secs(30)).await.unwrap();
    assert!(
        seen.load(Ordering::SeqCst) >= 1,
        "the standby was asked first"
    );
    let mut probe = node.connect().await;
    let taken = probe.request("A moved 0.2 5").await;
    assert_eq!(taken, "T moved", "the grant is on the active node");

    // Release and renew are redirected the same way.
    guard.renew(secs(30)).await.unwrap();
    guard.release().await.unwrap();
    let free = probe.request("A moved 0.2 5").await;
    assert!(free.starts_with("A moved "), "{free}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_while_no_active_node_is_known() {
    let node = Batond::start(&[]);
    let (standby, seen) = standby(node.addr(), 3).await;
    let client = client(&[standby]).await;

    let guard = client.acquire("later", secs(5), secs(30)).await.unwrap();
    assert!(
        seen.load(Ordering::SeqCst) >= 4,
        "three `M A later -` then the redirect"
    );
    guard.release().await.unwrap();
}

#[tokio::test]
async fn gives_up_on_no_active_node_when_the_wait_runs_out() {
    let unreachable: SocketAddr = "127.0.0.1:1".parse().unwrap();
    let (standby, seen) = standby(unreachable, usize::MAX).await;
    let client = client(&[standby]).await;

    let started = std::time::Instant::now();
    let result = client
        .acquire("never", std::time::Duration::from_millis(600), secs(30))
        .await;
    // No node said the wait ran out: none serves.
    assert!(
        matches!(result, Err(baton_client::Error::NotServing)),
        "{result:?}"
    );
    assert!(started.elapsed() < secs(3));
    assert!(seen.load(Ordering::SeqCst) >= 2, "retried after `M ... -`");
}
