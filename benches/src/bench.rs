//! Runs a plan in `runs` passes: each pass measures every target in turn
//! (started once for its load scenarios, afresh for each memory and
//! failover case, stopped at the end of its turn), every case once; the
//! rows are the medians over the passes. Why passes: a ratio between two
//! targets is only as good as the likeness of the moments they were
//! measured at, and on a shared machine the noise drifts over minutes.
//! With every run of a target in one stretch, the single node and the
//! priority cluster were measured minutes apart, and the same ratio swung
//! 2x between two runs of the bench; now each median mixes the same
//! moments of the run for every target. A target that cannot be measured
//! is reported and skipped, so one missing peer does not void a long
//! comparison; the bench still exits non-zero for it. A case that failed
//! is not measured again.

use crate::cli::Plan;
use crate::cluster;
use crate::cpu::{CpuUse, Probe};
use crate::error::BenchError;
use crate::floor::{self, Floor};
use crate::launch::{Launch, Programs};
use crate::report::{add_ratios, Row};
use crate::scenario::{run_prefix, run_probed, Case, Measured, Scenario};
use crate::server::{Server, SpawnSettings};
use crate::{failover, Target};
use crate::{flood, memory};

/// What a plan produced.
#[derive(Debug, Default)]
pub struct Outcome {
    pub rows: Vec<Row>,
    /// Targets or cases left out, and why (not built, not supported here).
    pub skipped: Vec<String>,
    /// Targets that failed: the bench exits non-zero when there are any.
    pub failures: Vec<String>,
    /// The machine's floor, when the plan asked for it and it was measured.
    pub floor: Option<Floor>,
}

/// Runs `plan` against its targets. Progress goes to stderr.
pub async fn run(plan: &Plan, programs: &Programs, settings: &SpawnSettings) -> Outcome {
    let mut outcome = Outcome::default();
    if plan.floor {
        // First, while no server of the run is up to disturb it.
        match floor::measure(programs, settings).await {
            Ok(floor) => {
                eprint!("{}", floor::console(&floor));
                outcome.floor = Some(floor);
            }
            Err(error) => outcome.failures.push(format!("floor: {error}")),
        }
    }
    let mut samples: Vec<Samples> = Vec::new();
    for pass in 1..=plan.runs {
        for &target in &plan.targets {
            if let Some(reason) = unavailable(target, programs) {
                if pass == 1 {
                    eprintln!("skipping {}: {reason}", target.name());
                    outcome.skipped.push(format!("{}: {reason}", target.name()));
                }
                continue;
            }
            let launch = match Launch::for_target(target, programs) {
                Ok(launch) => launch,
                Err(reason) => {
                    if pass == 1 {
                        outcome
                            .failures
                            .push(format!("{}: {reason}", target.name()));
                    }
                    continue;
                }
            };
            let cases: Vec<Case> = plan
                .cases
                .iter()
                .copied()
                .filter(|case| target.supports(case.scenario))
                .filter(|&case| !Samples::failed(&samples, target, case))
                .collect();
            let turn = Turn { plan, target, pass };
            for error in turn.run(&launch, settings, &cases, &mut samples).await {
                eprintln!("{} failed: {error}", target.name());
                outcome.failures.push(format!("{}: {error}", target.name()));
            }
        }
    }
    // A target that fails alike in every pass is reported once.
    let mut seen = std::collections::HashSet::new();
    outcome
        .failures
        .retain(|failure| seen.insert(failure.clone()));
    outcome.rows = samples.iter().filter_map(Samples::row).collect();
    add_ratios(&mut outcome.rows);
    if plan.smoke {
        for idle in outcome.rows.iter().filter(|row| row.rate <= 0.0) {
            if idle.case.scenario.higher_is_better() {
                outcome.failures.push(
                    BenchError::Smoke(format!(
                        "{} {} C={} completed nothing",
                        idle.target.name(),
                        idle.case.scenario.name(),
                        idle.case.clients
                    ))
                    .to_string(),
                );
            }
        }
    }
    outcome
}

/// Why `target` cannot be measured by this build with these programs.
fn unavailable(target: Target, programs: &Programs) -> Option<String> {
    if !target.compiled() {
        return Some("this build lacks its client (cargo feature etcd / zookeeper)".into());
    }
    if let (Some(mode), Some(batond)) = (target.cluster(), &programs.batond) {
        if !cluster::batond_has_mode(batond, mode) {
            return Some(format!(
                "`{} --help` does not list --mode {}",
                batond.display(),
                mode.flag()
            ));
        }
    }
    None
}

/// Every run of one case of one target so far.
struct Samples {
    target: Target,
    case: Case,
    runs: Vec<Measured>,
    cpus: Vec<CpuUse>,
    /// A run failed: the case gets no row and is not measured again.
    failed: bool,
}

impl Samples {
    fn of(all: &mut Vec<Samples>, target: Target, case: Case) -> &mut Samples {
        let at = match all
            .iter()
            .position(|s| s.target == target && s.case == case)
        {
            Some(at) => at,
            None => {
                all.push(Samples {
                    target,
                    case,
                    runs: Vec::new(),
                    cpus: Vec::new(),
                    failed: false,
                });
                all.len() - 1
            }
        };
        &mut all[at]
    }

    fn failed(all: &[Samples], target: Target, case: Case) -> bool {
        all.iter()
            .any(|s| s.target == target && s.case == case && s.failed)
    }

    /// The medians, as a table row.
    fn row(&self) -> Option<Row> {
        if self.failed || self.runs.is_empty() {
            return None;
        }
        let mut row = Row::summarize(self.target, self.case, &self.runs);
        row.cpu = CpuUse::median_of(&self.cpus);
        Some(row)
    }
}

/// One target's turn in one pass.
struct Turn<'a> {
    plan: &'a Plan,
    target: Target,
    pass: usize,
}

impl Turn<'_> {
    /// Runs every case once; returns what failed. A failure on the shared
    /// server ends this turn's load scenarios (its state is unknown), but
    /// each fresh-server case still runs on its own.
    async fn run(
        &self,
        launch: &Launch,
        settings: &SpawnSettings,
        cases: &[Case],
        samples: &mut Vec<Samples>,
    ) -> Vec<BenchError> {
        let (target, timing) = (self.target, self.plan.timing);
        let mut failures = Vec::new();
        let shared: Vec<Case> = cases
            .iter()
            .copied()
            .filter(|case| !case.scenario.fresh_server())
            .collect();
        if !shared.is_empty() {
            match launch.start(settings).await {
                Ok(server) => {
                    let probe = Probe::of(&server);
                    let measure =
                        |case| run_probed(server.addr(), target, case, timing, probe.as_ref());
                    let measured = self.measure(&shared, measure, samples).await;
                    server.stop().await;
                    failures.extend(measured.err());
                }
                Err(error) => failures.push(error),
            }
        }
        for &case in cases.iter().filter(|case| case.scenario.fresh_server()) {
            let fresh = |case: Case| async move {
                let measured = match case.scenario {
                    Scenario::Failover => failover::run(launch, settings, &run_prefix()).await,
                    _ => {
                        let settings = flood::settings_for(case, settings);
                        let server = launch.start(&settings).await?;
                        let measured = fresh_case(&server, target, case).await;
                        server.stop().await;
                        measured
                    }
                };
                measured.map(|measured| (measured, None))
            };
            failures.extend(self.measure(&[case], fresh, samples).await.err());
        }
        failures
    }

    /// Runs each case once with `measure` and keeps the run.
    async fn measure<F, Fut>(
        &self,
        cases: &[Case],
        measure: F,
        samples: &mut Vec<Samples>,
    ) -> Result<(), BenchError>
    where
        F: Fn(Case) -> Fut,
        Fut: std::future::Future<Output = Result<(Measured, Option<CpuUse>), BenchError>>,
    {
        for &case in cases {
            let kept = Samples::of(samples, self.target, case);
            let (measured, cpu) = match measure(case).await {
                Ok(run) => run,
                Err(error) => {
                    kept.failed = true;
                    return Err(error);
                }
            };
            eprintln!(
                "{} {} C={} depth={} run {}/{}: {:.1} {}",
                self.target.name(),
                case.scenario.name(),
                case.clients,
                case.depth,
                self.pass,
                self.plan.runs,
                measured.rate,
                case.scenario.unit()
            );
            if let Some(cpu) = &cpu {
                eprintln!("  cpu: {}", cpu.describe(&case));
            }
            kept.runs.push(measured);
            kept.cpus.extend(cpu);
        }
        Ok(())
    }
}

async fn fresh_case(server: &Server, target: Target, case: Case) -> Result<Measured, BenchError> {
    match case.scenario {
        Scenario::Memory => memory::run(server, target, case.clients, &run_prefix()).await,
        Scenario::ExpiryFlood | Scenario::ReleaseFlood => {
            let flood = flood::run(server, case.scenario, case.clients, &run_prefix()).await?;
            eprintln!(
                "{}: {}",
                target.name(),
                flood.describe(case.scenario, case.clients)
            );
            Ok(flood.measured)
        }
        _ => Err(BenchError::Scenario(format!(
            "{} does not need a fresh server",
            case.scenario.name()
        ))),
    }
}
