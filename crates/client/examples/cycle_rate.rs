//! The Rust client's cycle rate (acquire then release, each caller on its
//! own key) against a running node, for the comparison with the Go client
//! and a raw socket in docs/benchmarks.md (benches/client_rates.sh runs
//! all three side by side).
//!
//! ```text
//! cargo run --release -p baton-client --example cycle_rate -- 127.0.0.1:7411 5
//! ```
//!
//! Prints one line per load, `<load> <cycles per second>`: `c1` (one
//! caller), `c16` (16 callers) and `pipelined` (256 callers, so up to 128
//! requests in flight on each of the client's two connections).

use std::time::{Duration, Instant};

use baton_client::Client;

/// Callers of each load, in the order printed.
const LOADS: [(&str, usize); 3] = [("c1", 1), ("c16", 16), ("pipelined", 256)];
const WAIT: Duration = Duration::from_secs(5);
const LEASE: Duration = Duration::from_secs(30);

/// Cycles per second of `callers` tasks for `length`.
async fn cycles(
    client: &Client,
    callers: usize,
    length: Duration,
) -> Result<f64, baton_client::Error> {
    let end = Instant::now() + length;
    let tasks: Vec<_> = (0..callers)
        .map(|i| {
            let client = client.clone();
            tokio::spawn(async move {
                let key = format!("rate/{i}");
                let mut done = 0u64;
                while Instant::now() < end {
                    client.acquire(&key, WAIT, LEASE).await?.release().await?;
                    done += 1;
                }
                Ok::<u64, baton_client::Error>(done)
            })
        })
        .collect();
    let started = Instant::now();
    let mut total = 0;
    for task in tasks {
        total += task
            .await
            .map_err(|e| baton_client::Error::Unexpected(e.to_string()))??;
    }
    Ok(total as f64 / started.elapsed().as_secs_f64())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let server = args.next().unwrap_or_else(|| "127.0.0.1:7411".to_owned());
    let seconds: f64 = args.next().map_or(Ok(5.0), |s| s.parse())?;
    let client = Client::builder().servers([server]).build().await?;
    // Warm-up: connections made, allocators settled.
    cycles(&client, 16, Duration::from_millis(500)).await?;
    for (load, callers) in LOADS {
        let rate = cycles(&client, callers, Duration::from_secs_f64(seconds)).await?;
        println!("{load} {rate:.0}");
    }
    client.close().await?;
    Ok(())
}
