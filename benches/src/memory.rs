//! The held-lock memory figure: fill a fresh server with N locks held at
//! once (distinct keys, long leases, acquires pipelined on a few
//! connections) and divide the growth of its resident set by N. Written
//! once over the protocol trait, for Baton and Redis.

use std::time::Duration;

use tokio::task::JoinSet;

use tokio::time::Instant;

use crate::baton_client::BatonClient;
use crate::conn::Conn;
use crate::error::BenchError;
use crate::protocol::{Answer, Cycle, LockClient};
use crate::redis_client::{RedisClient, Shared};
use crate::scenario::Measured;
use crate::server::Server;
use crate::target::{Dialect, Target};
use crate::window::Window;

/// Connections the locks are spread over, and acquires in flight on each.
const CONNECTIONS: usize = 16;
const IN_FLIGHT: usize = 256;
/// Leases far longer than the measurement, so nothing expires during it.
const CYCLE: Cycle = Cycle {
    wait_ms: 60_000,
    lease_ms: 3_600_000,
};
/// Generous: a million pipelined acquires on a slow, shared machine.
const FILL_LIMIT: Duration = Duration::from_secs(180);

/// The resident set of process `pid`, from `/proc/PID/status`.
pub fn rss_bytes(pid: u32) -> Result<u64, BenchError> {
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path).map_err(|source| BenchError::Setup {
        what: format!("read {path}"),
        source,
    })?;
    parse_rss(&status).ok_or_else(|| BenchError::Scenario(format!("no VmRSS line in {path}")))
}

fn parse_rss(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let mut fields = line.split_whitespace().skip(1);
    let kib: u64 = fields.next()?.parse().ok()?;
    (fields.next() == Some("kB")).then_some(kib * 1024)
}

/// Holds `locks` locks on `server` and returns the bytes of RSS per lock.
pub async fn run(
    server: &Server,
    target: Target,
    locks: usize,
    prefix: &str,
) -> Result<Measured, BenchError> {
    let pid = server.pid().ok_or_else(|| {
        BenchError::Scenario("memory needs a server the bench started (its PID)".into())
    })?;
    let before = rss_bytes(pid)?;
    let now = Instant::now();
    let window = Window {
        measure_from: now,
        stop_at: now + FILL_LIMIT,
        give_up_at: now + FILL_LIMIT,
        drain: FILL_LIMIT,
    };
    let connections = CONNECTIONS.min(locks);
    let mut tasks = JoinSet::new();
    for id in 0..connections {
        let count = locks / connections + usize::from(id < locks % connections);
        let keys: Vec<Vec<u8>> = (0..count)
            .map(|i| format!("{prefix}m{id}.{i}").into_bytes())
            .collect();
        let conn = Conn::connect(id, server.addr()).await?;
        match target.dialect() {
            Dialect::Redis => {
                let shared = Shared::without_release();
                tasks.spawn(fill(RedisClient::new(conn, keys, CYCLE, shared), window))
            }
            _ => tasks.spawn(fill(BatonClient::new(conn, keys, CYCLE), window)),
        };
    }
    while let Some(joined) = tasks.join_next().await {
        joined??;
    }
    let after = rss_bytes(pid)?;
    Ok(Measured {
        rate: after.saturating_sub(before) as f64 / locks as f64,
        p50: None,
        p99: None,
    })
}

/// Acquires every slot's key of `client`, `IN_FLIGHT` at a time.
async fn fill<C: LockClient>(mut client: C, window: Window) -> Result<(), BenchError> {
    let keys = client.slots();
    let mut sent = 0;
    while sent < keys.min(IN_FLIGHT) {
        client.acquire(sent);
        sent += 1;
    }
    let mut granted = 0;
    let mut answers = Vec::with_capacity(IN_FLIGHT);
    while granted < keys {
        client.answers(&window, &mut answers).await?;
        for (slot, answer) in answers.drain(..) {
            if !matches!(answer, Answer::Granted { .. }) {
                return Err(BenchError::protocol(
                    client.id(),
                    "a lock to hold was refused",
                    client.key(slot),
                ));
            }
            granted += 1;
            if sent < keys {
                client.acquire(sent);
                sent += 1;
            }
        }
    }
    // The locks stay held until the server is stopped: that is the point.
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_vmrss_in_bytes() {
        let status = "Name:\tbatond\nVmPeak:\t  9000 kB\nVmRSS:\t    2048 kB\nThreads:\t3\n";
        assert_eq!(parse_rss(status), Some(2048 * 1024));
        assert_eq!(parse_rss("Name:\tx\n"), None);
        assert_eq!(parse_rss("VmRSS:\t12 MB\n"), None);
    }

    #[test]
    fn reads_our_own_rss() {
        let rss = rss_bytes(std::process::id());
        assert!(matches!(rss, Ok(bytes) if bytes > 0), "{rss:?}");
    }
}
