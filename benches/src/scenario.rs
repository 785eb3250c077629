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
use crate::window::{Timing, Window};
use crate::{contended, Target};

/// The load shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenario {
    /// Each connection cycles on its own key, one request in flight.
    Uncontended,
    /// All connections cycle on one key.
    Contended,
    /// Each connection keeps `depth` cycles in flight on distinct keys.
    Pipelined,
}

impl Scenario {
    pub const ALL: [Scenario; 3] = [
        Scenario::Uncontended,
        Scenario::Contended,
        Scenario::Pipelined,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Scenario::Uncontended => "uncontended",
            Scenario::Contended => "contended",
            Scenario::Pipelined => "pipelined",
        }
    }

    /// What the rate counts.
    pub fn unit(self) -> &'static str {
        match self {
            Scenario::Pipelined => "req/s",
            _ => "cycles/s",
        }
    }

    /// What the percentiles time.
    pub fn latency(self) -> &'static str {
        match self {
            Scenario::Contended => "handoff",
            _ => "cycle",
        }
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
fn run_prefix() -> String {
    static RUNS: AtomicU64 = AtomicU64::new(0);
    let run = RUNS.fetch_add(1, Ordering::Relaxed);
    format!("p{}r{run}", std::process::id())
}

/// Runs `case` once against the server at `addr`.
pub async fn run_once(
    addr: SocketAddr,
    target: Target,
    case: Case,
    timing: Timing,
) -> Result<Measured, BenchError> {
    let prefix = run_prefix();
    let mut conns = Vec::with_capacity(case.clients);
    for id in 0..case.clients {
        conns.push(Conn::connect(id, addr).await?);
    }
    // Connection set-up is not part of the measurement.
    let window = Window::starting_now(timing);
    let mut tasks = JoinSet::new();
    match case.scenario {
        Scenario::Uncontended | Scenario::Pipelined => {
            for conn in conns {
                let keys = (0..case.depth)
                    .map(|slot| match case.scenario {
                        Scenario::Pipelined => format!("{prefix}k{}.{slot}", conn.id),
                        _ => format!("{prefix}k{}", conn.id),
                    })
                    .map(String::into_bytes)
                    .collect();
                tasks.spawn(own_keys::drive(conn, keys, OWN_KEY_CYCLE, window));
            }
        }
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
    }
    let mut total = Stats::default();
    // The first failure ends the run; dropping the set stops the others.
    while let Some(joined) = tasks.join_next().await {
        total.merge(&joined??);
    }
    let count = match case.scenario {
        Scenario::Pipelined => total.responses,
        _ => total.cycles,
    };
    Ok(Measured {
        rate: count as f64 / window.measured_seconds(),
        p50: total.latency.quantile(0.50),
        p99: total.latency.quantile(0.99),
    })
}
