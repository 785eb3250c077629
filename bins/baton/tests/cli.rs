//! The `baton` binary against a real node: output, exit codes, `run`.

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use baton_tests::Batond;

const BATON: &str = env!("CARGO_BIN_EXE_baton");

fn baton(servers: &str, args: &[&str]) -> Output {
    Command::new(BATON)
        .env("BATON_SERVERS", servers)
        .args(args)
        .output()
        .unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Asserts the exit code, and that an error is one plain line.
fn expect_code(out: &Output, code: i32) {
    assert_eq!(
        out.status.code(),
        Some(code),
        "stdout {:?} stderr {:?}",
        stdout(out),
        stderr(out)
    );
    if code != 0 && code != 2 {
        let err = stderr(out);
        assert_eq!(err.lines().count(), 1, "one line expected: {err:?}");
        assert!(err.starts_with("baton: "), "{err:?}");
        assert!(
            !err.contains("Error {") && !err.contains("Some("),
            "debug dump: {err:?}"
        );
    }
}

#[test]
fn acquire_release_renew_and_their_exit_codes() {
    let node = Batond::start(&[]);
    let servers = node.addr().to_string();

    let out = baton(
        &servers,
        &["acquire", "cli/a", "--wait", "2", "--lease", "30"],
    );
    expect_code(&out, 0);
    let token: u64 = stdout(&out).trim().parse().unwrap();
    assert!(token > 0);

    // The lock outlives the command: a second acquire times out (3).
    let out = baton(&servers, &["acquire", "cli/a", "--wait", "0.2"]);
    expect_code(&out, 3);

    let token = token.to_string();
    expect_code(
        &baton(&servers, &["renew", "cli/a", &token, "--lease", "20"]),
        0,
    );
    expect_code(&baton(&servers, &["release", "cli/a", &token]), 0);
    // Not held any more (6), for release and renew alike.
    expect_code(&baton(&servers, &["release", "cli/a", &token]), 6);
    expect_code(
        &baton(&servers, &["renew", "cli/a", &token, "--lease", "5"]),
        6,
    );

    // Beyond the node's limit: rejected (5).
    expect_code(
        &baton(&servers, &["acquire", "cli/a", "--lease", "999999"]),
        5,
    );
}

#[test]
fn usage_errors_exit_2() {
    let node = Batond::start(&[]);
    let servers = node.addr().to_string();
    for args in [
        &["acquire"][..],
        &["acquire", "k", "--wait", "1.2345"],
        &["acquire", "k", "--lease", "0"],
        &["acquire", "has space"],
        &["release", "k", "notanumber"],
        // renew's lease defaults to 30 s: its token is what it cannot do
        // without.
        &["renew", "k"],
        &["renew", "k", "1", "--lease", "5x"],
        &["run", "k"],
        &["frobnicate"],
    ] {
        let out = baton(&servers, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
    }
}

#[test]
fn a_malformed_server_address_is_a_usage_error_naming_it() {
    for (servers, bad) in [
        ("a..b:7411", "a..b:7411"),
        ("bogus", "bogus"),
        ("127.0.0.1:7411,a..b:7411", "a..b:7411"),
    ] {
        let out = baton(servers, &["acquire", "k", "--wait", "1"]);
        assert_eq!(out.status.code(), Some(2), "{servers}: {}", stderr(&out));
        let said = stderr(&out);
        assert!(
            said.starts_with("baton: invalid server address: ")
                && said.contains(&format!("{bad:?}"))
                && said.lines().count() == 1,
            "{said}"
        );
    }
    // No port, no host, a port that is not one, nothing, an address past
    // the protocol's length, more addresses than any cluster has.
    let long = format!("{}:7411", "a".repeat(300));
    let many: Vec<String> = (0..65).map(|i| format!("127.0.0.1:{}", 1000 + i)).collect();
    let many = many.join(",");
    for servers in ["bogus", ":7411", "host:notaport", "", " , ", &long, &many] {
        let out = baton(servers, &["acquire", "k", "--try"]);
        let said = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{servers:.40}: {said}");
        assert!(
            said.starts_with("baton: ") && said.lines().count() == 1,
            "{said}"
        );
    }
}

#[test]
fn help_documents_the_exit_codes() {
    let out = Command::new(BATON).arg("--help").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let help = stdout(&out);
    for line in [
        "Exit codes:",
        "3  wait timed out",
        "4  no server reachable",
        "2  usage error",
    ] {
        assert!(help.contains(line), "--help lacks {line:?}:\n{help}");
    }
}

#[test]
fn no_server_reachable_exits_4() {
    let nowhere = baton_tests::free_addr().to_string();
    let out = baton(&nowhere, &["acquire", "k", "--wait", "1"]);
    expect_code(&out, 4);
    assert!(stderr(&out).contains("no server reachable"));

    let out = baton(&nowhere, &["status"]);
    assert_eq!(out.status.code(), Some(4));
    let table = stdout(&out);
    assert!(
        table.contains(&nowhere) && table.contains("unreachable"),
        "{table}"
    );
}

#[test]
fn status_shows_every_node_reachable_or_not() {
    let node = Batond::start(&[]);
    let nowhere = baton_tests::free_addr().to_string();
    let servers = format!("{},{nowhere}", node.addr());
    let out = baton(&servers, &["acquire", "st", "--lease", "30"]);
    expect_code(&out, 0);
    // A node's tokens start above the wall clock: the one just granted.
    let token = stdout(&out).trim().to_owned();

    let out = baton(&servers, &["status"]);
    expect_code(&out, 0);
    let table = stdout(&out);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 3, "{table}");
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(
        header,
        ["ADDRESS", "ROLE", "ACTIVE", "TOKEN", "LOCKS", "WAITERS"]
    );
    let up: Vec<&str> = lines[1].split_whitespace().collect();
    let addr = node.addr().to_string();
    assert_eq!(
        up,
        [
            addr.as_str(),
            "single",
            addr.as_str(),
            token.as_str(),
            "1",
            "0"
        ],
        "{table}"
    );
    let down: Vec<&str> = lines[2].split_whitespace().collect();
    assert_eq!(down[..2], [nowhere.as_str(), "unreachable"], "{table}");
    // Why, on stderr: the table has no room for it.
    assert_eq!(
        stderr(&out),
        format!("baton: cannot reach {nowhere}: connection refused\n")
    );
}

#[test]
fn servers_flag_overrides_the_environment() {
    let node = Batond::start(&[]);
    let nowhere = baton_tests::free_addr().to_string();
    let out = Command::new(BATON)
        .env("BATON_SERVERS", &nowhere)
        .args(["--servers", &node.addr().to_string(), "acquire", "flag"])
        .output()
        .unwrap();
    expect_code(&out, 0);
}

#[test]
fn run_gives_the_command_its_token_and_exits_with_its_status() {
    let node = Batond::start(&[]);
    let servers = node.addr().to_string();

    let out = baton(
        &servers,
        &["run", "job", "--", "sh", "-c", r#"test -n "$BATON_TOKEN""#],
    );
    expect_code(&out, 0);

    let script = r#"test "$BATON_KEY" = job && echo "token=$BATON_TOKEN"; exit 42"#;
    let out = baton(
        &servers,
        &["run", "job", "--wait", "5", "--", "sh", "-c", script],
    );
    assert_eq!(out.status.code(), Some(42), "{}", stderr(&out));
    let token: u64 = stdout(&out)
        .trim()
        .strip_prefix("token=")
        .unwrap()
        .parse()
        .unwrap();
    assert!(token > 0);

    // Released at the end: the lock is free again at once.
    let out = baton(&servers, &["acquire", "job", "--wait", "1"]);
    expect_code(&out, 0);
    let holder = stdout(&out).trim().to_owned();
    // Held: `run` waits, then times out like acquire (3) without running.
    let out = baton(
        &servers,
        &["run", "job", "--wait", "0.2", "--", "sh", "-c", "echo ran"],
    );
    expect_code(&out, 3);
    assert_eq!(stdout(&out), "");
    expect_code(&baton(&servers, &["release", "job", &holder]), 0);
}

#[test]
fn run_holds_the_lock_and_renews_it_while_the_command_runs() {
    let node = Batond::start(&[]);
    let servers = node.addr().to_string();
    // A 1 s lease, a 2.5 s command: only renewal keeps others out; inside,
    // another acquire of the same key must time out.
    let script = format!(r#"sleep 2.5; "{BATON}" acquire "$BATON_KEY" --wait 0.3; test $? -eq 3"#);
    let out = baton(
        &servers,
        &["run", "renewed", "--lease", "1", "--", "sh", "-c", &script],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn run_terminates_the_command_when_the_lease_is_lost() {
    let node = Batond::start(&[]);
    let servers = node.addr().to_string();
    // The command ends its own grant behind baton's back; the next renewal
    // is answered `N K`. `exec` so that the signal reaches the sleep itself
    // (a shell would leave it running, holding the output pipe open).
    let script = format!(r#""{BATON}" release "$BATON_KEY" "$BATON_TOKEN" && exec sleep 30"#);
    let started = Instant::now();
    let out = baton(
        &servers,
        &["run", "lost", "--lease", "0.6", "--", "sh", "-c", &script],
    );
    expect_code(&out, 7);
    assert!(stderr(&out).contains("lost"), "{}", stderr(&out));
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the command was not terminated"
    );
}

#[test]
fn run_reports_a_command_that_cannot_start() {
    let node = Batond::start(&[]);
    let servers = node.addr().to_string();
    let out = baton(&servers, &["run", "nocmd", "--", "/nonexistent/command"]);
    expect_code(&out, 127);
    // And the lock was given back.
    expect_code(&baton(&servers, &["acquire", "nocmd", "--wait", "1"]), 0);
}

#[test]
fn inspect_shows_the_holder_and_force_release_breaks_the_lock() {
    let node = Batond::start(&[]);
    let servers = node.addr().to_string();
    let out = baton(&servers, &["inspect", "cli/q"]);
    expect_code(&out, 0);
    assert_eq!(stdout(&out), "cli/q token=- lease=- waiters=0\n");
    let out = baton(&servers, &["acquire", "cli/q", "--lease", "30"]);
    expect_code(&out, 0);
    let token: u64 = stdout(&out).trim().parse().unwrap();
    let out = baton(&servers, &["inspect", "cli/q"]);
    expect_code(&out, 0);
    let shown = stdout(&out);
    assert!(
        shown.starts_with(&format!("cli/q token={token} lease="))
            && shown.ends_with(" waiters=0\n"),
        "{shown:?}"
    );
    let out = baton(&servers, &["inspect", "cli/q", "--json"]);
    expect_code(&out, 0);
    // The token is a JSON string: tokens pass 2^53, where `jq` rounds a number.
    let shown: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(shown["key"], "cli/q", "{shown}");
    assert_eq!(shown["held"], true, "{shown}");
    assert_eq!(shown["token"], token.to_string(), "{shown}");
    assert_eq!(shown["waiters"], 0, "{shown}");
    // Not on a terminal (the test's stdin is not one): --yes is needed.
    let out = baton(&servers, &["force-release", "cli/q"]);
    expect_code(&out, 2);
    assert!(stderr(&out).contains("--yes"), "{}", stderr(&out));
    let out = baton(&servers, &["force-release", "cli/q", "--yes"]);
    expect_code(&out, 0);
    assert_eq!(stdout(&out), format!("released cli/q (token {token})\n"));
    let out = baton(&servers, &["force-release", "cli/q", "--yes"]);
    expect_code(&out, 6);
    let out = baton(&servers, &["inspect", "cli/q"]);
    assert_eq!(stdout(&out), "cli/q token=- lease=- waiters=0\n");
}

#[test]
fn completions_and_man_page_come_from_the_command_line() {
    // No node is needed: the address below is never dialled.
    for shell in ["bash", "zsh", "fish"] {
        let out = baton("127.0.0.1:1", &["completions", shell]);
        expect_code(&out, 0);
        let script = stdout(&out);
        for word in ["force-release", "servers", "lease", "inspect"] {
            assert!(script.contains(word), "{shell}: no {word}: {script}");
        }
    }
    let out = baton("127.0.0.1:1", &["completions", "tcsh"]);
    expect_code(&out, 2);
    let out = baton("127.0.0.1:1", &["man"]);
    expect_code(&out, 0);
    let page = stdout(&out);
    assert!(
        page.starts_with(".ie") || page.contains(".TH baton"),
        "{page}"
    );
    assert!(page.contains(".TH baton 1"), "{page}");
    assert!(page.contains("force\\-release"), "{page}");
    let out = baton("127.0.0.1:1", &["--version"]);
    expect_code(&out, 0);
    assert_eq!(
        stdout(&out),
        format!("baton {}\n", env!("CARGO_PKG_VERSION"))
    );
}
