//! One run of one scenario: open the connections, start the load on all of
//! them at once, and turn what they measured into a rate and percentiles.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;

use crate::baton_client::BatonClient;
use crate::conn::Conn;
use crate::cpu::{CpuTime, CpuUse, Probe};
use crate::error::BenchError;
use crate::protocol::{Cycle, LockClient};
use crate::redis_client::{self, RedisClient};
use crate::referee::Referee;
#[cfg(any(feature = "etcd", feature = "zookeeper"))]
use crate::session::SessionClient;
use crate::stats::Stats;
use crate::target::Dialect;
use crate::window::{Timing, Window};
use crate::{contended, fanout, gate, own_keys, storm, Target};

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
    /// C leases lapsing at once: seconds until all are gone, a probe's
    /// latencies meanwhile.
    ExpiryFlood,
    /// C locks released at once, pipelined: the same figures.
    ReleaseFlood,
    /// All connections cycle on one key as permits of a semaphore of
    /// `depth` (protocol 1.2).
    Semaphore,
    /// All connections cycle on one key with shared grants, `depth`
    /// exclusive ones in every hundred (protocol 1.2).
    Shared,
    /// C watches of one key, one change: time until the last is answered.
    WatchFanout,
}

impl Scenario {
    pub const ALL: [Scenario; 11] = [
        Scenario::Uncontended,
        Scenario::Contended,
        Scenario::Pipelined,
        Scenario::Memory,
        Scenario::Storm,
        Scenario::Failover,
        Scenario::ExpiryFlood,
        Scenario::ReleaseFlood,
        Scenario::Semaphore,
        Scenario::Shared,
        Scenario::WatchFanout,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Scenario::Uncontended => "uncontended",
            Scenario::Contended => "contended",
            Scenario::Pipelined => "pipelined",
            Scenario::Memory => "memory",
            Scenario::Storm => "storm",
            Scenario::Failover => "failover",
            Scenario::ExpiryFlood => "expiry-flood",
            Scenario::ReleaseFlood => "release-flood",
            Scenario::Semaphore => "semaphore",
            Scenario::Shared => "shared",
            Scenario::WatchFanout => "watch-fanout",
        }
    }

    /// What the figure counts.
    pub fn unit(self) -> &'static str {
        match self {
            Scenario::Pipelined => "req/s",
            Scenario::Memory => "B/lock",
            Scenario::Storm => "grants/s",
            Scenario::Failover | Scenario::WatchFanout => "ms",
            Scenario::ExpiryFlood | Scenario::ReleaseFlood => "s",
            _ => "cycles/s",
        }
    }

    /// What the percentiles time.
    pub fn latency(self) -> &'static str {
        match self {
            Scenario::Contended | Scenario::Storm => "handoff",
            Scenario::Memory | Scenario::Failover => "-",
            Scenario::ExpiryFlood | Scenario::ReleaseFlood => "probe",
            Scenario::Semaphore | Scenario::Shared => "grant",
            Scenario::WatchFanout => "answer",
            _ => "cycle",
        }
    }

    /// Whether a larger figure is better (not for bytes or times).
    pub fn higher_is_better(self) -> bool {
        !matches!(
            self,
            Scenario::Memory
                | Scenario::Failover
                | Scenario::ExpiryFlood
                | Scenario::ReleaseFlood
                | Scenario::WatchFanout
        )
    }

    /// Whether each run needs a server of its own (memory measures a fresh
    /// process; failover kills one; a flood fills one).
    pub fn fresh_server(self) -> bool {
        matches!(
            self,
            Scenario::Memory | Scenario::Failover | Scenario::ExpiryFlood | Scenario::ReleaseFlood
        )
    }
}

/// A scenario at a given concurrency.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Case {
    pub scenario: Scenario,
    pub clients: usize,
    /// The scenario's second size: cycles in flight per connection when
    /// pipelined, the permits of the semaphore, the exclusive acquires per
    /// hundred when shared; 1 elsewhere.
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
pub const OWN_KEY_CYCLE: Cycle = Cycle {
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
    Ok(run_probed(addr, target, case, timing, None).await?.0)
}

/// [`run_once`], and with a probe the CPU its processes used per cycle
/// (per request when pipelined) over the measured stretch (not for storm,
/// which has no fixed stretch).
pub async fn run_probed(
    addr: SocketAddr,
    target: Target,
    case: Case,
    timing: Timing,
    probe: Option<&Probe>,
) -> Result<(Measured, Option<CpuUse>), BenchError> {
    let prefix = run_prefix();
    match case.scenario {
        Scenario::Storm => {
            let measured = storm::run(addr, case.clients, &prefix, timing.drain).await?;
            return Ok((measured, None));
        }
        Scenario::Semaphore | Scenario::Shared => {
            return gate::run(addr, case, timing, &prefix, probe).await;
        }
        Scenario::WatchFanout => {
            let measured = fanout::run_target(addr, target, case.clients, &prefix, timing.drain);
            return Ok((measured.await?, None));
        }
        _ => {}
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
    let load = Load {
        target,
        case,
        timing,
        prefix,
        probe: probe.cloned(),
    };
    let (total, cpu) = match target.dialect() {
        Dialect::Baton => {
            let conns = connect_all(addr, case.clients).await?;
            let client = |_, conn, keys| BatonClient::new(conn, keys, load.cycle());
            load.run(conns, client).await?
        }
        Dialect::Redis => {
            let shared = redis_client::prepare(addr, Window::starting_now(timing)).await?;
            let conns = connect_all(addr, case.clients).await?;
            let client = |_, conn, keys| RedisClient::new(conn, keys, load.cycle(), shared.clone());
            load.run(conns, client).await?
        }
        #[cfg(feature = "etcd")]
        Dialect::Etcd => {
            let sessions = connect_sessions(addr, case.clients, |addr| {
                crate::etcd_session::EtcdSession::connect(addr)
            });
            load.run(sessions.await?, SessionClient::new).await?
        }
        #[cfg(feature = "zookeeper")]
        Dialect::Zookeeper => {
            let sessions = connect_sessions(addr, case.clients, |addr| {
                crate::zk_session::ZkSession::connect(addr)
            });
            load.run(sessions.await?, SessionClient::new).await?
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
    let measured = Measured {
        rate: count as f64 / timing.duration.as_secs_f64(),
        p50: total.latency.quantile(0.50),
        p99: total.latency.quantile(0.99),
    };
    Ok((measured, cpu.and_then(|cpu| cpu.per(count as f64))))
}

/// One load run of a case: the same scenario code for every target.
struct Load {
    target: Target,
    case: Case,
    timing: Timing,
    prefix: String,
    /// Reads the server's CPU over the measured stretch, if set.
    probe: Option<Probe>,
}

impl Load {
    fn cycle(&self) -> Cycle {
        match self.case.scenario {
            Scenario::Contended => contended::CYCLE,
            _ => OWN_KEY_CYCLE,
        }
    }

    /// The keys of connection `id`: the hot key when contended, one of its
    /// own when uncontended, one per cycle in flight when pipelined.
    fn keys_of(&self, id: usize) -> Vec<Vec<u8>> {
        let prefix = &self.prefix;
        match self.case.scenario {
            Scenario::Contended => vec![format!("{prefix}hot").into_bytes()],
            Scenario::Pipelined => (0..self.case.depth)
                .map(|slot| format!("{prefix}k{id}.{slot}").into_bytes())
                .collect(),
            _ => vec![format!("{prefix}k{id}").into_bytes()],
        }
    }

    /// Makes a client of each connection (numbered in order) and runs the
    /// scenario on all of them at once; connection set-up is not part of
    /// the measurement.
    async fn run<T, C: LockClient>(
        &self,
        conns: Vec<T>,
        client: impl Fn(usize, T, Vec<Vec<u8>>) -> C,
    ) -> Result<(Stats, Option<CpuTime>), BenchError> {
        let clients: Vec<C> = conns
            .into_iter()
            .enumerate()
            .map(|(id, conn)| client(id, conn, self.keys_of(id)))
            .collect();
        let window = Window::starting_now(self.timing);
        let mut referee = Referee::new(self.target.checks_locks());
        if !self.target.fences() {
            referee = referee.without_token_order();
        }
        let referee = Arc::new(referee);
        let mut tasks = JoinSet::new();
        for client in clients {
            match self.case.scenario {
                Scenario::Contended => {
                    tasks.spawn(contended::drive(client, Arc::clone(&referee), window))
                }
                _ => tasks.spawn(own_keys::drive(client, self.target.fences(), window)),
            };
        }
        let cpu = async {
            match &self.probe {
                Some(probe) => probe.measure(window).await,
                None => None,
            }
        };
        // A failed load ends the run at once, probe or not.
        tokio::try_join!(join_all(tasks), async { Ok(cpu.await) })
    }
}

pub(crate) async fn connect_all(addr: SocketAddr, count: usize) -> Result<Vec<Conn>, BenchError> {
    let mut conns = Vec::with_capacity(count);
    for id in 0..count {
        conns.push(Conn::connect(id, addr).await?);
    }
    Ok(conns)
}

/// `count` library sessions.
#[cfg(any(feature = "etcd", feature = "zookeeper"))]
async fn connect_sessions<S, F, Fut>(
    addr: SocketAddr,
    count: usize,
    connect: F,
) -> Result<Vec<S>, BenchError>
where
    F: Fn(SocketAddr) -> Fut,
    Fut: std::future::Future<Output = Result<S, BenchError>>,
{
    let mut sessions = Vec::with_capacity(count);
    for _ in 0..count {
        sessions.push(connect(addr).await?);
    }
    Ok(sessions)
}

/// Merges what every load task measured; the first failure ends the run
/// (dropping the set stops the others).
pub(crate) async fn join_all(
    mut tasks: JoinSet<Result<Stats, BenchError>>,
) -> Result<Stats, BenchError> {
    let mut total = Stats::default();
    while let Some(joined) = tasks.join_next().await {
        total.merge(&joined??);
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocol_1_2_scenarios_share_the_server_and_say_what_they_time() {
        for scenario in [Scenario::Semaphore, Scenario::Shared, Scenario::WatchFanout] {
            assert!(!scenario.fresh_server(), "{scenario:?}");
        }
        assert!(Scenario::Semaphore.higher_is_better());
        assert_eq!(
            (Scenario::Shared.unit(), Scenario::Shared.latency()),
            ("cycles/s", "grant")
        );
        assert!(!Scenario::WatchFanout.higher_is_better());
        assert_eq!(
            (
                Scenario::WatchFanout.unit(),
                Scenario::WatchFanout.latency()
            ),
            ("ms", "answer")
        );
    }
}
