//! The waiter storm: one connection holds a key while W acquires queue
//! behind it (spread over up to 100 connections, pipelined); then the
//! holder releases and the queue drains, each waiter releasing as soon as
//! it is granted. Rate: grants per second of the drain; latency: handoffs.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::{sleep, Instant};

use crate::conn::Conn;
use crate::error::BenchError;
use crate::referee::Referee;
use crate::scenario::Measured;
use crate::stats::Stats;
use crate::status;
use crate::window::Window;
use crate::wire::{self, Reply};

const MAX_CONNECTIONS: usize = 100;
/// Waits and leases far beyond the drain, so no waiter times out.
const WAIT_MS: u64 = 120_000;
const LEASE_MS: u64 = 60_000;
/// How long the queue may take to fill, as the node's `S` reports it.
const QUEUE_LIMIT: Duration = Duration::from_secs(30);

/// Runs one storm of `waiters` on a fresh key at `addr`.
pub async fn run(
    addr: SocketAddr,
    waiters: usize,
    prefix: &str,
    drain: Duration,
) -> Result<Measured, BenchError> {
    let key: Arc<[u8]> = format!("{prefix}storm").into_bytes().into();
    let give_up_at = Instant::now() + QUEUE_LIMIT + drain;
    let referee = Arc::new(Referee::new(true));
    let holder_id = MAX_CONNECTIONS;
    let mut holder = Conn::connect(holder_id, addr).await?;
    wire::acquire(&mut holder.out, &key, WAIT_MS, LEASE_MS);
    holder.flush(give_up_at, drain).await?;
    let token = loop {
        holder.fill(give_up_at, drain).await?;
        if let Some(line) = holder.lines.next_line() {
            match wire::parse_reply(line) {
                Reply::Granted { token, .. } => break token,
                _ => return Err(BenchError::protocol(holder_id, "holder not granted", line)),
            }
        }
    };
    referee.granted(holder_id, token, Instant::now())?;

    let connections = MAX_CONNECTIONS.min(waiters);
    let mut conns = Vec::with_capacity(connections);
    for id in 0..connections {
        let count = waiters / connections + usize::from(id < waiters % connections);
        let mut conn = Conn::connect(id, addr).await?;
        for _ in 0..count {
            wire::acquire(&mut conn.out, &key, WAIT_MS, LEASE_MS);
        }
        conn.flush(give_up_at, drain).await?;
        conns.push((conn, count));
    }
    wait_for_queue(addr, waiters as u64).await?;

    let started = Instant::now();
    let window = Window {
        measure_from: started,
        stop_at: give_up_at,
        give_up_at,
        drain,
    };
    let mut tasks = JoinSet::new();
    for (conn, count) in conns {
        tasks.spawn(drain_waiters(
            conn,
            Arc::clone(&key),
            count,
            Arc::clone(&referee),
            window,
        ));
    }
    referee.releasing(holder_id, token, Instant::now());
    wire::release(&mut holder.out, &key, token);
    holder.flush(give_up_at, drain).await?;
    let mut total = Stats::default();
    let mut finished = started;
    while let Some(joined) = tasks.join_next().await {
        let (stats, at) = joined??;
        total.merge(&stats);
        finished = finished.max(at);
    }
    let seconds = (finished - started).as_secs_f64().max(1e-9);
    Ok(Measured {
        rate: total.cycles as f64 / seconds,
        p50: total.latency.quantile(0.50),
        p99: total.latency.quantile(0.99),
    })
}

/// Polls the node until it reports at least `waiters` queued acquires.
async fn wait_for_queue(addr: SocketAddr, waiters: u64) -> Result<(), BenchError> {
    let deadline = Instant::now() + QUEUE_LIMIT;
    let mut seen = None;
    while Instant::now() < deadline {
        let status = status::query(addr, Duration::from_secs(1)).await;
        seen = status.and_then(|s| s.number("waiters"));
        if seen >= Some(waiters) {
            return Ok(());
        }
        sleep(Duration::from_millis(10)).await;
    }
    Err(BenchError::Scenario(format!(
        "storm: the node reported waiters={seen:?}, not {waiters}, after {QUEUE_LIMIT:?}"
    )))
}

/// Takes and gives back the key `count` times on `conn`; returns when its
/// last release is answered.
async fn drain_waiters(
    mut conn: Conn,
    key: Arc<[u8]>,
    count: usize,
    referee: Arc<Referee>,
    window: Window,
) -> Result<(Stats, Instant), BenchError> {
    let mut stats = Stats::default();
    let mut released = 0;
    while released < count {
        conn.fill(window.give_up_at, window.drain).await?;
        let now = Instant::now();
        while let Some(line) = conn.lines.next_line() {
            match wire::parse_reply(line) {
                Reply::Granted { key: k, token } if *k == *key => {
                    if let Some(handoff) = referee.granted(conn.id, token, now)? {
                        stats.latency.record(handoff);
                    }
                    stats.cycles += 1;
                    referee.releasing(conn.id, token, Instant::now());
                    wire::release(&mut conn.out, &key, token);
                }
                Reply::Released { key: k } if *k == *key => released += 1,
                _ => {
                    return Err(BenchError::protocol(
                        conn.id,
                        "storm waiter got an unexpected response",
                        line,
                    ))
                }
            }
        }
        conn.flush(window.give_up_at, window.drain).await?;
    }
    Ok((stats, Instant::now()))
}
