//! The line and idle timeouts and the eviction at the connection limit, on
//! tokio's paused time: the real server on an in-memory listener, so the
//! instants are exact and a 60 s wait costs no real time.

mod memory;

use std::time::Duration;

use baton_server::ServerConfig;
use memory::start;
use tokio::io::AsyncWriteExt;
use tokio::time::Instant;

const LINE_TIMEOUT: &str = "E ? ? line timeout: closing the connection\n";
const IDLE_TIMEOUT: &str = "E ? ? idle timeout: closing the connection\n";

#[tokio::test(start_paused = true)]
async fn a_silent_connection_is_closed_at_the_line_timeout() {
    let (dial, _stop, _server) = start(ServerConfig::default());
    let started = Instant::now();
    let mut silent = dial.connect().await;
    assert_eq!(silent.rest().await, LINE_TIMEOUT);
    let after = started.elapsed();
    assert!(
        after >= Duration::from_secs(10) && after < Duration::from_millis(10_100),
        "{after:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn half_a_line_is_closed_a_line_timeout_after_its_first_byte() {
    let (dial, _stop, _server) = start(ServerConfig::default());
    let mut client = dial.connect().await;
    assert!(client.ask("S").await.starts_with("S "));
    tokio::time::sleep(Duration::from_secs(7)).await;
    let began = Instant::now();
    client.0.get_mut().write_all(b"A k").await.expect("write");
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let _ = client.0.get_mut().write_all(b" ").await;
    }
    assert_eq!(client.rest().await, LINE_TIMEOUT);
    let after = began.elapsed();
    assert!(
        after >= Duration::from_secs(10) && after < Duration::from_millis(10_100),
        "{after:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn idle_connections_close_but_a_waiting_acquire_keeps_its_own() {
    let config = ServerConfig {
        idle_timeout: Some(Duration::from_secs(8)),
        ..ServerConfig::default()
    };
    let (dial, _stop, _server) = start(config);
    let mut holder = dial.connect().await;
    let mut waiter = dial.connect().await;
    let started = Instant::now();
    assert!(holder.ask("A k 0 100").await.starts_with("A k "));
    waiter.send("A k 60 10").await;
    assert_eq!(holder.rest().await, IDLE_TIMEOUT);
    let idle = started.elapsed();
    assert!(
        idle >= Duration::from_secs(8) && idle <= Duration::from_secs(10),
        "{idle:?}"
    );
    // Waiting is not idle: `T` at 60 s, then idle from there.
    assert_eq!(waiter.line().await, "T k");
    assert_eq!(started.elapsed(), Duration::from_secs(60));
    assert_eq!(waiter.rest().await, IDLE_TIMEOUT);
    assert!(started.elapsed() >= Duration::from_secs(68));
}

#[tokio::test(start_paused = true)]
async fn at_the_limit_a_newcomer_evicts_the_oldest_unfinished_line() {
    let config = ServerConfig {
        max_connections: 3,
        ..ServerConfig::default()
    };
    let (dial, _stop, _server) = start(config);
    let mut good = dial.connect().await;
    assert!(good.ask("S").await.starts_with("S "));
    let mut oldest = dial.connect().await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut younger = dial.connect().await;
    younger.0.get_mut().write_all(b"A k").await.expect("write");
    // Within the grace nobody is evicted: the newcomer is refused.
    let mut refused = dial.connect().await;
    assert_eq!(refused.rest().await, "E ? ? too many connections\n");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut newcomer = dial.connect().await;
    assert!(newcomer.ask("S").await.starts_with("S "));
    assert!(oldest
        .rest()
        .await
        .starts_with("E ? ? closed: the node is at its connection limit"));
    // The next one goes, then the well-behaved client is all that is left.
    let mut next = dial.connect().await;
    assert!(next.ask("S").await.starts_with("S "));
    assert!(younger.rest().await.starts_with("E ? ? closed"));
    assert!(good.ask("S").await.starts_with("S "));
}
