//! Turns the runs of each case into one table row (medians over runs) and
//! prints the table, with each target's figure as a ratio of the echo
//! ceiling, Redis and etcd for the same case.

use std::fmt::Write as _;
use std::time::Duration;

use crate::cpu::CpuUse;
use crate::scenario::{Case, Measured};
use crate::Target;

/// The summary of all runs of one case against one target.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub target: Target,
    pub case: Case,
    /// Median rate over the runs.
    pub rate: f64,
    /// (max - min) / median of the runs' rates: how far to trust `rate`.
    pub spread: f64,
    /// Medians of the runs' percentiles; `None` when nothing was timed.
    pub p50: Option<Duration>,
    pub p99: Option<Duration>,
    /// `rate` over the echo ceiling's rate for the same case.
    pub vs_echo: Option<f64>,
    /// `rate` over Redis's (without persistence) for the same case.
    pub vs_redis: Option<f64>,
    /// `rate` over etcd's for the same case.
    pub vs_etcd: Option<f64>,
    /// Medians of the server processes' CPU per cycle and share of the
    /// core, when the bench started them (not part of the table's cells).
    pub cpu: Option<CpuUse>,
}

impl Row {
    pub fn summarize(target: Target, case: Case, runs: &[Measured]) -> Self {
        let secs = |pick: fn(&Measured) -> Option<Duration>| {
            median(
                runs.iter()
                    .filter_map(pick)
                    .map(|d| d.as_secs_f64())
                    .collect(),
            )
            .map(Duration::from_secs_f64)
        };
        let rates: Vec<f64> = runs.iter().map(|run| run.rate).collect();
        let rate = median(rates.clone()).unwrap_or(0.0);
        let (min, max) = rates.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), &r| {
            (lo.min(r), hi.max(r))
        });
        Self {
            target,
            case,
            rate,
            spread: if rate > 0.0 { (max - min) / rate } else { 0.0 },
            p50: secs(|run| run.p50),
            p99: secs(|run| run.p99),
            vs_echo: None,
            vs_redis: None,
            vs_etcd: None,
            cpu: None,
        }
    }
}

/// The middle value; the mean of the two middle ones for an even count.
pub fn median(mut values: Vec<f64>) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(values[n / 2]),
        _ => Some((values[n / 2 - 1] + values[n / 2]) / 2.0),
    }
}

/// `rate` over the rate of `base` for the same case, where both ran.
fn ratio(rows: &[Row], row: &Row, base: Target) -> Option<f64> {
    rows.iter()
        .find(|other| other.target == base && other.case == row.case && other.rate > 0.0)
        .map(|other| row.rate / other.rate)
}

/// Fills the ratio columns of every row whose case also ran against the
/// echo ceiling, Redis or etcd.
pub fn add_ratios(rows: &mut [Row]) {
    let ratios: Vec<_> = rows
        .iter()
        .map(|row| {
            (
                ratio(rows, row, Target::Echo),
                ratio(rows, row, Target::Redis),
                ratio(rows, row, Target::Etcd),
            )
        })
        .collect();
    for (row, (echo, redis, etcd)) in rows.iter_mut().zip(ratios) {
        row.vs_echo = echo;
        row.vs_redis = redis;
        row.vs_etcd = etcd;
    }
}

/// A figure with sensible precision: small ones (bytes per lock,
/// milliseconds) keep a decimal.
pub fn figure(value: f64) -> String {
    if value.abs() < 100.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.0}")
    }
}

pub fn ratio_cell(value: Option<f64>) -> String {
    value.map_or("-".into(), |r| format!("{r:.2}x"))
}

pub const HEADERS: [&str; 13] = [
    "target", "scenario", "C", "depth", "value", "spread", "unit", "latency", "p50", "p99",
    "vs echo", "vs redis", "vs etcd",
];

/// The cells of one row, in `HEADERS` order.
pub fn cells(row: &Row) -> [String; 13] {
    [
        row.target.name().to_string(),
        row.case.scenario.name().to_string(),
        row.case.clients.to_string(),
        row.case.depth.to_string(),
        figure(row.rate),
        format!("{:.0}%", row.spread * 100.0),
        row.case.scenario.unit().to_string(),
        row.case.scenario.latency().to_string(),
        latency(row.p50),
        latency(row.p99),
        ratio_cell(row.vs_echo),
        ratio_cell(row.vs_redis),
        ratio_cell(row.vs_etcd),
    ]
}

pub fn render(rows: &[Row]) -> String {
    let cells: Vec<[String; 13]> = rows.iter().map(cells).collect();
    let mut widths = HEADERS.map(str::len);
    for row in &cells {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.len());
        }
    }
    let mut out = String::new();
    let mut line = |fields: &mut dyn Iterator<Item = &str>| {
        let mut text = String::new();
        for (column, field) in fields.enumerate() {
            // Text columns left-aligned, figures right-aligned.
            let _ = match column {
                0 | 1 | 6 | 7 => write!(text, "{field:<w$}  ", w = widths[column]),
                _ => write!(text, "{field:>w$}  ", w = widths[column]),
            };
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(&mut HEADERS.iter().copied());
    for row in &cells {
        line(&mut row.iter().map(String::as_str));
    }
    out
}

/// One line per row that has CPU figures: `target scenario C=.. depth=..:
/// serving ..`, for the console and the Markdown report.
pub fn cpu_lines(rows: &[Row]) -> Vec<String> {
    rows.iter()
        .filter_map(|row| {
            let cpu = row.cpu?;
            Some(format!(
                "{} {} C={} depth={}: {}",
                row.target.name(),
                row.case.scenario.name(),
                row.case.clients,
                row.case.depth,
                cpu.describe(&row.case)
            ))
        })
        .collect()
}

pub fn latency(value: Option<Duration>) -> String {
    match value {
        None => "-".into(),
        Some(d) if d < Duration::from_millis(1) => format!("{:.1}us", d.as_secs_f64() * 1e6),
        Some(d) if d < Duration::from_secs(1) => format!("{:.2}ms", d.as_secs_f64() * 1e3),
        Some(d) => format!("{:.2}s", d.as_secs_f64()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test
mod tests {
    use super::*;
    use crate::Scenario;

    const CASE: Case = Case {
        scenario: Scenario::Uncontended,
        clients: 64,
        depth: 1,
    };

    fn run(rate: f64, p50_us: Option<u64>) -> Measured {
        Measured {
            rate,
            p50: p50_us.map(Duration::from_micros),
            p99: p50_us.map(|us| Duration::from_micros(us * 2)),
        }
    }

    #[test]
    fn medians() {
        assert_eq!(median(vec![]), None);
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), Some(2.5));
    }

    #[test]
    fn summarizes_runs_by_median() {
        let runs = [run(100.0, Some(30)), run(300.0, Some(10)), run(200.0, None)];
        let row = Row::summarize(Target::Baton, CASE, &runs);
        assert_eq!(row.rate, 200.0);
        assert_eq!(row.spread, 1.0);
        assert_eq!(row.p50, Some(Duration::from_micros(20)));
        assert_eq!(row.p99, Some(Duration::from_micros(40)));
    }

    #[test]
    fn ratios_against_echo_of_the_same_case_only() {
        let other = Case { clients: 1, ..CASE };
        let mut rows = vec![
            Row::summarize(Target::Baton, CASE, &[run(900.0, None)]),
            Row::summarize(Target::Baton, other, &[run(5.0, None)]),
            Row::summarize(Target::Echo, CASE, &[run(1000.0, None)]),
        ];
        rows.push(Row::summarize(Target::Redis, CASE, &[run(450.0, None)]));
        add_ratios(&mut rows);
        assert_eq!(rows[0].vs_echo, Some(0.9));
        assert_eq!(rows[0].vs_redis, Some(2.0));
        assert_eq!(rows[0].vs_etcd, None);
        assert_eq!(rows[1].vs_echo, None);
        assert_eq!(rows[1].vs_redis, None);
        assert_eq!(rows[2].vs_echo, Some(1.0));
    }

    #[test]
    fn cpu_lines_only_for_rows_with_cpu() {
        let mut rows = vec![
            Row::summarize(Target::BatonPriority, CASE, &[run(1000.0, None)]),
            Row::summarize(Target::Echo, CASE, &[run(1000.0, None)]),
        ];
        rows[0].cpu = Some(CpuUse {
            serving_us: 20.0,
            others_us: 4.0,
            serving_share: 0.5,
            others_share: 0.1,
            other_count: 2,
        });
        assert_eq!(
            cpu_lines(&rows),
            [
                "baton-priority uncontended C=64 depth=1: serving 20.0us/cycle (50% of the core); \
              2 other(s) 4.00us/cycle (10%)"
            ]
        );
    }

    #[test]
    fn renders_an_aligned_table() {
        let mut rows = vec![Row::summarize(
            Target::Baton,
            CASE,
            &[run(81234.4, Some(12)), run(81000.0, Some(1500))],
        )];
        add_ratios(&mut rows);
        let table = render(&rows);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 2);
        assert!(lines[0].starts_with("target  scenario"), "{table}");
        assert!(lines[0].ends_with("vs echo  vs redis  vs etcd"), "{table}");
        assert!(lines[1].starts_with("baton   uncontended  64"), "{table}");
        assert!(
            lines[1].contains(" 81117      0%  cycles/s  cycle"),
            "{table}"
        );
        assert!(lines[1].contains("756.0us"), "{table}");
        assert!(lines[1].contains("1.51ms"), "{table}");
        assert!(lines[1].ends_with(" -"), "{table}");
    }
}
