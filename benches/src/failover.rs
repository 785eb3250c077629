//! The failover figure: on a fresh cluster, take a grant from the serving
//! node, kill -9 it, and time until another node grants an acquire, trying
//! every survivor in turn and following nothing but time. The new grant's
//! token must be above the one granted before the kill.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::time::{sleep, Instant};

use crate::error::{BenchError, Violation};
use crate::launch::Launch;
use crate::scenario::Measured;
use crate::server::SpawnSettings;
use crate::status;
use crate::wire::{self, Reply};

/// Far above any failover this bench should ever see.
const LIMIT: Duration = Duration::from_secs(30);
/// One attempt on one node: a short wait, so a node that queues us while
/// it is still unsure answers `T` soon and we try elsewhere.
const ATTEMPT: Duration = Duration::from_millis(500);

/// Starts a cluster from `launch`, measures one failover, stops it.
pub async fn run(
    launch: &Launch,
    settings: &SpawnSettings,
    prefix: &str,
) -> Result<Measured, BenchError> {
    let mut server = launch.start(settings).await?;
    let outcome = async {
        let before = attempt(server.addr(), &format!("{prefix}before"))
            .await
            .ok_or_else(|| BenchError::Scenario("the serving node granted nothing".into()))?;
        let survivors = server.kill_serving()?;
        let killed = Instant::now();
        let key = format!("{prefix}after");
        while killed.elapsed() < LIMIT {
            for addr in &survivors {
                if let Some(token) = attempt(*addr, &key).await {
                    let took = killed.elapsed();
                    if token <= before {
                        return Err(Violation::TokenNotRising {
                            client: 0,
                            token,
                            previous: before,
                        }
                        .into());
                    }
                    return Ok(Measured {
                        rate: took.as_secs_f64() * 1e3,
                        p50: None,
                        p99: None,
                    });
                }
            }
            sleep(Duration::from_millis(1)).await;
        }
        Err(BenchError::Scenario(format!(
            "no survivor granted anything within {LIMIT:?} of the kill"
        )))
    }
    .await;
    server.stop().await;
    outcome
}

/// One acquire of `key` on `addr`: its token if granted, `None` on a
/// redirect, a timeout, an error line or a connection that failed.
async fn attempt(addr: SocketAddr, key: &str) -> Option<u64> {
    let mut request = Vec::new();
    wire::acquire(&mut request, key.as_bytes(), 250, 10_000);
    let line = status::ask(addr, &request, ATTEMPT).await?;
    match wire::parse_reply(line.trim_end_matches('\n').as_bytes()) {
        Reply::Granted { token, .. } => Some(token),
        _ => None,
    }
}
