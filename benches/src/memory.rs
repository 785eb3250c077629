//! The held-lock memory figure: fill a fresh server with N locks held at
//! once (distinct keys, long leases, acquires pipelined on a few
//! connections) and divide the growth of its resident set by N.

use std::time::Duration;

use tokio::task::JoinSet;

use crate::conn::Conn;
use crate::error::BenchError;
use crate::resp::{self, RespReply};
use crate::scenario::Measured;
use crate::server::Server;
use crate::target::{Dialect, Target};
use crate::window::{Timing, Window};
use crate::wire::{self, Reply};

/// Connections the locks are spread over, and acquires in flight on each.
const CONNECTIONS: usize = 16;
const IN_FLIGHT: usize = 256;
/// Leases far longer than the measurement, so nothing expires during it.
const LEASE_MS: u64 = 3_600_000;
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
    let window = Window::starting_now(Timing {
        warmup: Duration::ZERO,
        duration: FILL_LIMIT,
        drain: Duration::ZERO,
    });
    let connections = CONNECTIONS.min(locks);
    let mut tasks = JoinSet::new();
    for id in 0..connections {
        let count = locks / connections + usize::from(id < locks % connections);
        let keys: Vec<Vec<u8>> = (0..count)
            .map(|i| format!("{prefix}m{id}.{i}").into_bytes())
            .collect();
        let conn = Conn::connect(id, server.addr()).await?;
        tasks.spawn(fill(conn, target.dialect(), keys, window));
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

/// Acquires every key of `keys` on `conn`, `IN_FLIGHT` at a time.
async fn fill(
    mut conn: Conn,
    dialect: Dialect,
    keys: Vec<Vec<u8>>,
    window: Window,
) -> Result<(), BenchError> {
    let send = |conn: &mut Conn, key: &[u8], value: usize| match dialect {
        Dialect::Redis => resp::set_nx(&mut conn.out, key, value as u64 + 1, LEASE_MS),
        _ => wire::acquire(&mut conn.out, key, 60_000, LEASE_MS),
    };
    let mut sent = 0;
    while sent < keys.len().min(IN_FLIGHT) {
        send(&mut conn, &keys[sent], sent);
        sent += 1;
    }
    let mut granted = 0;
    let give_up = window.stop_at;
    conn.flush(give_up, FILL_LIMIT).await?;
    while granted < keys.len() {
        conn.fill(give_up, FILL_LIMIT).await?;
        while let Some(line) = conn.lines.next_line() {
            let ok = match dialect {
                Dialect::Redis => resp::parse(line) == RespReply::Ok,
                _ => matches!(wire::parse_reply(line), Reply::Granted { .. }),
            };
            if !ok {
                return Err(BenchError::protocol(
                    conn.id,
                    "a lock to hold was refused",
                    line,
                ));
            }
            granted += 1;
            if sent < keys.len() {
                send(&mut conn, &keys[sent], sent);
                sent += 1;
            }
        }
        conn.flush(give_up, FILL_LIMIT).await?;
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
