//! The Rust client against a real node, with several acquires of one key
//! pending from one client: a node answers a later acquire's `T` before an
//! older acquire of the key that still waits, so the client keeps at most
//! one acquire of a key in flight per connection (docs/protocol.md,
//! "Pipelining and matching").

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test

use std::net::SocketAddr;
use std::time::Duration;

use baton_client::{Client, Error, Guard, KeyStateExt, LockMode};
use baton_tests::{status_u64, Batond};
use tokio::task::JoinHandle;
use tokio::time::Instant;

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

async fn client(addr: SocketAddr) -> Client {
    Client::builder()
        .servers([addr.to_string()])
        .connect_timeout(secs(2))
        .request_timeout(secs(5))
        .build()
        .await
        .unwrap()
}

/// Waits until `key` has `n` waiters on the node, as `observer` sees it.
async fn until_waiters(observer: &Client, key: &str, n: u64) {
    let deadline = Instant::now() + secs(10);
    loop {
        let state = observer.inspect(key).await.unwrap();
        if state.waiters == n {
            return;
        }
        assert!(Instant::now() < deadline, "{key} never had {n} waiters");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

type Pending = JoinHandle<baton_client::Result<Guard>>;

/// A node, a key held there by one client, a client that watches it, and
/// the client under test.
struct Scene {
    node: Batond,
    holder: Client,
    held: Guard,
    observer: Client,
    tested: Client,
}

impl Scene {
    async fn start(key: &str) -> Scene {
        let node = Batond::start(&[]);
        let holder = client(node.addr()).await;
        let held = holder.acquire(key, secs(5), secs(60)).await.unwrap();
        let observer = client(node.addr()).await;
        let tested = client(node.addr()).await;
        Scene {
            node,
            holder,
            held,
            observer,
            tested,
        }
    }
}

/// Starts an acquire of `key` on `client` and waits until the node queued
/// it (`waiters` of them then), so that the acquires go out in order.
async fn queued(
    client: &Client,
    observer: &Client,
    shared: bool,
    wait: u64,
    waiters: u64,
) -> Pending {
    let client = client.clone();
    let acquire = tokio::spawn(async move {
        let acquire = client.acquire("rw", secs(wait), secs(30));
        if shared {
            acquire.shared().await
        } else {
            acquire.await
        }
    });
    until_waiters(observer, "rw", waiters).await;
    acquire
}

/// The example of the bug: the key held elsewhere, one client sends two
/// readers (wait 20 s, shared), then two writers (wait 1 s); its two
/// connections take them in turn, so each writer shares a connection with
/// a reader still waiting. The node answers each writer's `T` first: the
/// old client handed it to the reader, and the reader's shared grant later
/// to the writer, which believed it held the key alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_writer_behind_waiting_readers_of_its_key_times_out_itself() {
    let Scene {
        node: _node,
        observer,
        tested: readers_and_writers,
        held,
        holder: _holder,
    } = Scene::start("rw").await;

    let first_reader = queued(&readers_and_writers, &observer, true, 20, 1).await;
    let second_reader = queued(&readers_and_writers, &observer, true, 20, 2).await;
    let client = readers_and_writers.clone();
    let writers = tokio::spawn(async move {
        let first = async { client.acquire("rw", secs(1), secs(30)).await };
        let second = async { client.acquire("rw", secs(1), secs(30)).await };
        tokio::join!(first, second)
    });
    let (first, second) = tokio::time::timeout(secs(10), writers)
        .await
        .unwrap()
        .unwrap();
    for writer in [first, second] {
        assert!(matches!(writer, Err(Error::TimedOut { .. })), "{writer:?}");
    }
    assert!(
        !first_reader.is_finished() && !second_reader.is_finished(),
        "a reader was told the writer's time-out"
    );

    held.release().await.unwrap();
    let mut readers = Vec::new();
    for reader in [first_reader, second_reader] {
        let guard = tokio::time::timeout(secs(10), reader).await.unwrap();
        readers.push(guard.unwrap().unwrap());
    }
    let state = observer.inspect("rw").await.unwrap();
    assert_eq!(state.mode(), LockMode::Shared, "{state:?}");
    assert_eq!(state.holder_count(), 2, "{state:?}");
    for reader in &readers {
        let token = reader.token();
        assert!(
            state.holders().iter().any(|h| h.token == token),
            "{state:?}"
        );
    }
}

fn acquire(client: &Client, key: &'static str, wait: u64) -> Pending {
    let client = client.clone();
    tokio::spawn(async move { client.acquire(key, secs(wait), secs(30)).await })
}

async fn granted(acquiring: Pending) -> Guard {
    let guard = tokio::time::timeout(secs(10), acquiring).await.unwrap();
    guard.unwrap().unwrap()
}

/// A client has two connections to its one node. A second acquire of a
/// key whose first waits on one of them goes out on the other at once:
/// the node counts both as waiters (in `Q` and in `S`), and grants them in
/// turn. The old client sent it on the connection its round-robin gave
/// (the busy one, after one other call in between), where it waited in
/// the client until the first was answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_acquire_of_a_key_goes_out_on_the_connection_where_the_key_is_free() {
    let Scene {
        node,
        observer,
        tested: both,
        held,
        holder: _holder,
    } = Scene::start("free").await;

    let first = acquire(&both, "free", 20);
    until_waiters(&observer, "free", 1).await;
    // One other call: the round-robin comes back to the busy connection.
    both.inspect("free").await.unwrap();
    let second = acquire(&both, "free", 20);
    until_waiters(&observer, "free", 2).await;
    let status = node.connect().await.status().await;
    assert_eq!(status_u64(&status, "waiters"), 2, "{status:?}");

    held.release().await.unwrap();
    let first = granted(first).await;
    assert!(!second.is_finished(), "served in turn");
    let token = first.token();
    first.release().await.unwrap();
    assert!(granted(second).await.token() > token);
}
