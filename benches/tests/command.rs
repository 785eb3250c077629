//! The `baton-bench` binary end to end: the smoke mode against the echo
//! ceiling it spawns itself (pinned, as run.sh does), and the failures a
//! user can cause on the command line.

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test

use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn bench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_baton-bench"))
        .args(args)
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn smoke_against_the_echo_ceiling_prints_every_scenario() {
    let started = Instant::now();
    let out = bench(&["--smoke", "--target", "echo"]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(started.elapsed() < Duration::from_secs(30));
    let rows: Vec<&str> = stdout.lines().filter(|l| l.starts_with("echo ")).collect();
    assert_eq!(rows.len(), 6, "{stdout}");
    for scenario in ["uncontended", "contended", "pipelined"] {
        for clients in ["1", "4"] {
            assert!(
                rows.iter().any(|row| {
                    let fields: Vec<&str> = row.split_whitespace().collect();
                    fields[1] == scenario && fields[2] == clients
                }),
                "{scenario} C={clients} missing:\n{stdout}"
            );
        }
    }
}

#[test]
fn pinned_driver_and_server_still_run() {
    let out = bench(&[
        "--target",
        "echo",
        "--scenario",
        "uncontended",
        "--clients",
        "2",
        "--warmup",
        "0",
        "--duration",
        "0.3",
        "--runs",
        "1",
        "--pin-server",
        "0",
        "--pin-driver",
        "0",
    ]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("driver: 1 thread(s) on cpu 0"), "{stdout}");
    assert!(stdout.contains("server: cpu 0"), "{stdout}");
    assert_eq!(stdout.lines().filter(|l| l.starts_with("echo ")).count(), 1);
}

#[test]
fn a_server_that_cannot_start_fails_the_bench() {
    let out = bench(&["--smoke", "--spawn", "/nonexistent/batond"]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("cannot start /nonexistent/batond"));
}

#[test]
fn a_server_that_exits_without_an_address_fails_the_bench() {
    // `true` ignores its arguments and exits at once.
    let out = bench(&["--smoke", "--spawn", "/bin/true"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("exited before printing"),
        "{}",
        text(&out.stderr)
    );
}

/// Each pass measures every target once, so a ratio between two targets
/// compares runs made close together; a failure is reported once.
#[test]
fn runs_are_passes_over_every_target() {
    let out = bench(&[
        "--target",
        "echo,baton",
        "--spawn",
        "/bin/true",
        "--runs",
        "2",
        "--scenario",
        "uncontended",
        "--clients",
        "1",
        "--warmup",
        "0.1",
        "--duration",
        "0.2",
    ]);
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    let at = |what: &str| {
        stderr
            .find(what)
            .unwrap_or_else(|| panic!("no {what:?} in:\n{stderr}"))
    };
    let first = at("echo uncontended C=1 depth=1 run 1/2");
    let failed = at("baton failed:");
    let second = at("echo uncontended C=1 depth=1 run 2/2");
    assert!(first < failed && failed < second, "{stderr}");
    let reported = stderr.matches("baton-bench: baton: ").count();
    assert_eq!(reported, 1, "{stderr}");
}

#[test]
fn nothing_but_loopback() {
    let out = bench(&["--smoke", "--addr", "192.0.2.1:7411"]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("not a loopback address"));
}

#[test]
fn the_floor_is_measured_quickly_and_reported_everywhere() {
    let dir = std::env::temp_dir().join(format!("baton-bench-floor-cmd-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let markdown = dir.join("results.md");
    let started = Instant::now();
    let out = bench(&[
        "--target",
        "echo",
        "--scenario",
        "uncontended",
        "--warmup",
        "0",
        "--duration",
        "0.1",
        "--runs",
        "1",
        "--floor",
        "on",
        "--work-dir",
        dir.to_str().unwrap(),
        "--markdown",
        markdown.to_str().unwrap(),
    ]);
    let elapsed = started.elapsed();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    // The floor itself is bounded at about 1.3 s; the rest is start-up.
    assert!(elapsed < Duration::from_secs(10), "{elapsed:?}");
    let floor: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("# floor: "))
        .collect();
    assert_eq!(floor.len(), 5, "{stdout}");
    assert!(floor[0].contains("fdatasync"), "{stdout}");
    assert!(floor[4].contains("cycles/s at C=1"), "{stdout}");
    let doc = std::fs::read_to_string(&markdown).unwrap();
    assert!(doc.contains("### Floor\n"), "{doc}");
    assert!(doc.contains("| durable commit | "), "{doc}");
    assert!(doc.contains("### Goals of issue 14\n"), "{doc}");
    // Only the Markdown is left: the probe's file went with its directory.
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    assert_eq!(left, ["results.md"], "{left:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// etcd x3 for real, where etcd is installed (run.sh installs it; CI's
/// smoke does not need it).
#[cfg(feature = "etcd")]
#[test]
fn etcd_as_three_members_serves_locks_and_leaves_nothing_behind() {
    let installed = Command::new("etcd").arg("--version").output();
    if !installed.is_ok_and(|out| out.status.success()) {
        eprintln!("etcd is not installed: nothing to check");
        return;
    }
    let dir = std::env::temp_dir().join(format!("baton-bench-etcd3-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pids = dir.join("pids");
    let out = bench(&[
        "--target",
        "etcd-cluster",
        "--scenario",
        "uncontended,contended",
        "--clients",
        "2",
        "--warmup",
        "0",
        "--duration",
        "0.3",
        "--runs",
        "1",
        "--work-dir",
        dir.to_str().unwrap(),
        "--pid-file",
        pids.to_str().unwrap(),
    ]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let rows: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("etcd-cluster "))
        .collect();
    assert_eq!(rows.len(), 2, "{stdout}");
    let started: Vec<u32> = std::fs::read_to_string(&pids)
        .unwrap()
        .lines()
        .map(|pid| pid.parse().unwrap())
        .collect();
    assert_eq!(started.len(), 3, "three members: {started:?}");
    for pid in started {
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "member {pid} still running"
        );
    }
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    assert_eq!(left, ["pids"], "data left behind: {left:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}
