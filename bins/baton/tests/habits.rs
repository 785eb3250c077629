//! The CLI habits of `etcdctl lock`, `consul lock` and `redis-cli`, against
//! real nodes: `--try`, durations with units, `renew`'s default lease,
//! `status --json`, the unreachable-server message, `run` exiting once its
//! lease is lost, and `--child-exit-code`.

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use baton_tests::Batond;
use common::{baton, expect_code, lease_left, poll, stderr, stdout, BATON};
use serde_json::Value;

#[test]
fn try_is_one_attempt_and_exits_3_at_once_when_held() {
    let node = Batond::start(&[]);
    let servers = node.addr().to_string();
    let out = baton(&servers, &["acquire", "try/a", "--try"]);
    expect_code(&out, 0);
    let holder = stdout(&out).trim().to_owned();

    let started = Instant::now();
    let out = baton(&servers, &["acquire", "try/a", "--try"]);
    expect_code(&out, 3);
    let out = baton(
        &servers,
        &["run", "try/a", "--try", "--", "sh", "-c", "echo ran"],
    );
    expect_code(&out, 3);
    assert_eq!(stdout(&out), "", "the command must not run");
    // Two processes, each one attempt: nowhere near a wait.
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    // Nothing was left queued: the holder releases and the key is free.
    expect_code(&baton(&servers, &["release", "try/a", &holder]), 0);
    let out = baton(&servers, &["inspect", "try/a"]);
    assert_eq!(stdout(&out), "try/a token=- lease=- waiters=0\n");
    // --try and --wait say opposite things.
    let out = baton(&servers, &["acquire", "try/a", "--try", "--wait", "5"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

#[test]
fn durations_take_units_and_garbage_is_refused_clearly() {
    let node = Batond::start(&[]);
    let servers = node.addr().to_string();
    let out = baton(&servers, &["acquire", "units/a", "--lease", "2m"]);
    expect_code(&out, 0);
    let left = lease_left(&servers, "units/a");
    assert!(left > 100.0 && left <= 120.0, "{left}");
    // A wait of 300 ms, given as such, runs out.
    let started = Instant::now();
    let out = baton(&servers, &["acquire", "units/a", "--wait", "300ms"]);
    expect_code(&out, 3);
    assert!(started.elapsed() >= Duration::from_millis(300));
    let out = baton(
        &servers,
        &["acquire", "units/b", "--lease", "1.5s", "--wait", "1h"],
    );
    expect_code(&out, 0);
    assert!(lease_left(&servers, "units/b") <= 1.5);

    for bad in ["5parsecs", "1m30s", "-5s", "0.5ms", "s", "1.2345"] {
        let flag = format!("--lease={bad}");
        let out = baton(&servers, &["acquire", "units/c", &flag]);
        assert_eq!(out.status.code(), Some(2), "{bad}: {}", stderr(&out));
        assert!(
            stderr(&out).contains(&format!("`{bad}` is not a duration")),
            "{bad}: {}",
            stderr(&out)
        );
    }
}

#[test]
fn renew_defaults_its_lease_to_30_seconds_like_acquire() {
    let node = Batond::start(&[]);
    let servers = node.addr().to_string();
    let out = baton(&servers, &["acquire", "renew/a", "--lease", "2"]);
    expect_code(&out, 0);
    let token = stdout(&out).trim().to_owned();
    expect_code(&baton(&servers, &["renew", "renew/a", &token]), 0);
    let left = lease_left(&servers, "renew/a");
    assert!(left > 25.0 && left <= 30.0, "{left}");
}

#[test]
fn status_json_is_one_array_with_every_field_and_the_unreachable() {
    let http = baton_tests::free_addr();
    let node = Batond::start(&["--http-listen", &http.to_string()]);
    let nowhere = baton_tests::free_addr().to_string();
    let servers = format!("{},{nowhere}", node.addr());
    let out = baton(&servers, &["acquire", "sj/a"]);
    expect_code(&out, 0);
    let token = stdout(&out).trim().to_owned();

    let out = baton(&servers, &["status", "--json"]);
    expect_code(&out, 0);
    assert_eq!(stdout(&out).lines().count(), 1, "{}", stdout(&out));
    let nodes: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let nodes = nodes.as_array().unwrap();
    assert_eq!(nodes.len(), 2, "{nodes:?}");
    let up = &nodes[0];
    let addr = node.addr().to_string();
    assert_eq!(up["addr"], addr.as_str());
    assert_eq!(up["role"], "single");
    assert_eq!(up["mode"], "single");
    assert_eq!(up["self"], addr.as_str());
    assert_eq!(up["active"], addr.as_str());
    assert_eq!(up["token"], token.as_str());
    assert_eq!(up["locks"], 1);
    assert_eq!(up["waiters"], 0);
    assert_eq!(up["http"], http.to_string().as_str());
    assert!(up.get("error").is_none());
    let down = &nodes[1];
    assert_eq!(down["addr"], nowhere.as_str());
    assert_eq!(
        down["error"],
        format!("cannot reach {nowhere}: connection refused").as_str()
    );
    assert!(down.get("role").is_none());

    // Nothing reachable: still the array, and exit 4.
    let out = baton(&nowhere, &["status", "--json"]);
    assert_eq!(out.status.code(), Some(4));
    let nodes: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(nodes[0]["addr"], nowhere.as_str());
    assert!(nodes[0]["error"]
        .as_str()
        .unwrap()
        .contains("connection refused"));
    // A node that takes connections and never answers (a stopped one):
    // said so, in the table's lines too.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent = listener.local_addr().unwrap().to_string();
    for args in [&["status", "--json"][..], &["status"]] {
        let out = baton(&silent, args);
        assert_eq!(out.status.code(), Some(4));
        let said = format!("{}{}", stdout(&out), stderr(&out));
        assert!(
            said.contains("takes connections but did not answer in time"),
            "{said}"
        );
    }
    drop(listener);
}

#[test]
fn an_unreachable_server_is_named_with_the_cause() {
    let nowhere = baton_tests::free_addr().to_string();
    let out = baton(&nowhere, &["acquire", "k", "--wait", "1"]);
    expect_code(&out, 4);
    assert_eq!(
        stderr(&out),
        format!("baton: cannot reach {nowhere}: connection refused (no server reachable)\n")
    );
    let other = baton_tests::free_addr().to_string();
    let out = baton(&format!("{nowhere},{other}"), &["release", "k", "1"]);
    expect_code(&out, 4);
    assert!(
        stderr(&out).contains(&format!(
            "cannot reach {nowhere}: connection refused; {other}: connection refused"
        )),
        "{}",
        stderr(&out)
    );
    let out = baton("no-such-host.invalid:7411", &["inspect", "k"]);
    expect_code(&out, 4);
    assert!(
        stderr(&out).contains("cannot reach no-such-host.invalid:7411: cannot resolve it"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn inspect_names_the_node_that_took_the_connection_but_did_not_serve() {
    // A process that takes connections and never answers (as a stopped
    // node's kernel does), beside an address nobody listens on.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_addr = silent.local_addr().unwrap().to_string();
    let nowhere = baton_tests::free_addr().to_string();
    let out = baton(&format!("{silent_addr},{nowhere}"), &["inspect", "k"]);
    expect_code(&out, 4);
    let err = stderr(&out);
    assert!(
        err.contains(&format!("cannot reach {nowhere}: connection refused")),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "{silent_addr} takes connections but did not serve"
        )),
        "{err}"
    );
    assert!(!err.contains("no server reachable"), "{err}");
    drop(silent);
}

/// Starts `baton run KEY --lease LEASE -- sh -c 'echo $$ > PIDFILE; exec sleep 60'`.
fn run_sleeper(
    servers: &str,
    key: &str,
    lease: &str,
    pid_file: &std::path::Path,
) -> std::process::Child {
    let script = format!("echo $$ > '{}'; exec sleep 60", pid_file.display());
    Command::new(BATON)
        .env("BATON_SERVERS", servers)
        .args(["run", key, "--lease", lease, "--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits for `child` to exit, for at most `within`; its code and stderr.
fn exit_within(child: &mut std::process::Child, within: Duration) -> (Option<i32>, String) {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            use std::io::Read;
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            return (status.code(), err);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("baton run did not exit within {within:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn sleeper_pid(pid_file: &std::path::Path) -> i32 {
    let mut pid = None;
    poll(Duration::from_secs(10), "the command started", || {
        pid = std::fs::read_to_string(pid_file)
            .ok()
            .and_then(|t| t.trim().parse().ok());
        pid.is_some()
    });
    pid.unwrap()
}

fn is_alive(pid: i32) -> bool {
    // A zombie is dead too: read its state.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat.split_whitespace().nth(2).is_none_or(|s| s != "Z"),
        Err(_) => false,
    }
}

#[test]
fn run_exits_7_within_a_renew_interval_once_the_lock_is_force_released() {
    let node = Batond::start(&[]);
    let servers = node.addr().to_string();
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    // A 3 s lease: renewed every second.
    let mut run = run_sleeper(&servers, "lost/force", "3", &pid_file);
    let sleeper = sleeper_pid(&pid_file);
    let out = baton(&servers, &["force-release", "lost/force", "--yes"]);
    expect_code(&out, 0);
    let released = Instant::now();
    let (code, err) = exit_within(&mut run, Duration::from_secs(10));
    let took = released.elapsed();
    assert_eq!(code, Some(7), "{err}");
    assert!(err.contains("lost"), "{err}");
    assert!(
        took < Duration::from_millis(2500),
        "exited {took:?} after the release"
    );
    assert!(!is_alive(sleeper), "the command was left running");
}

#[test]
fn run_exits_7_by_the_lease_end_when_no_renewal_gets_through() {
    let mut node = Batond::start(&[]);
    let servers = node.addr().to_string();
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    let mut run = run_sleeper(&servers, "lost/stopped", "1.5", &pid_file);
    let sleeper = sleeper_pid(&pid_file);
    // The node stops answering: every renewal goes unanswered.
    node.stop_signal();
    let stopped = Instant::now();
    let (code, err) = exit_within(&mut run, Duration::from_secs(15));
    let took = stopped.elapsed();
    node.cont();
    assert_eq!(code, Some(7), "{err}");
    // The lease ends at most 1.5 s after the stop; a little slack for the
    // command's termination and the exit.
    assert!(
        took < Duration::from_millis(2500),
        "exited {took:?} after the node stopped"
    );
    assert!(!is_alive(sleeper), "the command was left running");
}

#[test]
fn child_exit_code_keeps_the_commands_status_apart_from_batons() {
    let node = Batond::start(&[]);
    let servers = node.addr().to_string();
    // Without the flag: the command's own status, even one that looks
    // like baton's "lease lost".
    let out = baton(&servers, &["run", "cec", "--", "sh", "-c", "exit 7"]);
    assert_eq!(out.status.code(), Some(7));
    // With it: 10 for any failure, its status on stderr; 0 for success.
    let out = baton(
        &servers,
        &[
            "run",
            "cec",
            "--child-exit-code",
            "--",
            "sh",
            "-c",
            "exit 7",
        ],
    );
    expect_code(&out, 10);
    assert_eq!(stderr(&out), "baton: the command exited with status 7\n");
    let out = baton(
        &servers,
        &[
            "run",
            "cec",
            "--child-exit-code",
            "--",
            "sh",
            "-c",
            "kill -9 $$",
        ],
    );
    expect_code(&out, 10);
    assert_eq!(stderr(&out), "baton: the command was killed by signal 9\n");
    let out = baton(&servers, &["run", "cec", "--child-exit-code", "--", "true"]);
    expect_code(&out, 0);
    // Baton's own codes stay: held (3) when --try finds the key taken.
    let out = baton(&servers, &["acquire", "cec"]);
    expect_code(&out, 0);
    let out = baton(
        &servers,
        &["run", "cec", "--try", "--child-exit-code", "--", "true"],
    );
    expect_code(&out, 3);
}

#[test]
fn help_documents_every_exit_code_and_the_new_flags() {
    let out = Command::new(BATON).arg("--help").output().unwrap();
    let help = stdout(&out);
    for code in 0..=10 {
        assert!(
            help.lines()
                .any(|l| l.trim_start().starts_with(&format!("{code} "))),
            "--help lacks exit code {code}:\n{help}"
        );
    }
    assert!(help.contains("--child-exit-code"), "{help}");
    assert!(help.contains("500ms"), "{help}");
    let out = Command::new(BATON)
        .args(["run", "--help"])
        .output()
        .unwrap();
    let help = stdout(&out);
    for flag in ["--try", "--child-exit-code", "--lease", "--wait"] {
        assert!(help.contains(flag), "run --help lacks {flag}:\n{help}");
    }
}
