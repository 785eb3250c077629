//! A node whose standard output nobody reads any more (a script that read
//! what it wanted and closed the pipe) still serves: writing its
//! `listening` lines into a closed pipe must not take it down, and a node
//! whose standard error is closed still exits with its documented code.

use std::process::{Command, Stdio};
use std::time::Duration;

use baton_tests::{batond_bin, free_addr, LineClient};

/// Longest a node may take to start listening on a loaded machine.
const START_WITHIN: Duration = Duration::from_secs(10);

#[tokio::test]
async fn a_node_whose_stdout_was_closed_still_serves() {
    let addr = free_addr();
    let mut child = Command::new(batond_bin())
        .args([
            "--listen",
            &addr.to_string(),
            "--http-listen",
            "127.0.0.1:0",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn batond");
    // The reader goes away before the node has written anything.
    drop(child.stdout.take());
    let deadline = tokio::time::Instant::now() + START_WITHIN;
    let mut client = loop {
        if let Some(status) = child.try_wait().expect("poll batond") {
            panic!("batond exited ({status}) after its stdout was closed");
        }
        if let Ok(client) = LineClient::try_connect(addr).await {
            break client;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "batond does not listen on {addr} after {START_WITHIN:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let answer = client.request("A k 0 10").await;
    assert!(answer.starts_with("A k "), "{answer}");
    // The line was written after the listener was bound: a node that died
    // of it is gone by the time it answered.
    let answer = client.request("S").await;
    assert!(answer.starts_with("S "), "{answer}");
    assert!(
        child.try_wait().expect("poll batond").is_none(),
        "batond exited after its stdout was closed"
    );
    child.kill().expect("kill batond");
    child.wait().expect("reap batond");
}

#[test]
fn a_refused_start_with_stderr_closed_still_exits_2() {
    let mut child = Command::new(batond_bin())
        .args([
            "--listen",
            &free_addr().to_string(),
            "--http-listen",
            "nowhere",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn batond");
    drop(child.stderr.take());
    let status = child.wait().expect("reap batond");
    assert_eq!(status.code(), Some(2), "{status}");
}
