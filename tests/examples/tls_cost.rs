//! What TLS costs, side by side: one plaintext and one TLS `batond` (the
//! binary `$BATOND_BIN` names, a release build for figures worth quoting),
//! the same Rust client load against each, rounds alternating so that both
//! see the same machine. Bounded: `ROUNDS` x 2 loads x 2 targets x `ROUND`.
//!
//! ```sh
//! cargo build --release -p batond
//! BATOND_BIN=target/release/batond cargo run --release -p baton-tests --example tls_cost
//! ```
//!
//! Uncontended: one caller, acquire then release of one key, one request
//! in flight; the median latency of a request. Pipelined: `IN_FLIGHT`
//! callers on their own keys over the client's connections; requests per
//! second. Each figure is the median of the rounds.

#[path = "../tests/tls_support/mod.rs"]
mod tls_support;

use std::time::{Duration, Instant};

use baton_client::Client;
use baton_tests::Batond;

const ROUNDS: usize = 5;
const ROUND: Duration = Duration::from_secs(2);
const IN_FLIGHT: usize = 64;
const LEASE: Duration = Duration::from_secs(30);
const WAIT: Duration = Duration::from_secs(5);

/// Median request latency of one caller, in microseconds.
async fn uncontended(client: &Client) -> f64 {
    let mut samples = Vec::new();
    let end = Instant::now() + ROUND;
    while Instant::now() < end {
        let started = Instant::now();
        let guard = client
            .acquire("cost/u", WAIT, LEASE)
            .await
            .expect("acquire");
        let acquired = started.elapsed();
        let started = Instant::now();
        guard.release().await.expect("release");
        samples.push(acquired);
        samples.push(started.elapsed());
    }
    median(samples.iter().map(|d| d.as_secs_f64() * 1e6).collect())
}

/// Requests per second with `IN_FLIGHT` callers.
async fn pipelined(client: &Client) -> f64 {
    let end = Instant::now() + ROUND;
    let callers = (0..IN_FLIGHT).map(|i| {
        let client = client.clone();
        tokio::spawn(async move {
            let key = format!("cost/p{i}");
            let mut done = 0u64;
            while Instant::now() < end {
                let guard = client.acquire(&key, WAIT, LEASE).await.expect("acquire");
                guard.release().await.expect("release");
                done += 2;
            }
            done
        })
    });
    let started = Instant::now();
    let mut total = 0;
    for caller in callers.collect::<Vec<_>>() {
        total += caller.await.expect("caller");
    }
    total as f64 / started.elapsed().as_secs_f64()
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

#[tokio::main]
async fn main() {
    let pki = tls_support::Pki::new();
    let plain_node = Batond::start(&[]);
    let tls_node = Batond::start(&tls_support::strs(&pki.main.node_flags()));
    let plain = tls_support::client(plain_node.addr(), None)
        .await
        .expect("plain client");
    let tls = tls_support::client(tls_node.addr(), Some(pki.main.client_tls()))
        .await
        .expect("TLS client");
    // Warm both up: connections made, allocators and caches settled.
    uncontended(&plain).await;
    uncontended(&tls).await;
    let (mut lat, mut rate) = ([Vec::new(), Vec::new()], [Vec::new(), Vec::new()]);
    for _ in 0..ROUNDS {
        for (i, client) in [&plain, &tls].into_iter().enumerate() {
            lat[i].push(uncontended(client).await);
            rate[i].push(pipelined(client).await);
        }
    }
    let (lat, rate) = (lat.map(median), rate.map(median));
    println!("| load | plain | TLS | TLS / plain |");
    println!("|---|---|---|---|");
    println!(
        "| uncontended, median request latency | {:.1} us | {:.1} us | {:.2} |",
        lat[0],
        lat[1],
        lat[1] / lat[0]
    );
    println!(
        "| pipelined ({IN_FLIGHT} in flight), requests/s | {:.0} | {:.0} | {:.2} |",
        rate[0],
        rate[1],
        rate[1] / rate[0]
    );
    plain.close().await.expect("close");
    tls.close().await.expect("close");
}
