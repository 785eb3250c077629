//! What the `baton` binary's tests share: running it, reading its output,
//! polling.

#![allow(dead_code)] // each test binary uses its own part

use std::process::{Command, Output};
use std::time::{Duration, Instant};

pub const BATON: &str = env!("CARGO_BIN_EXE_baton");

/// Runs `baton` with `BATON_SERVERS=servers` and `args`.
pub fn baton(servers: &str, args: &[&str]) -> Output {
    Command::new(BATON)
        .env("BATON_SERVERS", servers)
        .env_remove("BATON_HTTP")
        .env_remove("BATON_USER")
        .env_remove("BATON_SECRET")
        .args(args)
        .output()
        .expect("run baton")
}

/// [`baton`], killed if it runs past `within` (its output then has no
/// exit code), and how long it ran.
pub fn baton_within(servers: &str, args: &[&str], within: Duration) -> (Output, Duration) {
    let started = Instant::now();
    let mut child = Command::new(BATON)
        .env("BATON_SERVERS", servers)
        .env_remove("BATON_HTTP")
        .env_remove("BATON_USER")
        .env_remove("BATON_SECRET")
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run baton");
    while child.try_wait().expect("poll baton").is_none() && started.elapsed() < within {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let out = child.wait_with_output().expect("baton output");
    (out, started.elapsed())
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Asserts the exit code, and that an error is one plain `baton: ` line.
pub fn expect_code(out: &Output, code: i32) {
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
    }
}

/// Polls `check` every 20 ms until it holds; panics after `within`.
pub fn poll(within: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !check() {
        assert!(Instant::now() < deadline, "not within {within:?}: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The `lease=` seconds `baton inspect` shows for a held key.
pub fn lease_left(servers: &str, key: &str) -> f64 {
    let out = baton(servers, &["inspect", key]);
    expect_code(&out, 0);
    let shown = stdout(&out);
    let lease = shown
        .split_whitespace()
        .find_map(|f| f.strip_prefix("lease="))
        .expect("a lease field");
    lease
        .parse()
        .unwrap_or_else(|_| panic!("not held: {shown}"))
}
