//! Runs a plan: each target in turn (started once, stopped at the end),
//! every case `runs` times, then the medians as table rows.

use crate::cli::Plan;
use crate::error::BenchError;
use crate::report::{add_echo_ratios, Row};
use crate::scenario::run_once;
use crate::server::{Launch, Server};
use crate::Target;

/// Runs `plan` against each `(target, launch)`, pinning spawned servers to
/// `pin_server`. Progress goes to stderr; the rows are returned.
pub async fn run(
    plan: &Plan,
    targets: &[(Target, Launch)],
    pin_server: Option<usize>,
) -> Result<Vec<Row>, BenchError> {
    let mut rows = Vec::new();
    for (target, launch) in targets {
        let server = Server::start(launch, pin_server).await?;
        let outcome = run_target(plan, *target, &server, &mut rows).await;
        server.stop().await;
        outcome?;
    }
    add_echo_ratios(&mut rows);
    if plan.smoke {
        if let Some(idle) = rows.iter().find(|row| row.rate <= 0.0) {
            return Err(BenchError::Smoke(format!(
                "{} {} C={} completed nothing",
                idle.target.name(),
                idle.case.scenario.name(),
                idle.case.clients
            )));
        }
    }
    Ok(rows)
}

async fn run_target(
    plan: &Plan,
    target: Target,
    server: &Server,
    rows: &mut Vec<Row>,
) -> Result<(), BenchError> {
    for &case in &plan.cases {
        let mut runs = Vec::with_capacity(plan.runs);
        for run in 1..=plan.runs {
            let measured = run_once(server.addr(), target, case, plan.timing).await?;
            eprintln!(
                "{} {} C={} depth={} run {run}/{}: {:.0} {}",
                target.name(),
                case.scenario.name(),
                case.clients,
                case.depth,
                plan.runs,
                measured.rate,
                case.scenario.unit()
            );
            runs.push(measured);
        }
        rows.push(Row::summarize(target, case, &runs));
    }
    Ok(())
}
