//! One chaos run: start a fleet, let workers hammer it while the schedule
//! breaks it, then check the history. `CHAOS_SEED` replays a run's
//! schedule and choices (thread timing still varies), `CHAOS_SECS` sets how
//! long the faults go on.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::chaos::fleet::{Fleet, Mode};
use crate::chaos::history::{self, Answer, History, Outcome, Violation};
use crate::chaos::rng::Rng;
use crate::chaos::schedule::{self, ScheduleLog};
use crate::chaos::worker::{FencedResource, Shared, Worker};
use crate::line_client::LineClient;

/// Faults go on this long unless `CHAOS_SECS` says otherwise: short, so
/// that the four modes together stay under a minute in CI.
const DEFAULT_SECS: f64 = 8.0;
/// Clients per run.
const WORKERS: usize = 4;
/// Bound on starting the nodes and on their first serving node.
const READY_BOUND: Duration = Duration::from_secs(15);
/// Bound on the workers' last attempts after the schedule ends (the longest
/// attempt: a 1.5 s wait, the 3 s grace, the slack).
const DRAIN_BOUND: Duration = Duration::from_secs(20);
/// Violations shown per rule in a report.
const SHOWN_PER_RULE: usize = 4;

/// What to run.
#[derive(Debug, Clone)]
pub struct Config {
    pub mode: Mode,
    pub seed: u64,
    pub duration: Duration,
    /// The test's name, for the replay command.
    pub test: String,
    /// A resource the workers write to with their tokens (the fenced mode).
    pub fenced: Option<Arc<dyn FencedResource>>,
}

impl Config {
    /// `CHAOS_SEED` (default: from the clock) and `CHAOS_SECS` (default 8).
    pub fn from_env(mode: Mode, test: &str) -> Config {
        let seed = match std::env::var("CHAOS_SEED") {
            Ok(s) => match s.trim().parse::<u64>() {
                Ok(seed) => seed,
                Err(_) => panic!("CHAOS_SEED={s:?} is not a u64"),
            },
            Err(_) => SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1),
        };
        let secs = match std::env::var("CHAOS_SECS") {
            Ok(s) => match s.trim().parse::<f64>() {
                Ok(secs) if secs > 0.0 && secs < 86_400.0 => secs,
                _ => panic!("CHAOS_SECS={s:?} is not a number of seconds"),
            },
            Err(_) => DEFAULT_SECS,
        };
        Config {
            mode,
            seed,
            duration: Duration::from_secs_f64(secs),
            test: test.to_owned(),
            fenced: None,
        }
    }

    pub fn replay(&self) -> String {
        format!(
            "CHAOS_SEED={} CHAOS_SECS={} cargo test -p baton-tests --test chaos -- --exact {} --nocapture",
            self.seed,
            self.duration.as_secs_f64(),
            self.test
        )
    }
}

/// What a run found. Holds the fleet, so that a failed assertion on it
/// prints the nodes' logs as they are dropped.
#[derive(Debug)]
pub struct Report {
    pub config: Config,
    pub history: History,
    pub violations: Vec<Violation>,
    pub problems: Vec<String>,
    pub fleet: Fleet,
}

impl Report {
    pub fn passed(&self) -> bool {
        self.violations.is_empty() && self.problems.is_empty()
    }

    fn count(&self, pick: impl Fn(&Answer) -> bool) -> usize {
        self.history
            .attempts
            .iter()
            .filter(|a| matches!(&a.outcome, Outcome::Answered { answer, .. } if pick(answer)))
            .count()
    }

    /// One line: what the run did.
    pub fn summary(&self) -> String {
        let mut faults: BTreeMap<String, usize> = BTreeMap::new();
        for outage in &self.history.outages {
            *faults.entry(format!("{:?}", outage.kind)).or_default() += 1;
        }
        format!(
            "chaos {} seed {} for {:?}: {} attempts, {} grants, {} releases, {} redirects, faults {:?}; {} violations, {} node problems",
            self.config.mode.name(),
            self.config.seed,
            self.config.duration,
            self.history.attempts.len(),
            self.count(|a| matches!(a, Answer::Granted(_))),
            self.count(|a| *a == Answer::Released),
            self.count(|a| matches!(a, Answer::Moved(_))),
            faults,
            self.violations.len(),
            self.problems.len()
        )
    }
}

impl Report {
    /// Writes every attempt and outage, in time order, to a file in the
    /// temp directory, for reading a failure in full; returns its path.
    pub fn write_history(&self) -> Option<std::path::PathBuf> {
        let name = format!(
            "baton-chaos-{}-{}.log",
            self.config.mode.name().replace([' ', '-'], ""),
            self.config.seed
        );
        let path = std::env::temp_dir().join(name);
        let mut lines: Vec<(Duration, String)> = self
            .history
            .attempts
            .iter()
            .map(|a| (a.sent, a.to_string()))
            .collect();
        for o in &self.history.outages {
            lines.push((
                o.from,
                format!(
                    "node {} {:?} from {:?} until {:?}",
                    o.node, o.kind, o.from, o.until
                ),
            ));
        }
        lines.sort_by_key(|(at, _)| *at);
        let text: Vec<String> = lines.into_iter().map(|(_, line)| line).collect();
        std::fs::write(&path, text.join("\n")).ok()?;
        Some(path)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.summary())?;
        writeln!(
            f,
            "replay: {} (the same schedule and client choices; thread timing still varies)",
            self.config.replay()
        )?;
        if !self.passed() {
            if let Some(path) = self.write_history() {
                writeln!(f, "full history: {}", path.display())?;
            }
        }
        let mut by_rule: BTreeMap<&str, Vec<&Violation>> = BTreeMap::new();
        for v in &self.violations {
            by_rule.entry(v.rule()).or_default().push(v);
        }
        for (rule, all) in by_rule {
            writeln!(f, "{rule}: {} violation(s)", all.len())?;
            for v in all.iter().take(SHOWN_PER_RULE) {
                writeln!(f, "  {v}")?;
            }
        }
        for problem in &self.problems {
            writeln!(f, "node problem: {problem}")?;
        }
        writeln!(f, "outages: {:?}", self.history.outages)
    }
}

/// Runs one chaos run to the end and checks it.
pub async fn run(config: Config) -> Report {
    let mode = config.mode;
    let fleet = match tokio::task::spawn_blocking(move || Fleet::start(mode)).await {
        Ok(fleet) => fleet,
        Err(e) => panic!(
            "chaos {} seed {}: the nodes did not start: {e}",
            mode.name(),
            config.seed
        ),
    };
    fleet.wait_ready(READY_BOUND).await;
    let query = answers_query(&fleet).await;
    let checks = if query {
        ""
    } else {
        "; the nodes do not answer Q: releases are checked by acquires only"
    };
    println!(
        "chaos {}: seed {} (replay: {}){checks}; plain keys, a semaphore and a readers-writer key",
        mode.name(),
        config.seed,
        config.replay()
    );

    let start = Instant::now();
    let shared = Shared {
        peers: fleet.peers.clone(),
        start,
        stop: Arc::new(AtomicBool::new(false)),
        serving: Arc::new(AtomicUsize::new(0)),
        answer_slack: mode.rules().answer_slack,
        query,
        fenced: config.fenced.clone(),
    };
    let workers: Vec<_> = (0..WORKERS)
        .map(|i| {
            let worker = Worker::new(i, shared.clone(), Rng::fork(config.seed, 1 + i as u64));
            tokio::spawn(worker.run())
        })
        .collect();

    let until = start + config.duration;
    let serving = Arc::clone(&shared.serving);
    let mut rng = Rng::fork(config.seed, 0);
    let faults = std::thread::spawn(move || {
        let mut fleet = fleet;
        let log = schedule::run(&mut fleet, &mut rng, start, until, &serving);
        (fleet, log)
    });
    let (fleet, log): (Fleet, ScheduleLog) =
        match tokio::task::spawn_blocking(move || faults.join()).await {
            Ok(Ok(done)) => done,
            _ => panic!(
                "chaos {} seed {}: the fault schedule failed",
                mode.name(),
                config.seed
            ),
        };

    shared.stop.store(true, Ordering::SeqCst);
    let mut history = History {
        attempts: Vec::new(),
        outages: log.outages,
    };
    let drained = tokio::time::timeout(DRAIN_BOUND, futures_join(workers)).await;
    match drained {
        Ok(records) => history.attempts = records,
        Err(_) => panic!(
            "chaos {} seed {}: workers still busy {DRAIN_BOUND:?} after the end",
            mode.name(),
            config.seed
        ),
    }
    history.attempts.sort_by_key(|a| a.sent);
    let violations = history::check(&history, &mode.rules());
    Report {
        config,
        history,
        violations,
        problems: log.problems,
        fleet,
    }
}

/// Whether the nodes know `Q` (docs/protocol.md 1.1): a `Q` or an `M Q`
/// answer says yes, an `E` (unknown op) no.
async fn answers_query(fleet: &Fleet) -> bool {
    for addr in &fleet.peers {
        let Ok(mut probe) = LineClient::try_connect(*addr).await else {
            continue;
        };
        probe.send("Q chaos/probe").await;
        if let Some(line) = probe.recv_timeout(Duration::from_secs(3)).await {
            return line.starts_with("Q ") || line.starts_with("M Q ");
        }
    }
    false
}

async fn futures_join(
    workers: Vec<tokio::task::JoinHandle<Vec<history::Attempt>>>,
) -> Vec<history::Attempt> {
    let mut all = Vec::new();
    for worker in workers {
        match worker.await {
            Ok(attempts) => all.extend(attempts),
            Err(e) => panic!("a chaos worker failed: {e}"),
        }
    }
    all
}
