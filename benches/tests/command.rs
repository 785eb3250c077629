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

#[test]
fn nothing_but_loopback() {
    let out = bench(&["--smoke", "--addr", "192.0.2.1:7411"]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("not a loopback address"));
}
