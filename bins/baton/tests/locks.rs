//! `baton locks [PREFIX]` against real nodes with `--http-listen`: the
//! table and `--json`, the prefix, `--limit`, paging past one page of
//! the endpoint, finding the endpoint through `S`'s `http=`, and the
//! admin rule of `--auth-file`.

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test

#[path = "../../../tests/tests/auth_support/mod.rs"]
mod auth_support;
mod common;

use std::process::Command;

use baton_tests::{free_addr, Batond};
use common::{baton, expect_code, stderr, stdout, BATON};
use serde_json::Value;

fn acquire(servers: &str, key: &str) -> String {
    let out = baton(servers, &["acquire", key]);
    expect_code(&out, 0);
    stdout(&out).trim().to_owned()
}

fn json_locks(out: &std::process::Output) -> Vec<Value> {
    expect_code(out, 0);
    let value: Value = serde_json::from_str(&stdout(out)).unwrap();
    value.as_array().unwrap().clone()
}

#[test]
fn locks_lists_a_table_or_json_by_prefix_and_limit() {
    let http = free_addr().to_string();
    let node = Batond::start(&["--http-listen", &http]);
    let servers = node.addr().to_string();
    let a = acquire(&servers, "jobs/a");
    let _b = acquire(&servers, "jobs/b");
    let _c = acquire(&servers, "other/c");
    // A waiter on jobs/a, in the background (it times out later).
    let mut waiter = Command::new(BATON)
        .env("BATON_SERVERS", &servers)
        .args(["acquire", "jobs/a", "--wait", "20"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    common::poll(
        std::time::Duration::from_secs(10),
        "the waiter queued",
        || stdout(&baton(&servers, &["inspect", "jobs/a"])).ends_with("waiters=1\n"),
    );

    let out = baton(&servers, &["locks", "--http", &http]);
    expect_code(&out, 0);
    let rows: Vec<Vec<String>> = stdout(&out)
        .lines()
        .map(|l| l.split_whitespace().map(str::to_owned).collect())
        .collect();
    assert_eq!(
        rows[0],
        ["KEY", "TOKEN", "LEASE", "WAITERS", "PERMITS", "MODE", "HOLDERS"]
    );
    let keys: Vec<&str> = rows[1..].iter().map(|r| r[0].as_str()).collect();
    assert_eq!(keys, ["jobs/a", "jobs/b", "other/c"], "{}", stdout(&out));
    assert_eq!(rows[1][1], a);
    let lease: f64 = rows[1][2].parse().unwrap();
    assert!(lease > 20.0 && lease <= 30.0, "{lease}");
    assert_eq!(rows[1][3], "1");

    // Found through S without --http; the prefix and the JSON.
    let locks = json_locks(&baton(&servers, &["locks", "jobs/", "--json"]));
    assert_eq!(locks.len(), 2, "{locks:?}");
    assert_eq!(locks[0]["key"], "jobs/a");
    assert_eq!(locks[0]["token"], a.as_str());
    assert_eq!(locks[0]["waiters"], 1);
    assert!(locks[0]["lease_left_ms"].as_u64().unwrap() <= 30_000);
    let locks = json_locks(&baton(&servers, &["locks", "--limit", "1", "--json"]));
    assert_eq!(locks.len(), 1);
    assert_eq!(locks[0]["key"], "jobs/a");
    // A prefix that needs escaping, and one that matches nothing.
    acquire(&servers, "sp&ce=x?y#z%");
    let locks = json_locks(&baton(&servers, &["locks", "sp&ce=", "--json"]));
    assert_eq!(locks.len(), 1, "{locks:?}");
    assert_eq!(locks[0]["key"], "sp&ce=x?y#z%");
    let out = baton(&servers, &["locks", "nothing/"]);
    expect_code(&out, 0);
    assert_eq!(
        stdout(&out),
        "KEY  TOKEN  LEASE  WAITERS  PERMITS  MODE  HOLDERS\n"
    );
    for bad in ["0", "-1", "x", "1000001"] {
        let flag = format!("--limit={bad}");
        let out = baton(&servers, &["locks", &flag]);
        assert_eq!(out.status.code(), Some(2), "{bad}: {}", stderr(&out));
    }
    let _ = waiter.kill();
    let _ = waiter.wait();
}

#[tokio::test]
async fn locks_pages_past_one_endpoint_page() {
    let http = free_addr();
    // 0.0.0.0: the CLI dials the host it reached the node at instead.
    let wildcard = format!("0.0.0.0:{}", http.port());
    let node = Batond::start(&["--http-listen", &wildcard]);
    let servers = node.addr().to_string();
    let total = 10_050;
    let mut client = node.connect().await;
    let mut burst = String::new();
    for i in 0..total {
        burst.push_str(&format!("A many/{i:05} 0 60\n"));
    }
    client.send_raw(burst.as_bytes()).await;
    for _ in 0..total {
        let line = client.recv().await;
        assert!(line.starts_with("A many/"), "{line}");
    }
    let servers2 = servers.clone();
    let run = move |args: Vec<String>| {
        let servers = servers2.clone();
        std::thread::spawn(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            baton(&servers, &args)
        })
        .join()
        .unwrap()
    };
    let locks = json_locks(&run(vec![
        "locks".into(),
        "--json".into(),
        "--limit".into(),
        "20000".into(),
    ]));
    assert_eq!(locks.len(), total);
    let keys: Vec<String> = locks
        .iter()
        .map(|l| l["key"].as_str().unwrap().to_owned())
        .collect();
    let mut sorted = keys.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted, keys, "in key order, each once");
    let locks = json_locks(&run(vec![
        "locks".into(),
        "many/1".into(),
        "--json".into(),
        "--limit".into(),
        "10010".into(),
    ]));
    assert_eq!(locks.len(), 50);
    let locks = json_locks(&run(vec![
        "locks".into(),
        "--json".into(),
        "--limit".into(),
        "10003".into(),
    ]));
    assert_eq!(locks.len(), 10_003);
    assert_eq!(locks[10_002]["key"], "many/10002");
}

#[test]
fn a_node_without_an_http_endpoint_says_how_to_get_one() {
    let node = Batond::start(&[]);
    let servers = node.addr().to_string();
    let out = baton(&servers, &["locks"]);
    expect_code(&out, 1);
    assert_eq!(
        stderr(&out),
        format!("baton: {servers} has no HTTP endpoint: start batond with --http-listen, or pass --http\n")
    );
    let nowhere = free_addr().to_string();
    let out = baton(&servers, &["locks", "--http", &nowhere]);
    expect_code(&out, 4);
    assert_eq!(
        stderr(&out),
        format!("baton: cannot reach the HTTP endpoint {nowhere}: connection refused\n")
    );
    let out = baton(&nowhere, &["locks"]);
    expect_code(&out, 4);
    assert!(stderr(&out).contains(&format!("cannot reach {nowhere}: connection refused")));
}

#[test]
fn with_an_auth_file_locks_needs_an_admin() {
    let http = free_addr().to_string();
    let (node, _users, _dir) = auth_support::node_with_users(&["--http-listen", &http]);
    let servers = node.addr().to_string();
    let dir = tempfile::tempdir().unwrap();
    let secret = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, format!("{text}\n")).unwrap();
        path.to_str().unwrap().to_owned()
    };
    let ops = secret("ops", auth_support::OPS_SECRET);
    let billing = secret("billing", auth_support::BILLING_SECRET);
    let wrong = secret("wrong", "not-it");

    // Without credentials, whether the endpoint is given or found through
    // S (which the node refuses too): authentication, exit 8.
    let out = baton(&servers, &["locks"]);
    expect_code(&out, 8);
    assert!(
        stderr(&out).contains("requires authentication"),
        "{}",
        stderr(&out)
    );
    // status: the table still, each node's reason below it, exit 8.
    let nowhere = free_addr().to_string();
    let out = baton(&format!("{servers},{nowhere}"), &["status"]);
    assert_eq!(out.status.code(), Some(8), "{}", stderr(&out));
    let rows: Vec<String> = stdout(&out).lines().skip(1).map(str::to_owned).collect();
    assert_eq!(rows.len(), 2, "{}", stdout(&out));
    let said = stderr(&out);
    assert!(
        said.contains(&format!("{servers}: the node requires authentication"))
            && said.contains(&format!("cannot reach {nowhere}: connection refused")),
        "{said}"
    );

    // The endpoint's own words, once: not "authentication failed
    // (authentication required ...)".
    let out = baton(&servers, &["locks", "--http", &http]);
    expect_code(&out, 8);
    let said = stderr(&out);
    assert!(
        said.contains("authentication required") && said.matches("authentication").count() == 1,
        "{said}"
    );
    let out = baton(
        &servers,
        &[
            "--user",
            "ops",
            "--secret-file",
            &wrong,
            "locks",
            "--http",
            &http,
        ],
    );
    expect_code(&out, 8);
    let said = stderr(&out);
    assert!(
        said.contains("authentication failed") && said.matches("authentication").count() == 1,
        "{said}"
    );
    let out = baton(
        &servers,
        &["--user", "billing", "--secret-file", &billing, "locks"],
    );
    expect_code(&out, 9);
    assert!(
        stderr(&out).contains("permission denied") && !stderr(&out).contains("denied: permission"),
        "{}",
        stderr(&out)
    );
    // An admin, the endpoint found through an authenticated S.
    let out = baton(
        &servers,
        &[
            "--user",
            "ops",
            "--secret-file",
            &ops,
            "acquire",
            "billing/x",
        ],
    );
    expect_code(&out, 0);
    let out = baton(
        &servers,
        &["--user", "ops", "--secret-file", &ops, "locks", "--json"],
    );
    let locks = json_locks(&out);
    assert_eq!(locks.len(), 1);
    assert_eq!(locks[0]["key"], "billing/x");
}

#[test]
fn a_node_that_does_not_serve_exits_4_naming_the_serving_node() {
    let https = [free_addr().to_string(), free_addr().to_string()];
    let mut cluster = baton_tests::cluster::Cluster::start_each(2, |i| {
        vec!["--http-listen".to_string(), https[i].clone()]
    });
    let active = cluster.addr(0).to_string();
    let standby = cluster.addr(1).to_string();
    common::poll(std::time::Duration::from_secs(15), "node 0 active", || {
        stdout(&baton(&standby, &["status"])).contains(&format!("standby  {active}"))
    });
    let out = baton(&standby, &["locks", "--http", &https[1]]);
    expect_code(&out, 4);
    let said = stderr(&out);
    assert!(
        said.contains(&format!("the serving node is {active}")),
        "{said}"
    );
    cluster.kill(0);
}
