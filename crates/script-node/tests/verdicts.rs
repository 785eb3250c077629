//! The scripted node judges: a raw client and adapter, played by this test,
//! pass a scenario by doing what it says and fail it by doing otherwise.
//! (Also: every scenario of the suite is a valid file.)

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

const NODE: &str = env!("CARGO_BIN_EXE_script-node");

fn scenario(text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("s.scn");
    std::fs::write(&path, text).expect("write scenario");
    (dir, path)
}

fn spawn(path: &Path) -> (Child, BufReader<std::process::ChildStdout>) {
    let mut child = Command::new(NODE)
        .arg(path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("script-node runs");
    let out = BufReader::new(child.stdout.take().expect("stdout"));
    (child, out)
}

fn line(out: &mut BufReader<std::process::ChildStdout>) -> String {
    let mut text = String::new();
    out.read_line(&mut text).expect("read");
    text.trim_end().to_owned()
}

const CONNECT: &str = "checks a test\nnode a\ndo 0 connect servers=$a\nexpect-connect as=c\n\
                       expect A k 0..5 30\nreply A k 7\noutcome 0 granted 7\n";

/// Plays CONNECT: sends `request` as the client, reports `outcome`; the
/// verdict line and the exit status.
fn play(request: &str, outcome: &str) -> (String, Option<i32>) {
    let (_dir, path) = scenario(CONNECT);
    let (mut child, mut out) = spawn(&path);
    let order = line(&mut out);
    let addr = order
        .strip_prefix("do 0 connect servers=")
        .unwrap_or_else(|| panic!("order: {order}"));
    let mut client = TcpStream::connect(addr).expect("connect");
    client.write_all(b"S\n").expect("write S");
    let mut answers = BufReader::new(client.try_clone().expect("clone"));
    let mut status = String::new();
    answers.read_line(&mut status).expect("S answer");
    assert!(status.starts_with("S role=single"), "{status}");
    client.write_all(request.as_bytes()).expect("write");
    let mut stdin = child.stdin.take().expect("stdin");
    if request.starts_with("A k 5 30") {
        let mut granted = String::new();
        answers.read_line(&mut granted).expect("A answer");
        assert_eq!(granted, "A k 7\n");
    }
    writeln!(stdin, "done 0 {outcome}").expect("report");
    let verdict = line(&mut out);
    let mut transcript = String::new();
    if let Some(mut err) = child.stderr.take() {
        let _ = err.read_to_string(&mut transcript);
    }
    let status = child.wait().expect("exit").code();
    println!("{transcript}");
    (verdict, status)
}

#[test]
fn doing_what_the_scenario_says_passes() {
    assert_eq!(
        play("A k 5 30\n", "granted 7"),
        ("verdict pass".into(), Some(0))
    );
}

#[test]
fn a_wrong_outcome_fails_naming_it() {
    let (verdict, status) = play("A k 5 30\n", "granted 8");
    assert!(
        verdict.contains("ended `granted 8`, expected `granted 7`"),
        "{verdict}"
    );
    assert_eq!(status, Some(1));
}

#[test]
fn a_malformed_request_fails_whatever_the_step() {
    let (verdict, status) = play("A  k 5 30\n", "granted 7");
    assert!(
        verdict.contains("malformed request `A  k 5 30`"),
        "{verdict}"
    );
    assert_eq!(status, Some(1));
}

#[test]
fn a_line_over_1024_bytes_fails() {
    let long = format!("Q {}\n", "x".repeat(1100));
    let (verdict, status) = play(&long, "granted 7");
    assert!(verdict.contains("over the protocol's 1024"), "{verdict}");
    assert_eq!(status, Some(1));
}

#[test]
fn every_scenario_of_the_suite_is_a_valid_file() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/client-behaviour");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("scenario directory")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "scn"))
        .collect();
    files.sort();
    assert!(files.len() >= 10, "{files:?}");
    let out = Command::new(NODE)
        .arg("--check")
        .args(&files)
        .output()
        .expect("runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
