//! The watch fan-out: W watches of one free key (`W <key> <wait> -`),
//! spread over enough connections to stay under the node's cap per
//! connection, then one change of the key (an acquire on another
//! connection). Figure: milliseconds from the change being sent until the
//! last watcher is answered; latency: each watcher's answer. Every watcher
//! must be answered, with the state the change made, within the drain, or
//! the run fails.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::conn::Conn;
use crate::error::BenchError;
use crate::histogram::Histogram;
use crate::scenario::Measured;
use crate::target::{Dialect, Target};
use crate::wire::{self, Reply};

/// Watches per connection: half the node's default cap per connection
/// (`--max-watches-per-connection 1000`), so that 10,000 watchers use 20
/// connections.
pub const WATCHES_PER_CONNECTION: usize = 500;
/// Far beyond setting up the watches and the fan-out itself, so that no
/// watch's wait runs out (its answer would then report no change).
const WATCH_WAIT_MS: u64 = 120_000;
/// The change: an acquire of the free key, granted at once.
const CHANGE_WAIT_MS: u64 = 5_000;
const CHANGE_LEASE_MS: u64 = 30_000;
/// How long opening the connections and registering the watches may take.
const SETUP_LIMIT: Duration = Duration::from_secs(60);

/// What the fan-out of one run measured.
#[derive(Clone, Debug)]
pub struct Fanout {
    /// From the change being sent until the last watcher's answer.
    pub last: Duration,
    /// Each watcher's answer, from the same instant.
    pub answers: Histogram,
}

impl Fanout {
    pub fn measured(&self) -> Measured {
        Measured {
            rate: self.last.as_secs_f64() * 1000.0,
            p50: self.answers.quantile(0.50),
            p99: self.answers.quantile(0.99),
        }
    }
}

/// How many watches each connection carries: `watchers` spread evenly
/// over as few connections as keep each at most `per_connection`.
pub fn spread(watchers: usize, per_connection: usize) -> Vec<usize> {
    let connections = watchers.div_ceil(per_connection.max(1));
    (0..connections)
        .map(|i| watchers / connections + usize::from(i < watchers % connections))
        .collect()
}

/// Runs one fan-out of `watchers` against `target` at `addr`: a Baton
/// node's watches, or etcd's where its election maps.
pub async fn run_target(
    addr: SocketAddr,
    target: Target,
    watchers: usize,
    prefix: &str,
    drain: Duration,
) -> Result<Measured, BenchError> {
    let fanout = match target.dialect() {
        Dialect::Baton => run(addr, watchers, prefix, drain).await?,
        #[cfg(feature = "etcd")]
        Dialect::Etcd => crate::etcd_fanout::run(addr, watchers, prefix, drain).await?,
        #[allow(unreachable_patterns)] // reachable without the etcd feature
        _ => {
            return Err(BenchError::Scenario(format!(
                "this build has no watch fan-out for {}",
                target.name()
            )))
        }
    };
    Ok(fanout.measured())
}

/// Runs one fan-out of `watchers` on a fresh key at the Baton node `addr`.
pub async fn run(
    addr: SocketAddr,
    watchers: usize,
    prefix: &str,
    drain: Duration,
) -> Result<Fanout, BenchError> {
    let key: Arc<[u8]> = format!("{prefix}fan").into_bytes().into();
    let setup_until = Instant::now() + SETUP_LIMIT;
    let counts = spread(watchers, WATCHES_PER_CONNECTION);
    let mut conns = Vec::with_capacity(counts.len());
    for (id, &count) in counts.iter().enumerate() {
        let mut conn = Conn::connect(id, addr).await?;
        for _ in 0..count {
            wire::watch(&mut conn.out, &key, WATCH_WAIT_MS, b"-");
        }
        // A node handles a connection's requests in order: once `Q` is
        // answered, every watch before it is registered.
        wire::query(&mut conn.out, &key);
        conn.flush(setup_until, SETUP_LIMIT).await?;
        conns.push((conn, count));
    }
    for (conn, _) in &mut conns {
        registered(conn, &key, setup_until).await?;
    }
    let changer_id = counts.len();
    let mut changer = Conn::connect(changer_id, addr).await?;
    let started = Instant::now();
    let give_up_at = started + drain;
    let mut tasks = JoinSet::new();
    for (conn, count) in conns {
        tasks.spawn(await_answers(
            conn,
            Arc::clone(&key),
            count,
            started,
            give_up_at,
        ));
    }
    wire::acquire(&mut changer.out, &key, CHANGE_WAIT_MS, CHANGE_LEASE_MS);
    changer.flush(give_up_at, drain).await?;
    let token = granted(&mut changer, &key, give_up_at, drain).await?;
    let fanout = gather(tasks, |seen: &Vec<u8>| {
        if *seen == token.to_string().as_bytes() {
            return Ok(());
        }
        let problem = "a watcher was answered with another state than the change's";
        Err(BenchError::protocol(changer_id, problem, seen))
    })
    .await?;
    wire::release(&mut changer.out, &key, token);
    changer.flush(give_up_at, drain).await?;
    Ok(fanout)
}

/// What one connection's watchers saw: their latencies, the latest, and
/// the state they all report.
pub type Answered<S> = (Histogram, Duration, S);

/// Joins every connection's watchers into the fan-out's figures, the
/// state each reports held to the change by `check`.
pub async fn gather<S: Send + 'static>(
    mut tasks: JoinSet<Result<Answered<S>, BenchError>>,
    check: impl Fn(&S) -> Result<(), BenchError>,
) -> Result<Fanout, BenchError> {
    let mut answers = Histogram::new();
    let mut last = Duration::ZERO;
    while let Some(joined) = tasks.join_next().await {
        let (latencies, latest, seen) = joined??;
        check(&seen)?;
        last = last.max(latest);
        answers.merge(&latencies);
    }
    Ok(Fanout { last, answers })
}

/// Reads `conn` until the answer to its `Q`; a watch answered before is
/// a watch that did not wait for the change.
async fn registered(conn: &mut Conn, key: &[u8], until: Instant) -> Result<(), BenchError> {
    loop {
        conn.fill(until, SETUP_LIMIT).await?;
        if let Some(line) = conn.lines.next_line() {
            if wire::is_query_answer(line, key) {
                return Ok(());
            }
            let problem = "a watch was answered before the key changed";
            return Err(BenchError::protocol(conn.id, problem, line));
        }
    }
}

/// The token of the changer's grant.
async fn granted(
    conn: &mut Conn,
    key: &[u8],
    give_up_at: Instant,
    drain: Duration,
) -> Result<u64, BenchError> {
    loop {
        conn.fill(give_up_at, drain).await?;
        if let Some(line) = conn.lines.next_line() {
            return match wire::parse_reply(line) {
                Reply::Granted { key: k, token } if k == key => Ok(token),
                _ => Err(BenchError::protocol(
                    conn.id,
                    "the change was not granted",
                    line,
                )),
            };
        }
    }
}

/// Reads `count` watch answers on `conn`: each one's latency from
/// `started`, the latest of them, and the state they all report.
async fn await_answers(
    mut conn: Conn,
    key: Arc<[u8]>,
    count: usize,
    started: Instant,
    give_up_at: Instant,
) -> Result<Answered<Vec<u8>>, BenchError> {
    let drain = give_up_at.saturating_duration_since(started);
    let mut latencies = Histogram::new();
    let mut state: Option<Vec<u8>> = None;
    let mut answered = 0;
    let mut latest = Duration::ZERO;
    while answered < count {
        conn.fill(give_up_at, drain).await?;
        let now = Instant::now();
        while let Some(line) = conn.lines.next_line() {
            let Some((k, seen)) = wire::parse_watched(line) else {
                return Err(BenchError::protocol(conn.id, "not a watch's answer", line));
            };
            if *k != *key || state.as_deref().is_some_and(|s| s != seen) {
                let problem = "watch answers of one change differ";
                return Err(BenchError::protocol(conn.id, problem, line));
            }
            state.get_or_insert_with(|| seen.to_vec());
            latencies.record(now - started);
            latest = now - started;
            answered += 1;
        }
    }
    Ok((latencies, latest, state.unwrap_or_default()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watchers_spread_under_the_cap_per_connection() {
        assert_eq!(spread(10_000, 500), vec![500; 20]);
        assert_eq!(spread(1001, 500), vec![334, 334, 333]);
        assert_eq!(spread(3, 500), vec![3]);
        for (watchers, cap) in [(10_000, 1000), (7, 2), (99_999, 500)] {
            let counts = spread(watchers, cap);
            assert_eq!(counts.iter().sum::<usize>(), watchers);
            assert!(counts.iter().all(|&c| c >= 1 && c <= cap));
        }
    }
}
