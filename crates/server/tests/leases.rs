//! Leases and waits run out on tokio's paused time: the real server
//! (`baton_server::run`, its connections and its timer) on an in-memory
//! listener, so a 30 s lease costs no real time and the instants are exact.

mod memory;

use memory::token;

use std::time::Duration;

use baton_server::ServerConfig;
use tokio::sync::oneshot;
use tokio::time::Instant;

/// A node with the default settings.
fn start() -> (
    memory::Dial,
    oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
) {
    memory::start(ServerConfig::default())
}

#[tokio::test(start_paused = true)]
async fn a_lease_runs_out_and_the_waiter_gets_the_key_at_that_instant() {
    let (dial, _stop, _server) = start();
    let mut holder = dial.connect().await;
    let mut waiter = dial.connect().await;
    let started = Instant::now();
    let first = token(&holder.ask("A k 0 30").await);
    let second = waiter.ask("A k 60 10").await;
    assert_eq!(second, format!("A k {}", first + 1));
    assert_eq!(started.elapsed(), Duration::from_secs(30));
    // The holder's lease is gone: its release finds no grant.
    assert_eq!(holder.ask(&format!("R k {first}")).await, "N R k");
}

#[tokio::test(start_paused = true)]
async fn a_wait_runs_out_with_t_and_the_key_stays_held() {
    let (dial, _stop, _server) = start();
    let mut holder = dial.connect().await;
    let mut waiter = dial.connect().await;
    let started = Instant::now();
    let first = token(&holder.ask("A k 0 30").await);
    assert_eq!(waiter.ask("A k 5 10").await, "T k");
    assert_eq!(started.elapsed(), Duration::from_secs(5));
    assert_eq!(holder.ask(&format!("R k {first}")).await, "R k");
}

#[tokio::test(start_paused = true)]
async fn a_renewal_moves_the_end_of_the_lease() {
    let (dial, _stop, _server) = start();
    let mut holder = dial.connect().await;
    let mut waiter = dial.connect().await;
    let started = Instant::now();
    let first = token(&holder.ask("A k 0 10").await);
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_eq!(holder.ask(&format!("K k {first} 10")).await, "K k");
    let second = token(&waiter.ask("A k 60 10").await);
    assert!(second > first);
    assert_eq!(started.elapsed(), Duration::from_secs(18));
}

#[tokio::test(start_paused = true)]
async fn a_stop_closes_every_connection_and_returns() {
    let (dial, stop, server) = start();
    let mut client = dial.connect().await;
    let _held = token(&client.ask("A k 0 30").await);
    let mut waiter = dial.connect().await;
    waiter.send("A k 60 10").await;
    // Let the server queue it before stopping.
    tokio::task::yield_now().await;
    stop.send(()).expect("server runs");
    tokio::time::timeout(Duration::from_secs(6), server)
        .await
        .expect("the server returns within its stop wait")
        .expect("no panic");
    assert_eq!(waiter.line().await, "", "the connection is closed");
}
