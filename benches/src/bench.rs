//! Runs a plan: each target in turn (started once for the load scenarios,
//! afresh for each run of memory and failover, stopped at the end), every
//! case `runs` times, then the medians as table rows. A target that cannot
//! be measured is reported and skipped, so one missing peer does not void
//! a long comparison; the bench still exits non-zero for it.

use crate::cli::Plan;
use crate::cluster;
use crate::cpu::{CpuUse, Probe};
use crate::error::BenchError;
use crate::floor::{self, Floor};
use crate::launch::{Launch, Programs};
use crate::memory;
use crate::report::{add_ratios, Row};
use crate::scenario::{run_prefix, run_probed, Case, Measured, Scenario};
use crate::server::{Server, SpawnSettings};
use crate::{failover, Target};

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
    for &target in &plan.targets {
        if let Some(reason) = unavailable(target, programs) {
            eprintln!("skipping {}: {reason}", target.name());
            outcome.skipped.push(format!("{}: {reason}", target.name()));
            continue;
        }
        let launch = match Launch::for_target(target, programs) {
            Ok(launch) => launch,
            Err(reason) => {
                outcome
                    .failures
                    .push(format!("{}: {reason}", target.name()));
                continue;
            }
        };
        let cases: Vec<Case> = plan
            .cases
            .iter()
            .copied()
            .filter(|case| target.supports(case.scenario))
            .collect();
        for error in run_target(plan, target, &launch, settings, &cases, &mut outcome.rows).await {
            eprintln!("{} failed: {error}", target.name());
            outcome.failures.push(format!("{}: {error}", target.name()));
        }
    }
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

/// Runs every case of `target`; returns what failed. A failure on the shared
/// server ends the load scenarios (its state is unknown), but each fresh-
/// server case still runs on its own.
async fn run_target(
    plan: &Plan,
    target: Target,
    launch: &Launch,
    settings: &SpawnSettings,
    cases: &[Case],
    rows: &mut Vec<Row>,
) -> Vec<BenchError> {
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
                let measured = run_cases(
                    plan,
                    target,
                    &shared,
                    |case| run_probed(server.addr(), target, case, plan.timing, probe.as_ref()),
                    rows,
                )
                .await;
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
                    let server = launch.start(settings).await?;
                    let measured = fresh_case(&server, target, case).await;
                    server.stop().await;
                    measured
                }
            };
            measured.map(|measured| (measured, None))
        };
        failures.extend(run_cases(plan, target, &[case], fresh, rows).await.err());
    }
    failures
}

async fn fresh_case(server: &Server, target: Target, case: Case) -> Result<Measured, BenchError> {
    match case.scenario {
        Scenario::Memory => memory::run(server, target, case.clients, &run_prefix()).await,
        _ => Err(BenchError::Scenario(format!(
            "{} does not need a fresh server",
            case.scenario.name()
        ))),
    }
}

/// Runs each case `plan.runs` times with `measure` and adds its row.
async fn run_cases<F, Fut>(
    plan: &Plan,
    target: Target,
    cases: &[Case],
    measure: F,
    rows: &mut Vec<Row>,
) -> Result<(), BenchError>
where
    F: Fn(Case) -> Fut,
    Fut: std::future::Future<Output = Result<(Measured, Option<CpuUse>), BenchError>>,
{
    for &case in cases {
        let mut runs = Vec::with_capacity(plan.runs);
        let mut cpus = Vec::with_capacity(plan.runs);
        for run in 1..=plan.runs {
            let (measured, cpu) = measure(case).await?;
            eprintln!(
                "{} {} C={} depth={} run {run}/{}: {:.1} {}",
                target.name(),
                case.scenario.name(),
                case.clients,
                case.depth,
                plan.runs,
                measured.rate,
                case.scenario.unit()
            );
            if let Some(cpu) = &cpu {
                eprintln!("  cpu: {}", cpu.describe(&case));
            }
            runs.push(measured);
            cpus.extend(cpu);
        }
        let mut row = Row::summarize(target, case, &runs);
        row.cpu = CpuUse::median_of(&cpus);
        rows.push(row);
    }
    Ok(())
}
