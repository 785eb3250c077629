//! deploy/grafana/baton-dashboard.json and deploy/prometheus/baton-alerts.yml
//! against what batond exports: every metric a query names is one that a
//! single node, a Raft cluster or a priority cluster shows on `/metrics`,
//! and every metric batond exports is documented in docs/metrics.md. The
//! rules' syntax is checked by `promtool check rules` in .ci/run.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use baton_tests::cluster::Cluster;
use baton_tests::http::{try_http_get, Scrape};
use baton_tests::raft::{RaftCluster, SERIAL, SETTLE};
use baton_tests::{free_addr, Batond};
use serde_json::Value;

const DASHBOARD: &str = include_str!("../../deploy/grafana/baton-dashboard.json");
const RULES: &str = include_str!("../../deploy/prometheus/baton-alerts.yml");
const METRICS_DOC: &str = include_str!("../../docs/metrics.md");

/// PromQL's functions and aggregations the files may use.
const FUNCTIONS: &[&str] = &[
    "abs",
    "absent",
    "avg",
    "changes",
    "clamp_min",
    "count",
    "delta",
    "deriv",
    "group",
    "histogram_quantile",
    "increase",
    "irate",
    "last_over_time",
    "max",
    "min",
    "rate",
    "resets",
    "sum",
    "time",
    "topk",
];
/// PromQL's keywords; those of the first list are followed by label names.
const GROUPING: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];
const KEYWORDS: &[&str] = &["and", "or", "unless", "bool", "offset"];

/// The metric names `expr` reads: its identifiers less functions,
/// keywords, label names and matchers, ranges, strings and `$variables`.
fn metric_names(expr: &str) -> Vec<String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut names = Vec::new();
    let mut i = 0;
    let mut skip_group = false;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '{' => i = closing(&chars, i, '{', '}'),
            '[' => i = closing(&chars, i, '[', ']'),
            '"' => i = closing(&chars, i, '"', '"'),
            '(' if skip_group => {
                i = closing(&chars, i, '(', ')');
                skip_group = false;
            }
            '$' => {
                i += 1;
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
                continue;
            }
            c if c.is_ascii_alphabetic() || c == '_' || c == ':' => {
                let start = i;
                while i < chars.len()
                    && (chars[i].is_ascii_alphanumeric() || "_:".contains(chars[i]))
                {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                let called = chars[i..].iter().find(|c| !c.is_whitespace()) == Some(&'(');
                if GROUPING.contains(&word.as_str()) {
                    skip_group = true;
                } else if called || FUNCTIONS.contains(&word.as_str()) {
                    assert!(
                        FUNCTIONS.contains(&word.as_str()),
                        "unknown function {word} in {expr}"
                    );
                } else if !KEYWORDS.contains(&word.as_str()) {
                    names.push(word);
                }
                continue;
            }
            c if c.is_ascii_digit() => {
                // A number (1000, 0.99, 1e-9): not a name.
                while i < chars.len()
                    && (chars[i].is_ascii_alphanumeric() || ".-".contains(chars[i]))
                {
                    i += 1;
                }
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    names
}

/// The index after the `close` that ends the block opened at `open_at`.
fn closing(chars: &[char], open_at: usize, open: char, close: char) -> usize {
    let mut depth = 0;
    let mut i = open_at;
    while i < chars.len() {
        let c = chars[i];
        if c == close && (depth > 0 || open == close) && i > open_at {
            depth -= 1;
            if depth <= 0 {
                return i + 1;
            }
        } else if c == open {
            depth += 1;
        } else if c == '\\' {
            i += 1;
        }
        i += 1;
    }
    panic!("unclosed {open} in {}", chars.iter().collect::<String>())
}

#[test]
fn names_are_read_from_promql() {
    let expr = r#"histogram_quantile(0.99, sum by (le, store) (rate(baton_fsync_seconds_bucket{job="$job", a=~"x|y"}[5m]))) > 1e-3 or absent(up{job="a"} == 1) unless on (peer) baton_peer_up"#;
    assert_eq!(
        metric_names(expr),
        ["baton_fsync_seconds_bucket", "up", "baton_peer_up"]
    );
}

/// The rules' `expr:` values: one line, or the block under `expr: |`.
fn rule_exprs() -> Vec<(String, String)> {
    let mut out = Vec::new();
    let lines: Vec<&str> = RULES.lines().collect();
    let mut alert = String::new();
    for (n, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        if let Some(name) = trimmed.strip_prefix("- alert: ") {
            alert = name.trim().to_string();
        }
        let Some(value) = trimmed.strip_prefix("expr: ") else {
            continue;
        };
        if value.trim() != "|" {
            out.push((alert.clone(), value.trim().to_string()));
            continue;
        }
        let indent = line.len() - trimmed.len();
        let block: Vec<&str> = lines[n + 1..]
            .iter()
            .take_while(|l| l.len() - l.trim_start().len() > indent)
            .map(|l| l.trim())
            .collect();
        out.push((alert.clone(), block.join(" ")));
    }
    out
}

/// The dashboard's queries, its template variable's included.
fn dashboard_exprs(dashboard: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        let title = panel["title"].as_str().expect("a title").to_string();
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().expect("expr");
            out.push((title.clone(), expr.to_string()));
        }
    }
    for var in dashboard["templating"]["list"]
        .as_array()
        .expect("variables")
    {
        if let Some(query) = var["query"]["query"].as_str() {
            let inner = query
                .strip_prefix("label_values(")
                .and_then(|q| q.split_once(','))
                .map(|(metric, _)| metric.trim().to_string())
                .unwrap_or_else(|| {
                    panic!("a variable query not label_values(metric, label): {query}")
                });
            out.push((format!("variable {}", var["name"]), inner));
        }
    }
    out
}

#[test]
fn the_dashboard_and_the_rules_are_well_formed() {
    let dashboard: Value = serde_json::from_str(DASHBOARD).expect("the dashboard is JSON");
    let panels = dashboard["panels"].as_array().expect("panels");
    let ids: BTreeSet<u64> = panels
        .iter()
        .map(|p| p["id"].as_u64().expect("id"))
        .collect();
    assert_eq!(ids.len(), panels.len(), "panel ids are unique");
    for panel in panels {
        let grid = &panel["gridPos"];
        let (x, w) = (
            grid["x"].as_u64().expect("x"),
            grid["w"].as_u64().expect("w"),
        );
        assert!(x + w <= 24, "{} overflows the grid", panel["title"]);
        if panel["type"] != "row" {
            assert!(
                !panel["targets"].as_array().expect("targets").is_empty(),
                "{}",
                panel["title"]
            );
        }
    }
    let exprs = rule_exprs();
    let alerts = RULES.matches("- alert: ").count();
    assert_eq!(exprs.len(), alerts, "one expr per alert");
    for want in [
        "BatonNoServingNode",
        "BatonTwoServingNodes",
        "BatonFollowerLagging",
        "BatonPeerUnreachable",
        "BatonConnectionsNearLimit",
        "BatonLocksNearLimit",
        "BatonExpiryBacklog",
        "BatonNodeRestarted",
    ] {
        assert!(exprs.iter().any(|(a, _)| a == want), "no alert {want}");
    }
}

async fn scrape(http: SocketAddr, accept: impl Fn(&Scrape) -> bool) -> Scrape {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(reply) = try_http_get(http, "/metrics").await {
            let scrape = Scrape::parse(&reply.body);
            if accept(&scrape) {
                return scrape;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no scrape as expected from {http}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn series_names(scrape: &Scrape) -> BTreeSet<String> {
    scrape
        .samples
        .keys()
        .map(|series| series.split('{').next().unwrap_or(series).to_string())
        .collect()
}

fn has(name: &'static str) -> impl Fn(&Scrape) -> bool {
    move |s| series_names(s).contains(name)
}

/// What a single node, a Raft leader and a priority active export.
async fn exported() -> BTreeSet<String> {
    let _serial = SERIAL.lock().await;
    let mut names = BTreeSet::new();
    let http = free_addr();
    let _single = Batond::start(&["--http-listen", &http.to_string()]);
    names.extend(series_names(
        &scrape(http, has("baton_max_connections")).await,
    ));
    let raft_http: Vec<SocketAddr> = (0..3).map(|_| free_addr()).collect();
    let mut raft = RaftCluster::start_each(3, |i| {
        vec!["--http-listen".into(), raft_http[i].to_string()]
    });
    let (leader, _) = raft.wait_leader(SETTLE).await;
    // The indexes show once the leader's first entry is applied.
    let (lagging, applied) = (
        has("baton_replication_lag_entries"),
        has("baton_raft_applied_index"),
    );
    let ready = move |s: &Scrape| lagging(s) && applied(s);
    names.extend(series_names(&scrape(raft_http[leader], ready).await));
    drop(raft);
    let prio_http: Vec<SocketAddr> = (0..2).map(|_| free_addr()).collect();
    let mut prio = Cluster::start_each(2, |i| {
        vec!["--http-listen".into(), prio_http[i].to_string()]
    });
    let active = prio.wait_single_active(Duration::from_secs(10)).await;
    names.extend(series_names(
        &scrape(prio_http[active], has("baton_handoffs_total")).await,
    ));
    names
}

#[tokio::test]
async fn every_query_names_only_metrics_batond_exports_and_every_metric_is_documented() {
    let names = exported().await;
    let dashboard: Value = serde_json::from_str(DASHBOARD).expect("JSON");
    let mut queries = dashboard_exprs(&dashboard);
    queries.extend(rule_exprs());
    for (whose, expr) in &queries {
        for name in metric_names(expr) {
            assert!(
                names.contains(&name),
                "{whose}: {name} is not exported by batond ({expr})"
            );
        }
    }
    for name in &names {
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .unwrap_or(name);
        assert!(
            METRICS_DOC.contains(&format!("`{family}`")),
            "{family} is not in docs/metrics.md"
        );
    }
}
