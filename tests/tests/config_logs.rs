//! `batond --config FILE` and the operator's logs, black-box with real
//! processes: the file's settings apply and the command line overrides
//! them; a bad file stops start-up with one line naming it and the key;
//! `--log-format json` writes one JSON object per line; piped stderr has
//! no colour codes; a dead peer is logged once and then summed up, in both
//! cluster modes, as is the Raft library's per-heartbeat warning.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use baton_tests::cluster::{probe_status, Cluster};
use baton_tests::raft::{RaftCluster, SERIAL};
use baton_tests::{assert_any_error, batond_bin, grant_token, Batond};
use serde_json::Value;

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write the config file");
    path.to_str().expect("utf-8").to_string()
}

#[tokio::test]
async fn the_files_settings_apply_and_flags_override_them() {
    let dir = tempfile::tempdir().expect("dir");
    let file = write(
        dir.path(),
        "batond.toml",
        "max-lease = \"5\"\nmax-wait = 2\n",
    );
    let node = Batond::start(&["--config", &file]);
    let mut client = node.connect().await;
    assert_any_error(&client.request("A long 1 8").await);
    let token = grant_token(&client.request("A short 1 4").await, "short");
    assert_eq!(client.request(&format!("R short {token}")).await, "R short");
    assert_any_error(&client.request("A wait 3 1").await);
    drop(client);
    // --max-lease on the command line wins over the file's.
    let node = Batond::start(&["--config", &file, "--max-lease", "10"]);
    let mut client = node.connect().await;
    grant_token(&client.request("A long 1 8").await, "long");
    assert_any_error(&client.request("A wait 3 1").await);
}

/// Durations take the units `baton`'s flags take, in the file and on the
/// command line alike.
#[tokio::test]
async fn durations_take_units_in_the_file_and_on_the_command_line() {
    let dir = tempfile::tempdir().expect("dir");
    let file = write(dir.path(), "units.toml", "max-lease = \"5s\"\n");
    let node = Batond::start(&["--config", &file, "--max-wait", "2000ms"]);
    let mut client = node.connect().await;
    assert_any_error(&client.request("A long 1 5.001").await);
    let token = grant_token(&client.request("A short 1 5").await, "short");
    assert_eq!(client.request(&format!("R short {token}")).await, "R short");
    assert_any_error(&client.request("A wait 2.001 1").await);
    assert_any_error(&client.request("A wait 3 1").await);
}

#[test]
fn a_bad_config_file_stops_start_up_with_one_line_naming_it_and_the_key() {
    let dir = tempfile::tempdir().expect("dir");
    let cases = [
        ("unknown.toml", "max-wiat = \"3\"\n", "max-wiat"),
        ("type.toml", "max-wait = true\n", "max-wait"),
        ("value.toml", "max-wait = \"soon\"\n", "max-wait"),
        ("list.toml", "listen = [\"a:1\"]\n", "listen"),
        ("syntax.toml", "max-wait = \n", "not valid TOML"),
        ("addr.toml", "peers = [\"localhost\"]\n", "peers"),
    ];
    for (name, text, expected) in cases {
        let file = write(dir.path(), name, text);
        let out = run_batond(&["--config", &file]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {stderr}");
        assert!(
            stderr.contains(&file) && stderr.contains(expected),
            "{name}: {stderr}"
        );
        assert_eq!(stderr.trim_end().lines().count(), 1, "{name}: {stderr}");
        assert!(out.stdout.is_empty(), "{name} started");
    }
    let missing = dir.path().join("missing.toml");
    let missing = missing.to_str().expect("utf-8");
    let out = run_batond(&["--config", missing]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(missing) && stderr.contains("cannot read"),
        "{stderr}"
    );
}

fn run_batond(args: &[&str]) -> std::process::Output {
    Command::new(batond_bin())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run batond")
}

#[tokio::test]
async fn json_logs_are_one_object_per_line() {
    let mut node = Batond::start(&["--log-format", "json"]);
    let mut client = node.connect().await;
    client.request("A json 1 10").await;
    drop(client);
    node.terminate();
    let log = node.log_tail(10_000);
    let lines: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(!lines.is_empty(), "no log lines");
    for line in &lines {
        let value: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(
            value["level"].is_string() && value["timestamp"].is_string(),
            "{line}"
        );
        assert!(value["fields"]["message"].is_string(), "{line}");
    }
    assert!(log.contains("\"batond serving\""), "{log}");
}

#[tokio::test]
async fn piped_logs_have_no_colour_codes() {
    let mut node = Batond::start(&[]);
    node.terminate();
    let log = node.log_tail(10_000);
    assert!(log.contains("batond serving"), "{log}");
    assert!(!log.contains('\u{1b}'), "ESC in piped stderr: {log:?}");
}

/// The number of lines in `node`'s log now.
fn log_lines(node: &Batond) -> usize {
    node.log_tail(1_000_000).lines().count()
}

/// Polls `node`'s log, past its first `skip` lines, until it has `needle`,
/// for at most `within`; returns that part of the log.
fn wait_log(node: &Batond, skip: usize, needle: &str, within: Duration) -> String {
    let deadline = Instant::now() + within;
    loop {
        let all = node.log_tail(1_000_000);
        let log: String = all.lines().skip(skip).map(|l| format!("{l}\n")).collect();
        if log.contains(needle) {
            return log;
        }
        assert!(
            Instant::now() < deadline,
            "no {needle:?} in the log within {within:?}:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[tokio::test]
async fn a_dead_raft_peer_is_logged_once_then_summed_up() {
    let _one_cluster_at_a_time = SERIAL.lock().await;
    let mut cluster = RaftCluster::start(3);
    let (leader, _) = cluster.wait_leader(Duration::from_secs(10)).await;
    let dead = (leader + 1) % 3;
    let dead_addr = cluster.peers[dead].to_string();
    let skip = log_lines(&cluster.nodes[leader]);
    cluster.nodes[dead].kill();
    let node = &cluster.nodes[leader];
    let log = wait_log(
        node,
        skip,
        "peer still unreachable",
        Duration::from_secs(25),
    );
    let down = format!("peer unreachable peer={dead_addr}");
    assert_eq!(log.matches(&down).count(), 1, "{log}");
    // The library's per-call warnings are left to the per-peer line.
    let library_warnings = log
        .lines()
        .filter(|l| l.contains("openraft") && l.contains("WARN"))
        .count();
    assert_eq!(library_warnings, 0, "openraft's warnings:\n{log}");
    assert!(
        log.len() < 20_000,
        "{} bytes of log in ~20 s:\n{log}",
        log.len()
    );
}

#[tokio::test]
async fn a_dead_priority_peer_is_logged_once_then_summed_up() {
    let _one_cluster_at_a_time = SERIAL.lock().await;
    let mut cluster = Cluster::start(3, &[]);
    let active = cluster.wait_single_active(Duration::from_secs(10)).await;
    let dead = (active + 1) % 3;
    let dead_addr = cluster.addr(dead).to_string();
    let skip = log_lines(cluster.node_mut(active));
    cluster.kill(dead);
    assert!(probe_status(cluster.addr(active), Duration::from_secs(2))
        .await
        .is_some());
    let log = wait_log(
        cluster.node_mut(active),
        skip,
        "peer still unreachable",
        Duration::from_secs(25),
    );
    let down = format!("peer unreachable peer={dead_addr}");
    assert_eq!(log.matches(&down).count(), 1, "{log}");
    assert!(log.contains("failed_attempts="), "{log}");
}
