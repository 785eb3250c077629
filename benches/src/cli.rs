//! Command-line flags and the plan they describe: which targets, which
//! cases, how long, how many runs.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use crate::scenario::{Case, Scenario};
use crate::window::Timing;
use crate::Target;

/// Baton's load driver: acquire/release cycles per second and latency
/// percentiles against Baton, its peers (Redis, etcd, ZooKeeper) and an
/// echo ceiling, on 127.0.0.1 only.
#[derive(Debug, Parser)]
#[command(name = "baton-bench", version)]
pub struct Args {
    /// Targets, comma separated, measured in this order.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "baton")]
    pub target: Vec<Target>,
    /// A Baton server already running (default 127.0.0.1:7411).
    #[arg(long, conflicts_with = "spawn")]
    pub addr: Option<SocketAddr>,
    /// Start this batond on a free port (and clusters of it) and kill it at the end.
    #[arg(long, value_name = "PATH_TO_BATOND")]
    pub spawn: Option<PathBuf>,
    /// Scenarios, comma separated.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        required_unless_present_any = ["smoke", "serve_echo"]
    )]
    pub scenario: Vec<Scenario>,
    /// Connection counts, comma separated: e.g. 1,16,64.
    #[arg(long, value_delimiter = ',', default_value = "1", value_parser = parse_count)]
    pub clients: Vec<usize>,
    /// Connection counts of the contended scenario (default: --clients).
    #[arg(long, value_delimiter = ',', value_parser = parse_count)]
    pub contended_clients: Vec<usize>,
    /// Connection counts of the pipelined scenario (default: --clients).
    #[arg(long, value_delimiter = ',', value_parser = parse_count)]
    pub pipelined_clients: Vec<usize>,
    /// Cycles in flight per connection in the pipelined scenario, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "16", value_parser = parse_count)]
    pub depth: Vec<usize>,
    /// Locks held at once in the memory and flood scenarios.
    #[arg(long, default_value = "1000000", value_parser = parse_big_count)]
    pub locks: usize,
    /// Waiters queued on one key in the storm scenario.
    #[arg(long, default_value = "10000", value_parser = parse_big_count)]
    pub waiters: usize,
    /// Permits of the semaphore scenario's key, comma separated (its
    /// clients are --contended-clients).
    #[arg(long, value_delimiter = ',', default_value = "4", value_parser = parse_permits)]
    pub permits: Vec<usize>,
    /// Exclusive acquires in every hundred of the shared scenario, comma
    /// separated (0: all shared).
    #[arg(long, value_delimiter = ',', default_value = "0", value_parser = parse_percent)]
    pub exclusive_percent: Vec<usize>,
    /// Watches of one key in the watch-fanout scenario.
    #[arg(long, default_value = "10000", value_parser = parse_count)]
    pub watchers: usize,
    /// Measured seconds per run.
    #[arg(long, value_name = "SECS", default_value = "5", value_parser = parse_positive_seconds)]
    pub duration: Duration,
    /// Unmeasured seconds of load before each run's measurement.
    #[arg(long, value_name = "SECS", default_value = "1", value_parser = parse_seconds)]
    pub warmup: Duration,
    /// Runs per case, made as passes over every target (each pass
    /// measures each target once), so that targets are compared on runs
    /// made close together; the table shows medians.
    #[arg(long, default_value = "3", value_parser = parse_count)]
    pub runs: usize,
    /// A few seconds of every scenario at small sizes (for CI); overrides
    /// --scenario, --clients, --depth, --locks, --waiters, --duration,
    /// --warmup and --runs.
    #[arg(long)]
    pub smoke: bool,
    /// Pin spawned servers (every target's) to this CPU.
    #[arg(long, value_name = "CPU")]
    pub pin_server: Option<usize>,
    /// Pin this driver to this CPU (re-runs itself under taskset).
    #[arg(long, value_name = "CPU")]
    pub pin_driver: Option<usize>,
    /// The redis-server program.
    #[arg(long, value_name = "PATH", default_value = "redis-server")]
    pub redis_server: PathBuf,
    /// The etcd program.
    #[arg(long, value_name = "PATH", default_value = "etcd")]
    pub etcd: PathBuf,
    /// The java program that runs ZooKeeper.
    #[arg(long, value_name = "PATH", default_value = "java")]
    pub java: PathBuf,
    /// ZooKeeper's class path (Debian's zookeeper package by default).
    #[arg(
        long,
        value_name = "CLASSPATH",
        default_value = "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar"
    )]
    pub zookeeper_classpath: String,
    /// Where spawned servers keep their data (a fresh directory each,
    /// removed at the end; default: the system temp dir).
    #[arg(long, value_name = "DIR")]
    pub work_dir: Option<PathBuf>,
    /// Append the PID of every process the bench starts to this file.
    #[arg(long, value_name = "FILE")]
    pub pid_file: Option<PathBuf>,
    /// Also write the results as Markdown (tables, ratios, goals) here.
    #[arg(long, value_name = "FILE")]
    pub markdown: Option<PathBuf>,
    /// Measure the floor first (fsync in the work dir, loopback round
    /// trip, the durable cycle they allow): `auto` when baton-raft is a
    /// target, `on` always, `off` never.
    #[arg(long, value_enum, default_value = "auto")]
    pub floor: FloorWhen,
    /// Also write a bar chart of the results as SVG here.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
    /// Internal: be the echo server on this address.
    #[arg(long, value_name = "ADDR", hide = true)]
    pub serve_echo: Option<SocketAddr>,
}

/// When to measure the floor (`crate::floor`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum FloorWhen {
    /// When a Raft cluster is among the targets: the floor is its yardstick.
    Auto,
    On,
    Off,
}

impl FloorWhen {
    fn wanted(self, targets: &[Target]) -> bool {
        match self {
            FloorWhen::Auto => targets.contains(&Target::BatonRaft),
            FloorWhen::On => true,
            FloorWhen::Off => false,
        }
    }
}

/// What to run, after defaults and `--smoke`.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub targets: Vec<Target>,
    pub cases: Vec<Case>,
    pub timing: Timing,
    pub runs: usize,
    /// Fail unless every case completed cycles.
    pub smoke: bool,
    /// Measure the floor before the targets.
    pub floor: bool,
}

/// Connection counts and sizes per scenario.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sizes {
    pub clients: Vec<usize>,
    pub contended: Vec<usize>,
    pub pipelined: Vec<usize>,
    pub depths: Vec<usize>,
    pub locks: usize,
    pub waiters: usize,
    pub permits: Vec<usize>,
    pub exclusive_percents: Vec<usize>,
    pub watchers: usize,
}

/// Long enough for a contended acquire's 10 s wait to run out first.
const DRAIN: Duration = Duration::from_secs(15);

impl Args {
    pub fn plan(&self) -> Plan {
        let mut targets = Vec::new();
        for &target in &self.target {
            if !targets.contains(&target) {
                targets.push(target);
            }
        }
        let floor = self.floor.wanted(&targets);
        if self.smoke {
            let sizes = Sizes {
                clients: vec![1, 4],
                contended: vec![1, 4],
                pipelined: vec![1, 4],
                depths: vec![4],
                locks: 2000,
                waiters: 200,
                permits: vec![2],
                exclusive_percents: vec![10],
                watchers: 200,
            };
            return Plan {
                targets,
                cases: cases(&Scenario::ALL, &sizes),
                timing: Timing {
                    warmup: Duration::from_millis(100),
                    duration: Duration::from_millis(400),
                    drain: DRAIN,
                },
                runs: 1,
                smoke: true,
                floor,
            };
        }
        let or_clients = |counts: &Vec<usize>| match counts.is_empty() {
            true => self.clients.clone(),
            false => counts.clone(),
        };
        let sizes = Sizes {
            clients: self.clients.clone(),
            contended: or_clients(&self.contended_clients),
            pipelined: or_clients(&self.pipelined_clients),
            depths: self.depth.clone(),
            locks: self.locks,
            waiters: self.waiters,
            permits: self.permits.clone(),
            exclusive_percents: self.exclusive_percent.clone(),
            watchers: self.watchers,
        };
        Plan {
            targets,
            cases: cases(&self.scenario, &sizes),
            timing: Timing {
                warmup: self.warmup,
                duration: self.duration,
                drain: DRAIN,
            },
            runs: self.runs,
            smoke: false,
            floor,
        }
    }
}

/// Every scenario at each of its sizes. `clients` is the connection count,
/// except for memory (locks held), storm (waiters) and watch-fanout
/// (watchers); `depth` is the semaphore's permits, and the exclusive
/// acquires per hundred when shared.
pub fn cases(scenarios: &[Scenario], sizes: &Sizes) -> Vec<Case> {
    let mut cases = Vec::new();
    for &scenario in scenarios {
        let (clients, depths): (&[usize], &[usize]) = match scenario {
            Scenario::Uncontended => (&sizes.clients, &[1]),
            Scenario::Contended => (&sizes.contended, &[1]),
            Scenario::Pipelined => (&sizes.pipelined, &sizes.depths),
            Scenario::Memory | Scenario::ExpiryFlood | Scenario::ReleaseFlood => {
                (std::slice::from_ref(&sizes.locks), &[1])
            }
            Scenario::Storm => (std::slice::from_ref(&sizes.waiters), &[1]),
            Scenario::Failover => (&[1], &[1]),
            Scenario::Semaphore => (&sizes.contended, &sizes.permits),
            Scenario::Shared => (&sizes.contended, &sizes.exclusive_percents),
            Scenario::WatchFanout => (std::slice::from_ref(&sizes.watchers), &[1]),
        };
        for &clients in clients {
            for &depth in depths {
                let case = Case {
                    scenario,
                    clients,
                    depth,
                };
                if !cases.contains(&case) {
                    cases.push(case);
                }
            }
        }
    }
    cases
}

fn parse_big_count(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(n) if (1..=10_000_000).contains(&n) => Ok(n),
        _ => Err("expected a whole number from 1 to 10000000".into()),
    }
}

fn parse_count(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(n) if (1..=100_000).contains(&n) => Ok(n),
        _ => Err("expected a whole number from 1 to 100000".into()),
    }
}

/// A semaphore's permits, as protocol 1.2 allows them.
fn parse_permits(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(n) if (1..=10_000).contains(&n) => Ok(n),
        _ => Err("expected a whole number from 1 to 10000".into()),
    }
}

fn parse_percent(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(n) if n <= 100 => Ok(n),
        _ => Err("expected a whole number from 0 to 100".into()),
    }
}

fn parse_positive_seconds(text: &str) -> Result<Duration, String> {
    match parse_seconds(text)? {
        Duration::ZERO => Err("must be more than 0 seconds".into()),
        secs => Ok(secs),
    }
}

/// A duration in the grammar of every Baton flag (baton-proto's: `5`,
/// `0.5`, `500ms`, `2m`), from 0 to an hour.
fn parse_seconds(text: &str) -> Result<Duration, String> {
    const MAX_MS: u64 = 3_600_000;
    match baton_proto::parse_flag_duration_ms(text) {
        Ok(ms) if ms <= MAX_MS => Ok(Duration::from_millis(ms)),
        Ok(_) => Err("at most an hour (3600)".into()),
        Err(error) => Err(error.to_string()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Args, clap::Error> {
        Args::try_parse_from(std::iter::once("baton-bench").chain(args.iter().copied()))
    }

    #[test]
    fn full_command_line() {
        let args = parse(&[
            "--target",
            "baton,echo",
            "--spawn",
            "target/release/batond",
            "--scenario",
            "uncontended,pipelined",
            "--clients",
            "1,64",
            "--depth",
            "16",
            "--duration",
            "2.5",
            "--warmup",
            "0.5",
            "--runs",
            "5",
            "--pin-server",
            "0",
            "--pin-driver",
            "1",
        ])
        .unwrap();
        assert_eq!(args.pin_server, Some(0));
        assert_eq!(args.pin_driver, Some(1));
        let plan = args.plan();
        assert_eq!(plan.targets, [Target::Baton, Target::Echo]);
        assert_eq!(plan.runs, 5);
        assert_eq!(plan.timing.duration, Duration::from_millis(2500));
        assert_eq!(plan.timing.warmup, Duration::from_millis(500));
        let units = parse(&[
            "--scenario",
            "contended",
            "--duration",
            "1.5s",
            "--warmup",
            "200ms",
        ]);
        let timing = units.unwrap().plan().timing;
        assert_eq!(timing.duration, Duration::from_millis(1500));
        assert_eq!(timing.warmup, Duration::from_millis(200));
        let shown: Vec<_> = plan
            .cases
            .iter()
            .map(|c| (c.scenario, c.clients, c.depth))
            .collect();
        assert_eq!(
            shown,
            [
                (Scenario::Uncontended, 1, 1),
                (Scenario::Uncontended, 64, 1),
                (Scenario::Pipelined, 1, 16),
                (Scenario::Pipelined, 64, 16),
            ]
        );
    }

    #[test]
    fn smoke_runs_every_scenario_briefly() {
        let plan = parse(&["--smoke", "--target", "echo"]).unwrap().plan();
        assert!(plan.smoke);
        // Three load scenarios at C=1 and 4, then memory, storm, failover
        // and the two floods, then semaphore and shared at C=1 and 4 and
        // the watch fan-out.
        assert_eq!(plan.cases.len(), 16);
        assert_eq!(plan.runs, 1);
        assert!(plan.timing.warmup + plan.timing.duration <= Duration::from_secs(1));
    }

    #[test]
    fn sizes_per_scenario() {
        let args = parse(&[
            "--scenario",
            "uncontended,contended,pipelined,memory,storm,failover",
            "--clients",
            "1,256",
            "--contended-clients",
            "16",
            "--pipelined-clients",
            "8",
            "--depth",
            "16,64",
            "--locks",
            "5000",
            "--waiters",
            "300",
            "--target",
            "baton,redis,baton-raft",
        ])
        .unwrap();
        let plan = args.plan();
        assert_eq!(
            plan.targets,
            [Target::Baton, Target::Redis, Target::BatonRaft]
        );
        let shown: Vec<_> = plan
            .cases
            .iter()
            .map(|c| (c.scenario, c.clients, c.depth))
            .collect();
        assert_eq!(
            shown,
            [
                (Scenario::Uncontended, 1, 1),
                (Scenario::Uncontended, 256, 1),
                (Scenario::Contended, 16, 1),
                (Scenario::Pipelined, 8, 16),
                (Scenario::Pipelined, 8, 64),
                (Scenario::Memory, 5000, 1),
                (Scenario::Storm, 300, 1),
                (Scenario::Failover, 1, 1),
            ]
        );
    }

    #[test]
    fn protocol_1_2_scenarios_and_their_sizes() {
        let plan = |args: &[&str]| parse(args).unwrap().plan();
        let shown = |plan: Plan| -> Vec<_> {
            plan.cases
                .iter()
                .map(|c| (c.scenario, c.clients, c.depth))
                .collect()
        };
        // The defaults: N = 4, all shared, 10,000 watchers.
        let defaults = plan(&[
            "--scenario",
            "semaphore,shared,watch-fanout",
            "--contended-clients",
            "16",
        ]);
        assert_eq!(
            shown(defaults),
            [
                (Scenario::Semaphore, 16, 4),
                (Scenario::Shared, 16, 0),
                (Scenario::WatchFanout, 10_000, 1),
            ]
        );
        let sized = plan(&[
            "--scenario",
            "semaphore,shared,watch-fanout",
            "--clients",
            "4,16",
            "--permits",
            "1,4",
            "--exclusive-percent",
            "0,10",
            "--watchers",
            "500",
        ]);
        assert_eq!(
            shown(sized),
            [
                (Scenario::Semaphore, 4, 1),
                (Scenario::Semaphore, 4, 4),
                (Scenario::Semaphore, 16, 1),
                (Scenario::Semaphore, 16, 4),
                (Scenario::Shared, 4, 0),
                (Scenario::Shared, 4, 10),
                (Scenario::Shared, 16, 0),
                (Scenario::Shared, 16, 10),
                (Scenario::WatchFanout, 500, 1),
            ]
        );
        for bad in [
            &["--permits", "0"][..],
            &["--permits", "10001"],
            &["--exclusive-percent", "101"],
            &["--exclusive-percent", "-1"],
            &["--watchers", "0"],
            &["--watchers", "100001"],
        ] {
            let mut args = vec!["--scenario", "semaphore"];
            args.extend_from_slice(bad);
            assert!(parse(&args).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn floor_with_raft_unless_told() {
        let plan = |args: &[&str]| {
            let mut all = vec!["--scenario", "uncontended"];
            all.extend_from_slice(args);
            parse(&all).unwrap().plan()
        };
        assert!(!plan(&[]).floor, "baton alone needs no floor");
        assert!(plan(&["--target", "baton,baton-raft"]).floor);
        assert!(!plan(&["--target", "baton-raft", "--floor", "off"]).floor);
        assert!(plan(&["--target", "echo", "--floor", "on"]).floor);
        assert!(
            !parse(&["--smoke", "--target", "baton,echo"])
                .unwrap()
                .plan()
                .floor
        );
        assert!(parse(&["--scenario", "uncontended", "--floor", "yes"]).is_err());
    }

    #[test]
    fn refuses_bad_flags() {
        assert!(parse(&[]).is_err(), "a scenario is required");
        assert!(parse(&["--scenario", "sideways"]).is_err());
        assert!(parse(&["--scenario", "contended", "--clients", "0"]).is_err());
        assert!(parse(&["--scenario", "contended", "--duration", "-1"]).is_err());
        assert!(parse(&["--scenario", "contended", "--duration", "0"]).is_err());
        assert!(parse(&["--scenario", "contended", "--warmup", "0"]).is_ok());
        assert!(parse(&["--scenario", "contended", "--runs", "x"]).is_err());
        // Every Baton flag's grammar, up to an hour.
        for bad in ["1e3", ".5", "0.0001", "3600.001", "99999999999999999999"] {
            assert!(
                parse(&["--scenario", "contended", "--duration", bad]).is_err(),
                "{bad}"
            );
        }
        assert!(parse(&["--scenario", "contended", "--duration", "3600"]).is_ok());
        assert!(parse(&["--scenario", "contended", "--duration", "61m"]).is_err());
        assert!(parse(&[
            "--scenario",
            "contended",
            "--addr",
            "127.0.0.1:1",
            "--spawn",
            "batond"
        ])
        .is_err());
    }
}
