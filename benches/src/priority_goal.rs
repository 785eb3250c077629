//! Issue 14's goal for the priority cluster, judged on one run's rows:
//! at C=16, C=64 and pipelined, at least 0.75x the single node's rate, or,
//! since three processes share the server core, the active's CPU time per
//! cycle at most 1.3x the single node's (the standbys' share of the core
//! is reported beside it).

use crate::goals::{find_case, Goal, Verdict};
use crate::report::Row;
use crate::scenario::Scenario;
use crate::Target;

/// The priority cluster's rate over the single node's, at least.
const RATE_SHARE: f64 = 0.75;
/// Or the active's CPU per cycle over the single node's, at most.
const CPU_FACTOR: f64 = 1.3;
/// The cases the goal names: (scenario, clients, depth).
const CASES: [(Scenario, usize, usize); 3] = [
    (Scenario::Uncontended, 16, 1),
    (Scenario::Uncontended, 64, 1),
    (Scenario::Pipelined, 16, 16),
];

/// The goal, with each case's rate ratio, CPU ratio and standbys' share.
pub fn judge(rows: &[Row]) -> Goal {
    let mut checks = Vec::new();
    let mut figures = Vec::new();
    for case in CASES {
        let (Some(single), Some(priority)) = (
            find_case(rows, Target::Baton, case),
            find_case(rows, Target::BatonPriority, case),
        ) else {
            continue;
        };
        if single.rate <= 0.0 {
            continue;
        }
        let share = priority.rate / single.rate;
        let (scenario, clients, depth) = case;
        let name = match scenario {
            Scenario::Pipelined => format!("pipelined {clients}x{depth}"),
            _ => format!("C={clients}"),
        };
        let mut text = format!("{name}: {share:.2}x");
        let mut cpu_ok = false;
        if let (Some(ours), Some(theirs)) = (priority.cpu, single.cpu) {
            if theirs.serving_us > 0.0 {
                let factor = ours.serving_us / theirs.serving_us;
                cpu_ok = factor <= CPU_FACTOR;
                text.push_str(&format!(
                    ", CPU {:.1} vs {:.1}us = {factor:.2}x, standbys {:.0}% of the core",
                    ours.serving_us,
                    theirs.serving_us,
                    ours.others_share * 100.0
                ));
            }
        }
        checks.push(share >= RATE_SHARE || cpu_ok);
        figures.push(text);
    }
    Goal {
        goal: "Priority C=16, 64, pipelined: at least 0.75x the single node, or the active's CPU per cycle at most 1.3x",
        figures: figures.join("; "),
        verdict: Verdict::of(&checks),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::CpuUse;
    use crate::scenario::{Case, Measured};

    fn row(target: Target, case: (Scenario, usize, usize), rate: f64, cpu_us: f64) -> Row {
        let (scenario, clients, depth) = case;
        let case = Case {
            scenario,
            clients,
            depth,
        };
        let run = Measured {
            rate,
            p50: None,
            p99: None,
        };
        let mut row = Row::summarize(target, case, &[run]);
        row.cpu = Some(CpuUse {
            serving_us: cpu_us,
            others_us: 2.0,
            serving_share: 0.8,
            others_share: 0.2,
            other_count: 2,
        });
        row
    }

    #[test]
    fn each_case_passes_on_its_rate_or_on_its_cpu() {
        let [c16, c64, piped] = CASES;
        let rows = vec![
            row(Target::Baton, c16, 1000.0, 10.0),
            // 0.6x, but 1.2x the CPU: met.
            row(Target::BatonPriority, c16, 600.0, 12.0),
            row(Target::Baton, c64, 1000.0, 10.0),
            // 0.8x with 2x the CPU: met on the rate.
            row(Target::BatonPriority, c64, 800.0, 20.0),
            row(Target::Baton, piped, 1000.0, 1.0),
            // Neither.
            row(Target::BatonPriority, piped, 500.0, 1.6),
        ];
        let goal = judge(&rows);
        assert_eq!(goal.verdict, Verdict::Missed);
        assert_eq!(
            goal.figures,
            "C=16: 0.60x, CPU 12.0 vs 10.0us = 1.20x, standbys 20% of the core; \
             C=64: 0.80x, CPU 20.0 vs 10.0us = 2.00x, standbys 20% of the core; \
             pipelined 16x16: 0.50x, CPU 1.6 vs 1.0us = 1.60x, standbys 20% of the core"
        );
        let met = judge(&rows[..4]);
        assert_eq!(met.verdict, Verdict::Met);
    }

    #[test]
    fn without_both_rows_it_is_not_measured() {
        let rows = vec![row(Target::BatonPriority, CASES[0], 600.0, 12.0)];
        assert_eq!(judge(&rows).verdict, Verdict::NotMeasured);
    }
}
