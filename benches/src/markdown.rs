//! The results as Markdown for docs/benchmarks.md: how they were made,
//! the floor the machine allows (when measured), one table per scenario,
//! the goals of issues 6 and 14 with verdicts, and what was skipped or
//! failed.

use std::fmt::Write as _;

use crate::bench::Outcome;
use crate::floor;
use crate::goals::{self, Goal};
use crate::report::{self, cells, Row, HEADERS};
use crate::scenario::Scenario;

/// The setting of the run, shown above the tables.
#[derive(Clone, Debug, Default)]
pub struct Context {
    pub command: String,
    pub setup: String,
}

pub fn render(outcome: &Outcome, context: &Context) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "Command: `{}`\n", context.command);
    let _ = writeln!(out, "{}\n", context.setup);
    if let Some(floor) = &outcome.floor {
        let _ = writeln!(out, "### Floor\n");
        let _ = writeln!(
            out,
            "What this machine allows a durable 3-node cluster, measured at the start of \
             this run: one commit is the leader's fsync in parallel with a follower's \
             receive, fsync and ack; a cycle is two commits and the client's two round trips.\n"
        );
        out.push_str(&floor::markdown(floor));
        out.push('\n');
    }
    for scenario in Scenario::ALL {
        let rows: Vec<&Row> = outcome
            .rows
            .iter()
            .filter(|row| row.case.scenario == scenario)
            .collect();
        if rows.is_empty() {
            continue;
        }
        let _ = writeln!(out, "### {}\n", scenario.name());
        table(&mut out, &rows);
        out.push('\n');
        cpu_notes(&mut out, &rows);
    }
    let _ = writeln!(out, "### Goals of issue 6\n");
    goal_table(&mut out, &goals::judge(&outcome.rows));
    let _ = writeln!(out, "\n### Goals of issue 14\n");
    goal_table(
        &mut out,
        &goals::judge_clusters(&outcome.rows, outcome.floor.as_ref()),
    );
    for (title, notes) in [("Skipped", &outcome.skipped), ("Failed", &outcome.failures)] {
        if !notes.is_empty() {
            let _ = writeln!(out, "\n### {title}\n");
            for note in notes {
                let _ = writeln!(out, "- {}", note.replace('\n', " "));
            }
        }
    }
    out
}

fn table(out: &mut String, rows: &[&Row]) {
    // The scenario is the section title; every other column stays.
    let keep: Vec<usize> = (0..HEADERS.len()).filter(|&c| c != 1).collect();
    let line = |out: &mut String, fields: Vec<&str>| {
        let _ = writeln!(out, "| {} |", fields.join(" | "));
    };
    line(out, keep.iter().map(|&c| HEADERS[c]).collect());
    line(
        out,
        keep.iter()
            .map(|&c| {
                if c <= 1 || c == 6 || c == 7 {
                    "---"
                } else {
                    "---:"
                }
            })
            .collect(),
    );
    for row in rows {
        let cells = cells(row);
        line(out, keep.iter().map(|&c| cells[c].as_str()).collect());
    }
}

/// The server processes' CPU per row, under its table: the serving node's
/// CPU per cycle, the others' (standbys, followers), and their shares of
/// the server core.
fn cpu_notes(out: &mut String, rows: &[&Row]) {
    let owned: Vec<Row> = rows.iter().map(|row| (*row).clone()).collect();
    let lines = report::cpu_lines(&owned);
    if lines.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "Server CPU over the measured stretch (median of the runs; share = CPU time / wall time, \
         all nodes on the one server core):\n"
    );
    for line in lines {
        let _ = writeln!(out, "- {line}");
    }
    out.push('\n');
}

fn goal_table(out: &mut String, goals: &[Goal]) {
    let _ = writeln!(out, "| goal | this run | verdict |");
    let _ = writeln!(out, "|---|---|---|");
    for goal in goals {
        let figures = if goal.figures.is_empty() {
            "-"
        } else {
            &goal.figures
        };
        let _ = writeln!(
            out,
            "| {} | {figures} | {} |",
            goal.goal,
            goal.verdict.text()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::floor::{Floor, Samples};
    use crate::scenario::{Case, Measured};
    use crate::Target;

    #[test]
    fn tables_per_scenario_goals_and_notes() {
        let case = Case {
            scenario: Scenario::Contended,
            clients: 16,
            depth: 1,
        };
        let run = Measured {
            rate: 12345.0,
            p50: Some(std::time::Duration::from_micros(40)),
            p99: None,
        };
        let outcome = Outcome {
            rows: vec![Row::summarize(Target::Baton, case, &[run])],
            skipped: vec!["etcd: not built".into()],
            failures: vec![],
            floor: None,
        };
        let text = render(
            &outcome,
            &Context {
                command: "benches/run.sh".into(),
                setup: "2 cores".into(),
            },
        );
        assert!(text.starts_with("Command: `benches/run.sh`\n"), "{text}");
        assert!(text.contains("### contended\n"), "{text}");
        assert!(!text.contains("### uncontended"), "{text}");
        assert!(
            text.contains(
                "| baton | 16 | 1 | 12345 | 0% | cycles/s | handoff | 40.0us | - | - | - | - |"
            ),
            "{text}"
        );
        assert!(text.contains("### Goals of issue 6"), "{text}");
        assert!(text.contains("### Goals of issue 14"), "{text}");
        assert!(!text.contains("### Floor"), "{text}");
        assert!(text.contains("- etcd: not built"), "{text}");
        assert!(!text.contains("### Failed"), "{text}");
    }

    #[test]
    fn the_floor_above_the_tables_and_in_the_goals() {
        let us = |v: u64| Samples::new(vec![std::time::Duration::from_micros(v)]);
        let outcome = Outcome {
            rows: vec![],
            skipped: vec![],
            failures: vec![],
            floor: Some(Floor {
                fsync: us(130),
                rtt: us(20),
            }),
        };
        let text = render(&outcome, &Context::default());
        let at = |what: &str| text.find(what).unwrap_or_else(|| panic!("{what}: {text}"));
        assert!(at("### Floor\n") < at("| floor | value | how |"), "{text}");
        assert!(at("| cycles/s at C=1 | 2941 | 1 / cycle |") < at("### Goals of issue 6"));
        assert!(
            text.contains(
                "| Raft uncontended C=1: at least 0.7x the floor's cycles/s | - | not measured |"
            ),
            "{text}"
        );
    }
}
