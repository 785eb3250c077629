//! What the Raft membership tests share: the `/v1/members` calls, a node
//! that joins, the `baton` CLI, and reading a node's table and log.

#![allow(dead_code)] // each test file uses its own subset

use std::net::SocketAddr;
use std::time::Duration;

use baton_tests::cluster::{field, probe_status};
use baton_tests::http::{http_send, HttpReply};
use baton_tests::Batond;
use serde_json::Value;
use tokio::time::Instant;

pub fn json(reply: &HttpReply) -> Value {
    serde_json::from_str(&reply.body).unwrap_or_else(|e| panic!("{e}: {reply:?}"))
}

pub fn http_args(addr: SocketAddr) -> Vec<String> {
    vec!["--http-listen".into(), addr.to_string()]
}

/// The members' addresses and `voter`/`learner`, sorted.
pub fn members(reply: &HttpReply) -> Vec<(String, String)> {
    let body = json(reply);
    let mut out: Vec<(String, String)> = body["members"]
        .as_array()
        .unwrap_or_else(|| panic!("no members: {body}"))
        .iter()
        .map(|m| {
            (
                m["addr"].as_str().unwrap_or_default().to_string(),
                m["membership"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    out.sort();
    out
}

/// `POST /v1/members` until the node votes (202 while it catches up).
pub async fn add_member(http: SocketAddr, addr: SocketAddr) -> HttpReply {
    let body = format!("{{\"addr\": \"{addr}\"}}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let reply = http_send(http, "POST", "/v1/members", Some(&body)).await;
        if reply.code != 202 || Instant::now() >= deadline {
            return reply;
        }
    }
}

/// `DELETE /v1/members/<addr>`.
pub async fn remove_member(http: SocketAddr, addr: SocketAddr) -> HttpReply {
    http_send(http, "DELETE", &format!("/v1/members/{addr}"), None).await
}

/// A node that joins the running cluster at `addr` on `data_dir`.
pub fn start_joining(addr: SocketAddr, data_dir: &std::path::Path, http: SocketAddr) -> Batond {
    let data = data_dir.to_string_lossy().into_owned();
    let http = http.to_string();
    Batond::start_at(
        addr,
        &[
            "--mode",
            "raft",
            "--join",
            "--data-dir",
            &data,
            "--http-listen",
            &http,
        ],
    )
}

pub fn wipe(dir: &std::path::Path) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{e}")) {
        let path = entry.unwrap_or_else(|e| panic!("{e}")).path();
        let removed = if path.is_dir() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        removed.unwrap_or_else(|e| panic!("cannot remove {}: {e}", path.display()));
    }
}

/// Polls `S` on `addr` until it shows `locks` grants and a token of at
/// least `token`: the node holds the table.
pub async fn wait_holds(addr: SocketAddr, locks: u64, token: u64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let status = probe_status(addr, Duration::from_millis(500)).await;
        if let Some(status) = &status {
            let held = field(status, "locks").parse::<u64>().ok();
            let seen = field(status, "token").parse::<u64>().ok();
            if held == Some(locks) && seen.is_some_and(|t| t >= token) {
                return;
            }
        }
        assert!(
            Instant::now() < deadline,
            "{addr} does not hold {locks} locks up to token {token}: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Runs the `baton` CLI: its exit code, stdout and stderr.
pub async fn baton(args: &[&str]) -> (Option<i32>, String, String) {
    let output = tokio::process::Command::new(baton_tests::binary::baton_bin())
        .args(args)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(60), output)
        .await
        .expect("baton finishes")
        .expect("baton runs");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Lines of `node`'s log that contain `text`.
pub fn log_lines(node: &Batond, text: &str) -> Vec<String> {
    node.log_tail(100_000)
        .lines()
        .filter(|l| l.contains(text))
        .map(str::to_string)
        .collect()
}
