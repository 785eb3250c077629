//! The load loops for peers driven through a client library (etcd,
//! ZooKeeper): a `LockSession` per driver connection, cloned once per
//! cycle kept in flight so the library multiplexes them on that connection.

use std::future::Future;
use std::sync::Arc;

use tokio::task::JoinSet;
use tokio::time::{timeout_at, Instant};

use crate::error::{BenchError, Violation};
use crate::referee::Referee;
use crate::stats::Stats;
use crate::window::Window;

/// One client connection (session) to a lock service.
pub trait LockSession: Clone + Send + Sync + 'static {
    /// What releasing needs: etcd's lock key, ZooKeeper's znode path.
    type Held: Send + 'static;

    /// Waits until `key` is granted; returns its fencing token.
    fn acquire(
        &mut self,
        key: &str,
    ) -> impl Future<Output = Result<(u64, Self::Held), BenchError>> + Send;

    fn release(&mut self, held: Self::Held) -> impl Future<Output = Result<(), BenchError>> + Send;

    /// Ends the session (revokes its lease, closes it).
    fn close(self) -> impl Future<Output = ()> + Send;
}

/// Bounds one library call by the run's give-up instant.
async fn bounded<T>(
    window: &Window,
    call: impl Future<Output = Result<T, BenchError>>,
) -> Result<T, BenchError> {
    timeout_at(window.give_up_at, call)
        .await
        .map_err(|_| BenchError::Drain(window.drain))?
}

/// Cycles on keys of this session's own, one cycle in flight per key.
pub async fn own_keys<S: LockSession>(
    session: S,
    id: usize,
    keys: Vec<String>,
    window: Window,
) -> Result<Stats, BenchError> {
    let mut tasks = JoinSet::new();
    for key in keys {
        let mut session = session.clone();
        tasks.spawn(async move {
            let mut stats = Stats::default();
            let mut last_token = 0;
            while window.running(Instant::now()) {
                let cycle_start = Instant::now();
                let (token, held) = bounded(&window, session.acquire(&key)).await?;
                if token <= last_token {
                    return Err(Violation::TokenNotRising {
                        client: id,
                        token,
                        previous: last_token,
                    }
                    .into());
                }
                last_token = token;
                if window.measures(Instant::now()) {
                    stats.responses += 1;
                }
                bounded(&window, session.release(held)).await?;
                let now = Instant::now();
                if window.measures(now) {
                    stats.responses += 1;
                    stats.cycles += 1;
                    stats.latency.record(now - cycle_start);
                }
            }
            Ok::<_, BenchError>(stats)
        });
    }
    let mut total = Stats::default();
    let mut outcome = Ok(());
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok(Ok(stats)) => total.merge(&stats),
            Ok(Err(error)) => outcome = outcome.and(Err(error)),
            Err(error) => outcome = outcome.and(Err(error.into())),
        }
    }
    session.close().await;
    outcome.map(|()| total)
}

/// One session of many cycling on the same key; the library (and the
/// server) decide who waits and how.
pub async fn contended<S: LockSession>(
    mut session: S,
    id: usize,
    key: String,
    referee: Arc<Referee>,
    window: Window,
) -> Result<Stats, BenchError> {
    let mut stats = Stats::default();
    let outcome = async {
        while window.running(Instant::now()) {
            let (token, held) = bounded(&window, session.acquire(&key)).await?;
            let now = Instant::now();
            let handoff = referee.granted(id, token, now)?;
            if window.measures(now) {
                stats.cycles += 1;
                stats.responses += 1;
                if let Some(handoff) = handoff {
                    stats.latency.record(handoff);
                }
            }
            referee.releasing(id, token, Instant::now());
            bounded(&window, session.release(held)).await?;
        }
        Ok::<_, BenchError>(())
    }
    .await;
    session.close().await;
    outcome.map(|()| stats)
}
