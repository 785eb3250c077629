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
/// percentiles against Baton and an echo ceiling, on 127.0.0.1 only.
#[derive(Debug, Parser)]
#[command(name = "baton-bench", version)]
pub struct Args {
    /// Targets, comma separated: baton, echo (the loopback ceiling).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "baton")]
    pub target: Vec<Target>,
    /// A Baton server already running (default 127.0.0.1:7411).
    #[arg(long, conflicts_with = "spawn")]
    pub addr: Option<SocketAddr>,
    /// Start this batond on a free port and kill it at the end.
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
    /// Cycles in flight per connection in the pipelined scenario, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "16", value_parser = parse_count)]
    pub depth: Vec<usize>,
    /// Measured seconds per run.
    #[arg(long, value_name = "SECS", default_value = "5", value_parser = parse_positive_seconds)]
    pub duration: Duration,
    /// Unmeasured seconds of load before each run's measurement.
    #[arg(long, value_name = "SECS", default_value = "1", value_parser = parse_seconds)]
    pub warmup: Duration,
    /// Runs per case; the table shows medians.
    #[arg(long, default_value = "3", value_parser = parse_count)]
    pub runs: usize,
    /// A few seconds of every scenario at C=1 and 4 (for CI); overrides
    /// --scenario, --clients, --depth, --duration, --warmup and --runs.
    #[arg(long)]
    pub smoke: bool,
    /// Pin the spawned server (and the echo server) to this CPU.
    #[arg(long, value_name = "CPU")]
    pub pin_server: Option<usize>,
    /// Pin this driver to this CPU (re-runs itself under taskset).
    #[arg(long, value_name = "CPU")]
    pub pin_driver: Option<usize>,
    /// Internal: be the echo server on this address.
    #[arg(long, value_name = "ADDR", hide = true)]
    pub serve_echo: Option<SocketAddr>,
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
}

/// Long enough for a contended acquire's 10 s wait to run out first.
const DRAIN: Duration = Duration::from_secs(15);

impl Args {
    pub fn plan(&self) -> Plan {
        let mut targets = self.target.clone();
        targets.dedup();
        if self.smoke {
            return Plan {
                targets,
                cases: cases(&Scenario::ALL, &[1, 4], &[4]),
                timing: Timing {
                    warmup: Duration::from_millis(100),
                    duration: Duration::from_millis(400),
                    drain: DRAIN,
                },
                runs: 1,
                smoke: true,
            };
        }
        Plan {
            targets,
            cases: cases(&self.scenario, &self.clients, &self.depth),
            timing: Timing {
                warmup: self.warmup,
                duration: self.duration,
                drain: DRAIN,
            },
            runs: self.runs,
            smoke: false,
        }
    }
}

/// Every scenario at every client count; depths only apply to pipelined.
pub fn cases(scenarios: &[Scenario], clients: &[usize], depths: &[usize]) -> Vec<Case> {
    let mut cases = Vec::new();
    for &scenario in scenarios {
        for &clients in clients {
            let depths = match scenario {
                Scenario::Pipelined => depths,
                _ => &[1],
            };
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

fn parse_count(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(n) if (1..=100_000).contains(&n) => Ok(n),
        _ => Err("expected a whole number from 1 to 100000".into()),
    }
}

fn parse_positive_seconds(text: &str) -> Result<Duration, String> {
    match parse_seconds(text)? {
        Duration::ZERO => Err("must be more than 0 seconds".into()),
        secs => Ok(secs),
    }
}

fn parse_seconds(text: &str) -> Result<Duration, String> {
    let secs: f64 = text
        .parse()
        .map_err(|_| "expected seconds, e.g. 5 or 0.5".to_string())?;
    if !(0.0..=3600.0).contains(&secs) {
        return Err("expected seconds from 0 to 3600".into());
    }
    Ok(Duration::from_secs_f64(secs))
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
        assert_eq!(plan.cases.len(), 6);
        assert_eq!(plan.runs, 1);
        assert!(plan.timing.warmup + plan.timing.duration <= Duration::from_secs(1));
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
