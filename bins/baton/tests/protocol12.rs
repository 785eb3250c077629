//! The CLI's protocol 1.2 commands against an in-process fake node
//! (baton_tests::fake_node): acquire options, inspect's holders, watch,
//! elect and leader.

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use baton_tests::fake_node::FakeNode;
use common::{baton, expect_code, poll, stderr, stdout, BATON};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// `baton ARGS` started with its stdout piped.
fn spawn(servers: &str, args: &[&str]) -> Child {
    Command::new(BATON)
        .env("BATON_SERVERS", servers)
        .env_remove("BATON_USER")
        .env_remove("BATON_SECRET")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits at most 20 s for `child` to exit; its exit code.
fn exit_code(child: &mut Child) -> Option<i32> {
    let mut code = None;
    poll(Duration::from_secs(20), "baton exits", || {
        code = child.try_wait().unwrap().map(|status| status.code());
        code.is_some()
    });
    code.flatten()
}

fn interrupt(child: &Child) {
    kill(Pid::from_raw(child.id() as i32), Signal::SIGINT).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_takes_permits_shared_and_a_value_and_inspect_shows_them() {
    let fake = FakeNode::start().await;
    let servers = fake.addr.to_string();
    let out = baton(
        &servers,
        &["acquire", "pool", "--permits", "2", "--value", "w1"],
    );
    expect_code(&out, 0);
    let token: u64 = stdout(&out).trim().parse().unwrap();
    assert!(fake
        .lines()
        .contains(&"A pool 0 30 permits=2 value=w1".to_owned()));

    let out = baton(&servers, &["inspect", "pool"]);
    expect_code(&out, 0);
    let shown = stdout(&out);
    let expected = format!(
        " waiters=0 permits=2 mode=exclusive holders=1 holder={token},30.000,w1 state={token}.1."
    );
    assert!(
        shown.starts_with(&format!("pool token={token} lease=30.000")),
        "{shown}"
    );
    assert!(shown.contains(&expected), "{shown}");
    let out = baton(&servers, &["inspect", "pool", "--json"]);
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(json["permits"], 2, "{json}");
    assert_eq!(json["mode"], "exclusive", "{json}");
    assert_eq!(json["holders"][0]["token"], token.to_string(), "{json}");
    assert_eq!(json["holders"][0]["value"], "w1", "{json}");

    // Another number of permits: the node's refusal (5).
    let out = baton(&servers, &["acquire", "pool", "--try"]);
    expect_code(&out, 5);
    assert!(
        stderr(&out).contains("the key has 2 permits"),
        "{}",
        stderr(&out)
    );
    // Refused before anything is sent: usage (2).
    for args in [
        &["acquire", "k", "--shared", "--permits", "2"][..],
        &["acquire", "k", "--permits", "0"],
        &["acquire", "k", "--value", "a b"],
    ] {
        let out = baton(&servers, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
    }
    let out = baton(&servers, &["acquire", "readers", "--shared"]);
    expect_code(&out, 0);
    let out = baton(&servers, &["acquire", "readers", "--shared", "--try"]);
    expect_code(&out, 0);
    let out = baton(&servers, &["inspect", "readers"]);
    assert!(
        stdout(&out).contains(" mode=shared holders=2 "),
        "{}",
        stdout(&out)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_prints_a_line_per_change_until_interrupted() {
    let fake = FakeNode::start().await;
    let servers = fake.addr.to_string();
    let mut watch = spawn(&servers, &["watch", "w"]);
    let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "w state=- holders=0");

    let out = baton(&servers, &["acquire", "w", "--value", "10.0.0.7:80"]);
    expect_code(&out, 0);
    let token = stdout(&out).trim().to_owned();
    let line = lines.next().unwrap().unwrap();
    assert!(
        line.starts_with(&format!("w state={token}.1."))
            && line.ends_with(&format!(" holders=1 holder={token},10.0.0.7:80")),
        "{line}"
    );
    expect_code(&baton(&servers, &["release", "w", &token]), 0);
    assert_eq!(lines.next().unwrap().unwrap(), "w state=- holders=0");

    interrupt(&watch);
    assert_eq!(exit_code(&mut watch), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elect_runs_the_command_while_leading_and_leader_prints_its_value() {
    let fake = FakeNode::start().await;
    let servers = fake.addr.to_string();
    let dir = tempfile::tempdir().unwrap();
    let out = baton(&servers, &["leader", "e"]);
    expect_code(&out, 6);

    let gate = dir.path().join("gate");
    let first_cmd = format!(
        "echo $BATON_TOKEN > {0}.token; while [ ! -e {0} ]; do sleep 0.05; done",
        gate.display()
    );
    let mut first = spawn(
        &servers,
        &["elect", "e", "--value", "n1", "--", "sh", "-c", &first_cmd],
    );
    poll(Duration::from_secs(10), "n1 leads", || {
        stdout(&baton(&servers, &["leader", "e"])) == "n1\n"
    });
    let second_ran = dir.path().join("second");
    let second_cmd = format!("touch {}", second_ran.display());
    let mut second = spawn(
        &servers,
        &["elect", "e", "--value", "n2", "--", "sh", "-c", &second_cmd],
    );
    std::thread::sleep(Duration::from_millis(300));
    assert!(!second_ran.exists(), "one leader at a time");
    let out = baton(&servers, &["leader", "e", "--json"]);
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let token = std::fs::read_to_string(format!("{}.token", gate.display())).unwrap();
    assert_eq!(json["token"], token.trim(), "{json}");
    assert_eq!(json["value"], "n1", "{json}");

    // The first command ends: it resigns, the second leads and runs.
    std::fs::write(&gate, "").unwrap();
    assert_eq!(exit_code(&mut first), Some(0));
    assert_eq!(exit_code(&mut second), Some(0));
    assert!(second_ran.exists());
    expect_code(&baton(&servers, &["leader", "e"]), 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elect_stops_the_command_when_leadership_is_lost() {
    let fake = FakeNode::start().await;
    let servers = fake.addr.to_string();
    let mut elect = spawn(
        &servers,
        &[
            "elect", "lost", "--value", "v", "--lease", "1", "--", "sleep", "30",
        ],
    );
    let mut token = None;
    poll(Duration::from_secs(10), "leading", || {
        let out = baton(&servers, &["leader", "lost", "--json"]);
        let json: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap_or_default();
        token = json["token"].as_str().and_then(|t| t.parse::<u64>().ok());
        token.is_some()
    });
    assert!(fake.expire("lost", token.unwrap()));
    // The next renewal is answered "not held": SIGTERM to sleep, exit 7.
    assert_eq!(exit_code(&mut elect), Some(7));
    let mut err = String::new();
    std::io::Read::read_to_string(&mut elect.stderr.take().unwrap(), &mut err).unwrap();
    assert!(err.contains("lost"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_holds_one_of_a_semaphores_permits_while_its_command_runs() {
    let fake = FakeNode::start().await;
    let servers = fake.addr.to_string();
    let dir = tempfile::tempdir().unwrap();
    let gate = dir.path().join("gate");
    let mut runs = Vec::new();
    for i in 0..2 {
        let started = dir.path().join(format!("started{i}"));
        let script = format!(
            "touch {}; while [ ! -e {} ]; do sleep 0.05; done",
            started.display(),
            gate.display()
        );
        let args = [
            "run",
            "sem",
            "--permits",
            "2",
            "--value",
            "w",
            "--",
            "sh",
            "-c",
            &script,
        ];
        runs.push((spawn(&servers, &args), started));
    }
    poll(Duration::from_secs(10), "both commands run", || {
        runs.iter().all(|(_, started)| started.exists())
    });
    // Both permits are taken: a third run finds none.
    let out = baton(
        &servers,
        &["run", "sem", "--permits", "2", "--try", "--", "true"],
    );
    expect_code(&out, 3);
    let out = baton(&servers, &["inspect", "sem"]);
    assert!(
        stdout(&out).contains(" permits=2 mode=exclusive holders=2 "),
        "{}",
        stdout(&out)
    );
    std::fs::write(&gate, "").unwrap();
    for (mut run, _) in runs {
        assert_eq!(exit_code(&mut run), Some(0));
    }
    let out = baton(
        &servers,
        &["run", "sem", "--permits", "2", "--try", "--", "true"],
    );
    expect_code(&out, 0);
}
