//! A bar chart of the load scenarios as hand-written SVG: one group per
//! case (scenario, C, depth), one bar per target, on a log scale so the
//! echo ceiling and etcd fit on the same axis.

use std::fmt::Write as _;

use crate::report::{figure, Row};
use crate::scenario::Scenario;
use crate::Target;

const WIDTH: f64 = 900.0;
const LABEL: f64 = 190.0;
const BAR: f64 = 12.0;
const GAP: f64 = 10.0;

fn colour(target: Target) -> &'static str {
    match target {
        Target::Baton => "#1f77b4",
        Target::BatonPriority => "#6baed6",
        Target::BatonRaft => "#08306b",
        Target::Echo => "#bbbbbb",
        Target::Redis => "#d62728",
        Target::RedisAof => "#ff9896",
        Target::Etcd => "#2ca02c",
        Target::EtcdCluster => "#98df8a",
        Target::Zookeeper => "#9467bd",
    }
}

/// The SVG document, or `None` when no load scenario ran.
pub fn render(rows: &[Row]) -> Option<String> {
    let load: Vec<&Row> = rows
        .iter()
        .filter(|r| r.case.scenario.higher_is_better() && r.case.scenario != Scenario::Storm)
        .filter(|r| r.rate > 0.0)
        .collect();
    let max = load.iter().map(|r| r.rate).fold(0.0, f64::max);
    if load.is_empty() || max <= 0.0 {
        return None;
    }
    let mut cases = Vec::new();
    for row in &load {
        if !cases.contains(&row.case) {
            cases.push(row.case);
        }
    }
    let mut targets = Vec::new();
    for row in &load {
        if !targets.contains(&row.target) {
            targets.push(row.target);
        }
    }
    // Log scale from 10/s to the largest figure.
    let low = 10f64.log10();
    let high = max.log10().max(low + 1.0);
    let scale =
        |rate: f64| ((rate.max(10.0).log10() - low) / (high - low)) * (WIDTH - LABEL - 80.0);

    let mut body = String::new();
    let mut y = 40.0;
    for case in &cases {
        let group: Vec<&&Row> = load.iter().filter(|r| r.case == *case).collect();
        let height = group.len() as f64 * BAR;
        let _ = writeln!(
            body,
            r#"<text x="{x}" y="{ty}" text-anchor="end" font-size="11">{} C={}{}</text>"#,
            case.scenario.name(),
            case.clients,
            if case.depth > 1 {
                format!(" d={}", case.depth)
            } else {
                String::new()
            },
            x = LABEL - 6.0,
            ty = y + height / 2.0 + 4.0,
        );
        for (i, row) in group.iter().enumerate() {
            let by = y + i as f64 * BAR;
            let w = scale(row.rate);
            let _ = writeln!(
                body,
                r#"<rect x="{LABEL}" y="{by}" width="{w:.1}" height="{h}" fill="{c}"><title>{t}: {v} {u}</title></rect><text x="{tx:.1}" y="{ty}" font-size="9">{v}</text>"#,
                h = BAR - 2.0,
                c = colour(row.target),
                t = row.target.name(),
                v = figure(row.rate),
                u = row.case.scenario.unit(),
                tx = LABEL + w + 3.0,
                ty = by + BAR - 3.0,
            );
        }
        y += height + GAP;
    }
    let mut legend = String::new();
    for (i, target) in targets.iter().enumerate() {
        let x = 10.0 + i as f64 * 110.0;
        let _ = write!(
            legend,
            r#"<rect x="{x}" y="8" width="10" height="10" fill="{}"/><text x="{tx}" y="17" font-size="11">{}</text>"#,
            colour(*target),
            target.name(),
            tx = x + 14.0,
        );
    }
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{h}" font-family="sans-serif">"#,
        h = y + 30.0
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    svg.push_str(&legend);
    svg.push('\n');
    svg.push_str(&body);
    let _ = writeln!(
        svg,
        r#"<text x="{LABEL}" y="{ty}" font-size="10">cycles/s (pipelined: requests/s), log scale from 10</text>"#,
        ty = y + 15.0
    );
    svg.push_str("</svg>\n");
    Some(svg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::{Case, Measured};

    fn row(target: Target, scenario: Scenario, rate: f64) -> Row {
        let case = Case {
            scenario,
            clients: 16,
            depth: 1,
        };
        let run = Measured {
            rate,
            p50: None,
            p99: None,
        };
        Row::summarize(target, case, &[run])
    }

    #[test]
    fn one_bar_per_row_of_the_load_scenarios() {
        let rows = [
            row(Target::Baton, Scenario::Uncontended, 50_000.0),
            row(Target::Etcd, Scenario::Uncontended, 1_000.0),
            row(Target::Baton, Scenario::Memory, 150.0),
            row(Target::Baton, Scenario::Failover, 300.0),
        ];
        let svg = render(&rows).unwrap_or_default();
        assert!(svg.starts_with("<svg"), "{svg}");
        assert!(svg.trim_end().ends_with("</svg>"), "{svg}");
        assert_eq!(svg.matches("<title>").count(), 2, "{svg}");
        assert!(svg.contains("<title>etcd: 1000 cycles/s</title>"), "{svg}");
    }

    #[test]
    fn nothing_to_draw() {
        assert_eq!(render(&[row(Target::Baton, Scenario::Memory, 150.0)]), None);
    }
}
