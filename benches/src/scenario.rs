//! One run of one scenario: open the connections, start the load on all of
//! them at once, and turn what they measured into a rate and percentiles.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;

use crate::conn::Conn;
use crate::error::BenchError;
use crate::own_keys::{self, Cycle};
use crate::referee::Referee;
use crate::stats::Stats;
use crate::target::Dialect;
use crate::window::{Timing, Window};
use crate::{contended, redis_load, storm, Target};

/// The load shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenario {
    /// Each connection cycles on its own key, one request in flight.
    Uncontended,
    /// All connections cycle on one key.
    Contended,
    /// Each connection keeps `depth` cycles in flight on distinct keys.
    Pipelined,
    /// Bytes of server RSS per held lock, C locks held at once.
    Memory,
    /// C waiters queued on one key, then drained.
    Storm,
    /// Time from kill -9 of the serving node to a grant on another.
    Failover,
}

impl Scenario {
    pub const ALL: [Scenario; 6] = [
        Scenario::Uncontended,
        Scenario::Contended,
        Scenario::Pipelined,
        Scenario::Memory,
        Scenario::Storm,
        Scenario::Failover,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Scenario::Uncontended => "uncontended",
            Scenario::Contended => "contended",
            Scenario::Pipelined => "pipelined",
            Scenario::Memory => "memory",
            Scenario::Storm => "storm",
            Scenario::Failover => "failover",
        }
    }

    /// What the figure counts.
    pub fn unit(self) -> &'static str {
        match self {
            Scenario::Pipelined => "req/s",
            Scenario::Memory => "B/lock",
            Scenario::Storm => "grants/s",
            Scenario::Failover => "ms",
            _ => "cycles/s",
        }
    }

    /// What the percentiles time.
    pub fn latency(self) -> &'static str {
        match self {
            Scenario::Contended | Scenario::Storm => "handoff",
            Scenario::Memory | Scenario::Failover => "-",
            _ => "cycle",
        }
    }

    /// Whether a larger figure is better (not for bytes or milliseconds).
    pub fn higher_is_better(self) -> bool {
        !matches!(self, Scenario::Memory | Scenario::Failover)
    }

    /// Whether each run needs a server of its own (memory measures a fresh
    /// process; failover kills one).
    pub fn fresh_server(self) -> bool {
        matches!(self, Scenario::Memory | Scenario::Failover)
    }
}

/// A scenario at a given concurrency.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Case {
    pub scenario: Scenario,
    pub clients: usize,
    /// Cycles in flight per connection: 1 except when pipelined.
    pub depth: usize,
}

/// The figures of one run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Measured {
    /// Per second, in the scenario's unit.
    pub rate: f64,
    pub p50: Option<Duration>,
    pub p99: Option<Duration>,
}

/// The acquire of the uncontended and pipelined cycles: `A k<i> 5 10`.
const OWN_KEY_CYCLE: Cycle = Cycle {
    wait_ms: 5_000,
    lease_ms: 10_000,
};

/// Keys carry a per-run prefix so a run never meets locks left behind by
/// an earlier one (say an interrupted bench against a long-lived server).
pub fn run_prefix() -> String {
    static RUNS: AtomicU64 = AtomicU64::new(0);
    let run = RUNS.fetch_add(1, Ordering::Relaxed);
    format!("p{}r{run}", std::process::id())
}

/// Runs `case` once against the server at `addr` (any scenario but
/// memory and failover, which need the server itself).
pub async fn run_once(
    addr: SocketAddr,
    target: Target,
    case: Case,
    timing: Timing,
) -> Result<Measured, BenchError> {
    let prefix = run_prefix();
    if case.scenario == Scenario::Storm {
        return storm::run(addr, case.clients, &prefix, timing.drain).await;
    }
    if !matches!(
        case.scenario,
        Scenario::Uncontended | Scenario::Contended | Scenario::Pipelined
    ) {
        return Err(BenchError::Scenario(format!(
            "{} needs a server of its own",
            case.scenario.name()
        )));
    }
    let total = match target.dialect() {
        Dialect::Baton => baton_load(addr, target, case, timing, &prefix).await?,
        Dialect::Redis => redis_run(addr, target, case, timing, &prefix).await?,
        #[cfg(feature = "etcd")]
        Dialect::Etcd => {
            let mut sessions = Vec::with_capacity(case.clients);
            for _ in 0..case.clients {
                sessions.push(crate::etcd_session::EtcdSession::connect(addr).await?);
            }
            session_run(sessions, target, case, timing, &prefix).await?
        }
        #[cfg(feature = "zookeeper")]
        Dialect::Zookeeper => {
            let mut sessions = Vec::with_capacity(case.clients);
            for _ in 0..case.clients {
                sessions.push(crate::zk_session::ZkSession::connect(addr).await?);
            }
            session_run(sessions, target, case, timing, &prefix).await?
        }
        #[allow(unreachable_patterns)] // reachable without the peer features
        _ => {
            return Err(BenchError::Scenario(format!(
                "this build cannot drive {} (build with its cargo feature)",
                target.name()
            )))
        }
    };
    let count = match case.scenario {
        Scenario::Pipelined => total.responses,
        _ => total.cycles,
    };
    Ok(Measured {
        rate: count as f64 / timing.duration.as_secs_f64(),
        p50: total.latency.quantile(0.50),
        p99: total.latency.quantile(0.99),
    })
}

/// The keys of connection `id`: one per cycle in flight.
fn own_keys_of(prefix: &str, case: Case, id: usize) -> Vec<String> {
    (0..case.depth)
        .map(|slot| match case.scenario {
            Scenario::Pipelined => format!("{prefix}k{id}.{slot}"),
            _ => format!("{prefix}k{id}"),
        })
        .collect()
}

async fn connect_all(addr: SocketAddr, count: usize) -> Result<Vec<Conn>, BenchError> {
    let mut conns = Vec::with_capacity(count);
    for id in 0..count {
        conns.push(Conn::connect(id, addr).await?);
    }
    Ok(conns)
}

/// Merges what every load task measured; the first failure ends the run
/// (dropping the set stops the others).
async fn join_all(mut tasks: JoinSet<Result<Stats, BenchError>>) -> Result<Stats, BenchError> {
    let mut total = Stats::default();
    while let Some(joined) = tasks.join_next().await {
        total.merge(&joined??);
    }
    Ok(total)
}

async fn baton_load(
    addr: SocketAddr,
    target: Target,
    case: Case,
    timing: Timing,
    prefix: &str,
) -> Result<Stats, BenchError> {
    let conns = connect_all(addr, case.clients).await?;
    // Connection set-up is not part of the measurement.
    let window = Window::starting_now(timing);
    let mut tasks = JoinSet::new();
    match case.scenario {
        Scenario::Contended => {
            let key: Arc<[u8]> = format!("{prefix}hot").into_bytes().into();
            let referee = Arc::new(Referee::new(target.checks_locks()));
            for conn in conns {
                tasks.spawn(contended::drive(
                    conn,
                    Arc::clone(&key),
                    Arc::clone(&referee),
                    window,
                ));
            }
        }
        _ => {
            for conn in conns {
                let keys = own_keys_of(prefix, case, conn.id)
                    .into_iter()
                    .map(String::into_bytes)
                    .collect();
                tasks.spawn(own_keys::drive(conn, keys, OWN_KEY_CYCLE, window));
            }
        }
    }
    join_all(tasks).await
}

async fn redis_run(
    addr: SocketAddr,
    target: Target,
    case: Case,
    timing: Timing,
    prefix: &str,
) -> Result<Stats, BenchError> {
    let setup_window = Window::starting_now(timing);
    let shared = redis_load::prepare(addr, setup_window).await?;
    let conns = connect_all(addr, case.clients).await?;
    let window = Window::starting_now(timing);
    let mut tasks = JoinSet::new();
    match case.scenario {
        Scenario::Contended => {
            let key: Arc<[u8]> = format!("{prefix}hot").into_bytes().into();
            let referee = Arc::new(Referee::new(target.checks_locks()).without_token_order());
            for conn in conns {
                tasks.spawn(redis_load::contended(
                    conn,
                    Arc::clone(&key),
                    contended::LEASE_MS,
                    shared.clone(),
                    Arc::clone(&referee),
                    window,
                ));
            }
        }
        _ => {
            for conn in conns {
                let keys = own_keys_of(prefix, case, conn.id)
                    .into_iter()
                    .map(String::into_bytes)
                    .collect();
                tasks.spawn(redis_load::own_keys(
                    conn,
                    keys,
                    OWN_KEY_CYCLE.lease_ms,
                    shared.clone(),
                    window,
                ));
            }
        }
    }
    join_all(tasks).await
}

#[cfg(any(feature = "etcd", feature = "zookeeper"))]
async fn session_run<S: crate::session::LockSession>(
    sessions: Vec<S>,
    target: Target,
    case: Case,
    timing: Timing,
    prefix: &str,
) -> Result<Stats, BenchError> {
    use crate::session;
    let window = Window::starting_now(timing);
    let mut tasks = JoinSet::new();
    let referee = Arc::new(Referee::new(target.checks_locks()));
    let hot = format!("{prefix}hot");
    for (id, s) in sessions.into_iter().enumerate() {
        match case.scenario {
            Scenario::Contended => {
                tasks.spawn(session::contended(
                    s,
                    id,
                    hot.clone(),
                    Arc::clone(&referee),
                    window,
                ));
            }
            _ => {
                tasks.spawn(session::own_keys(
                    s,
                    id,
                    own_keys_of(prefix, case, id),
                    window,
                ));
            }
        }
    }
    join_all(tasks).await
}
