//! batond's command line: usage errors and start-up failures are one clear
//! line and a non-zero exit, never a panic. (These tests also make
//! `cargo test` build the real binary that the multi-process tests run.)

use std::net::TcpListener;
use std::process::Command;

fn batond() -> Command {
    Command::new(env!("CARGO_BIN_EXE_batond"))
}

#[test]
fn help_lists_the_flags() {
    let out = batond().arg("--help").output().expect("run batond");
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--listen",
        "--max-wait",
        "--max-lease",
        "--max-connections",
        "--max-pending",
    ] {
        assert!(help.contains(flag), "{flag} missing from --help:\n{help}");
    }
}

#[test]
fn a_bad_flag_value_is_a_usage_error() {
    for args in [
        &["--listen", "not-an-address"][..],
        &["--max-wait", "1.2345"],
        &["--max-lease", "-1"],
        &["--max-connections", "many"],
        &["--no-such-flag"],
    ] {
        let out = batond().args(args).output().expect("run batond");
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"));
    }
}

#[test]
fn a_busy_port_is_reported_in_one_line() {
    let taken = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr").to_string();
    let out = batond()
        .args(["--listen", &addr])
        .env("RUST_LOG", "off")
        .output()
        .expect("run batond");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("batond: cannot listen on"), "{stderr}");
}
