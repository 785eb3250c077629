//! `batond --http-listen`, black-box with real processes: `/health` in
//! every role (and 503 once a Raft node is cut off from its majority),
//! `/metrics` parsed and moving with the requests, `/v1/locks` with
//! prefix, limit and paging, `/v1/cluster`, and the basic-auth rules.

mod auth_support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use auth_support::{users_toml, write_users, BILLING_SECRET, OPS_SECRET};
use baton_tests::cluster::Cluster;
use baton_tests::http::{http_get, http_raw, try_http_get, HttpReply, Scrape};
use baton_tests::raft::RaftCluster;
use baton_tests::refused::start_refused;
use baton_tests::{free_addr, free_addrs, grant_token, Batond};
use serde_json::Value;

fn json(reply: &HttpReply) -> Value {
    serde_json::from_str(&reply.body).unwrap_or_else(|e| panic!("{e}: {reply:?}"))
}

fn http_args(addr: SocketAddr) -> Vec<String> {
    vec!["--http-listen".to_string(), addr.to_string()]
}

/// Polls `GET path` until `accept` holds, for at most `within`.
async fn wait_http(
    addr: SocketAddr,
    path: &str,
    within: Duration,
    accept: impl Fn(&HttpReply) -> bool,
) -> HttpReply {
    let deadline = Instant::now() + within;
    loop {
        // An endpoint still at its connection limit closes (or resets) a
        // newcomer unanswered: not yet, ask again.
        let reply = try_http_get(addr, path).await;
        if let Ok(reply) = &reply {
            if accept(reply) {
                return reply.clone();
            }
        }
        assert!(
            Instant::now() < deadline,
            "GET {path} on {addr}: not as expected within {within:?}: {reply:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn scrape(addr: SocketAddr) -> Scrape {
    let reply = http_get(addr, "/metrics", None).await;
    assert_eq!(reply.code, 200, "{reply:?}");
    assert!(
        reply
            .header("content-type")
            .is_some_and(|t| t.starts_with("text/plain; version=0.0.4")),
        "{reply:?}"
    );
    Scrape::parse(&reply.body)
}

fn keys(page: &Value) -> Vec<String> {
    page["locks"]
        .as_array()
        .expect("locks")
        .iter()
        .map(|l| l["key"].as_str().expect("key").to_string())
        .collect()
}

#[tokio::test]
async fn a_single_node_is_healthy_and_its_metrics_move_with_the_requests() {
    let http = free_addr();
    let node = Batond::start(&["--http-listen", &http.to_string()]);
    let health = http_get(http, "/health", None).await;
    assert_eq!(health.code, 200, "{health:?}");
    let body = json(&health);
    assert_eq!(
        (
            body["status"].as_str(),
            body["role"].as_str(),
            body["mode"].as_str()
        ),
        (Some("serving"), Some("single"), Some("single"))
    );
    assert_eq!(body["self"], node.addr().to_string());
    assert_eq!(body["active"], node.addr().to_string());
    // The node's release, in /health and as the last field of `S`.
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(body["version"], version);
    let status = node.connect().await.request("S").await;
    assert!(
        status.ends_with(&format!(" http={http} protocol=1.2 version={version}")),
        "{status}"
    );

    let before = scrape(http).await;
    assert_eq!(before.types["baton_requests_total"], "counter");
    assert_eq!(before.types["baton_acquire_wait_seconds"], "histogram");
    assert_eq!(before.types["baton_locks_held"], "gauge");
    let mut c = node.connect().await;
    let t1 = grant_token(&c.request("A k 0 30").await, "k");
    c.send("A k 0.2 30").await; // queues, then times out
    assert_eq!(c.recv().await, "T k");
    c.send("A k 0 30").await; // queues, then gets the key at the release
    let _ = wait_scrape(http, |m| m.get("baton_waiters_queued") == 1.0).await;
    // Queued by now, and granted only after the release below: its wait
    // covers at least this stretch. (Timed from the send instead, the
    // bound failed on a loaded machine: the node queued the request some
    // milliseconds after the test had sent it.)
    let seen_queued = Instant::now();
    tokio::time::sleep(Duration::from_millis(30)).await;
    let waited = seen_queued.elapsed().as_secs_f64();
    assert_eq!(c.request(&format!("R k {t1}")).await, "R k");
    let t2 = grant_token(&c.recv().await, "k");
    assert_eq!(c.request(&format!("K k {t2} 60")).await, "K k");
    assert_eq!(c.request("R k 1").await, "N R k");
    assert!(c.request("S").await.starts_with("S "));
    let _short = grant_token(&c.request("A short 0 0.1").await, "short");

    let m = wait_scrape(http, |m| m.get("baton_expiries_total") >= 1.0).await;
    assert_eq!(m.get("baton_requests_total{op=\"acquire\"}"), 4.0);
    assert_eq!(m.get("baton_requests_total{op=\"release\"}"), 2.0);
    assert_eq!(m.get("baton_requests_total{op=\"renew\"}"), 1.0);
    // The test kit asks S too.
    assert!(m.get("baton_requests_total{op=\"status\"}") >= 1.0);
    assert_eq!(m.get("baton_grants_total"), 3.0);
    assert_eq!(m.get("baton_releases_total"), 1.0);
    assert_eq!(m.get("baton_renewals_total"), 1.0);
    assert_eq!(m.get("baton_wait_timeouts_total"), 1.0);
    assert_eq!(m.get("baton_errors_total{reason=\"not_held\"}"), 1.0);
    assert_eq!(m.get("baton_expiries_total"), 1.0);
    assert_eq!(m.get("baton_locks_held"), 1.0, "k is held, short expired");
    assert_eq!(m.get("baton_waiters_queued"), 0.0);
    assert_eq!(m.get("baton_acquire_wait_seconds_count"), 3.0);
    // The waiter waited at least while the test saw it queued (ms resolution).
    let sum = m.get("baton_acquire_wait_seconds_sum");
    assert!(sum + 0.002 >= waited, "{sum} s < {waited} s");
    assert_eq!(m.get("baton_acquire_wait_seconds_bucket{le=\"+Inf\"}"), 3.0);
    // k's first grant, released, and short's, expired (at its lease's end).
    assert_eq!(m.get("baton_hold_seconds_count"), 2.0);
    assert_eq!(m.get("baton_handover_seconds_count"), 1.0);
    assert_eq!(m.get("baton_role{role=\"single\"}"), 1.0);
    assert_eq!(m.get("baton_last_token"), t2.max(t1) as f64 + 1.0);
    // What the connection code answers itself: a malformed line, a U
    // where authentication is not enabled, and the connections.
    assert!(c.request("A k 0 0").await.starts_with("E A k "));
    assert!(c
        .request("U someone s3cret")
        .await
        .starts_with("E U someone "));
    let m = scrape(http).await;
    assert_eq!(m.get("baton_errors_total{reason=\"malformed\"}"), 1.0);
    assert_eq!(m.get("baton_requests_total{op=\"authenticate\"}"), 1.0);
    assert!(m.get("baton_connections_open") >= 1.0, "c is open");
    assert!(m.get("baton_connections_total") >= 1.0);
    drop(c);
    let _ = wait_scrape(http, |m| m.get("baton_connections_open") == 0.0).await;
}

async fn wait_scrape(http: SocketAddr, accept: impl Fn(&Scrape) -> bool) -> Scrape {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let m = scrape(http).await;
        if accept(&m) {
            return m;
        }
        assert!(
            Instant::now() < deadline,
            "metrics never as expected: {:?}",
            m.samples
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn held_locks_are_listed_by_key_with_prefix_limit_and_paging() {
    let http = free_addr();
    let node = Batond::start(&["--http-listen", &http.to_string()]);
    let mut c = node.connect().await;
    let mut tokens = std::collections::HashMap::new();
    for key in ["jobs/3", "jobs/1", "orders/1", "jobs/2", "jobs/10"] {
        tokens.insert(
            key,
            grant_token(&c.request(&format!("A {key} 0 60")).await, key),
        );
    }
    c.send("A jobs/2 0 60").await; // one waiter on jobs/2
    let _ = wait_http(http, "/metrics", Duration::from_secs(5), |r| {
        r.body.contains("baton_waiters_queued 1")
    })
    .await;

    let page = json(&http_get(http, "/v1/locks?prefix=jobs/&limit=3", None).await);
    assert_eq!(keys(&page), ["jobs/1", "jobs/10", "jobs/2"]);
    assert_eq!(page["next"], "jobs/2");
    assert_eq!(page["locks"][0]["token"], tokens["jobs/1"].to_string());
    assert_eq!(page["locks"][2]["waiters"], 1);
    let lease = page["locks"][0]["lease_left_ms"].as_u64().expect("ms");
    assert!(lease > 50_000 && lease <= 60_000, "{lease}");
    let rest = json(&http_get(http, "/v1/locks?prefix=jobs/&limit=3&after=jobs/2", None).await);
    assert_eq!(keys(&rest), ["jobs/3"]);
    assert_eq!(rest["next"], Value::Null);
    let all = json(&http_get(http, "/v1/locks", None).await);
    assert_eq!(
        keys(&all),
        ["jobs/1", "jobs/10", "jobs/2", "jobs/3", "orders/1"]
    );
    for bad in ["/v1/locks?limit=0", "/v1/locks?limit=x", "/v1/locks?what=1"] {
        assert_eq!(http_get(http, bad, None).await.code, 400, "{bad}");
    }
    let capped = http_get(http, "/v1/locks?limit=5000000", None).await;
    assert_eq!(capped.code, 200, "a huge limit is capped, not refused");

    let cluster = json(&http_get(http, "/v1/cluster", None).await);
    assert_eq!(cluster["role"], "single");
    assert_eq!(cluster["locks"], 5);
    assert_eq!(cluster["members"][0]["addr"], node.addr().to_string());
    assert_eq!(http_get(http, "/nowhere", None).await.code, 404);
}

#[tokio::test]
async fn with_an_auth_file_the_v1_routes_need_an_admin_over_basic_auth() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("users.toml");
    write_users(&path, &users_toml());
    let http = free_addr();
    let _node = Batond::start(&[
        "--auth-file",
        path.to_str().expect("utf-8"),
        "--http-listen",
        &http.to_string(),
    ]);
    for route in ["/v1/locks", "/v1/cluster"] {
        let none = http_get(http, route, None).await;
        assert_eq!(none.code, 401, "{none:?}");
        assert!(
            none.header("www-authenticate")
                .is_some_and(|c| c.starts_with("Basic realm=")),
            "{none:?}"
        );
        let wrong = http_get(http, route, Some(("ops", "not-it"))).await;
        assert_eq!(wrong.code, 401, "{wrong:?}");
        assert!(wrong.header("www-authenticate").is_some());
        assert_eq!(
            http_get(http, route, Some(("nobody", OPS_SECRET)))
                .await
                .code,
            401
        );
        assert_eq!(
            http_get(http, route, Some(("billing", BILLING_SECRET)))
                .await
                .code,
            403
        );
        assert_eq!(
            http_get(http, route, Some(("ops", OPS_SECRET))).await.code,
            200
        );
        let garbage = http_raw(http, format!("GET {route} HTTP/1.1\r\nHost: x\r\nAuthorization: Basic %%%\r\nConnection: close\r\n\r\n").as_bytes()).await;
        assert_eq!(garbage.code, 401);
    }
    // Open: they show no key.
    assert_eq!(http_get(http, "/health", None).await.code, 200);
    assert_eq!(http_get(http, "/metrics", None).await.code, 200);
}

#[tokio::test]
async fn every_error_is_json_with_the_status_that_says_why() {
    let http = free_addr();
    let _node = Batond::start(&["--http-listen", &http.to_string()]);
    let too_large = "x".repeat(64 * 1024);
    let cases = [
        ("POST", "/v1/locks", Some(""), 405),
        ("DELETE", "/v1/cluster", Some(""), 405),
        ("GET", "/v1/force-release", None, 405),
        ("PUT", "/metrics", Some(""), 405),
        ("GET", "/v1/locks/nope", None, 404),
        ("GET", "/v1/locks?foo=1", None, 400),
        ("GET", "/v1/locks?limit=-1", None, 400),
        ("POST", "/v1/force-release", Some("{not json"), 400),
        ("POST", "/v1/force-release", Some(r#"{"key": "k"}"#), 400),
        ("POST", "/v1/force-release", Some(too_large.as_str()), 413),
    ];
    for (method, path, body, code) in cases {
        let reply = match body {
            Some(body) => baton_tests::http::http_send(http, method, path, Some(body)).await,
            None => http_get(http, path, None).await,
        };
        assert_eq!(reply.code, code, "{method} {path}: {reply:?}");
        assert_eq!(
            reply.header("content-type"),
            Some("application/json"),
            "{method} {path}: {reply:?}"
        );
        let words = json(&reply)["error"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(!words.is_empty(), "{method} {path}: {reply:?}");
    }
    // Not sent as JSON: 415, in JSON.
    let plain = http_raw(
        http,
        b"POST /v1/force-release HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
    )
    .await;
    assert_eq!(plain.code, 415, "{plain:?}");
    assert!(json(&plain)["error"].is_string(), "{plain:?}");
}

#[tokio::test]
async fn a_priority_active_and_its_standby_are_both_healthy() {
    let http = free_addrs(2).expect("ports");
    let mut cluster = Cluster::start_each(2, |i| http_args(http[i]));
    let active = cluster.wait_single_active(Duration::from_secs(10)).await;
    let standby = 1 - active;
    let a = wait_http(http[active], "/health", Duration::from_secs(5), |r| {
        r.code == 200
    })
    .await;
    assert_eq!(json(&a)["status"], "serving");
    assert_eq!(json(&a)["role"], "active");
    let s = wait_http(http[standby], "/health", Duration::from_secs(5), |r| {
        r.code == 200
    })
    .await;
    let body = json(&s);
    assert_eq!(
        (body["status"].as_str(), body["role"].as_str()),
        (Some("standby"), Some("standby"))
    );
    assert_eq!(body["active"], cluster.addr(active).to_string());
    // The standby lists nothing itself: it names the active.
    let listed = http_get(http[standby], "/v1/locks", None).await;
    assert_eq!(listed.code, 503, "{listed:?}");
    assert_eq!(json(&listed)["active"], cluster.addr(active).to_string());
    let view = json(&http_get(http[standby], "/v1/cluster", None).await);
    let states: Vec<&str> = view["members"]
        .as_array()
        .expect("members")
        .iter()
        .map(|m| m["state"].as_str().expect("state"))
        .collect();
    let mut want = ["standby", "standby"];
    want[active] = "active";
    assert_eq!(states, want);
    // The active dies: the standby takes over and serves.
    cluster.kill(active);
    let taken = wait_http(http[standby], "/health", Duration::from_secs(10), |r| {
        r.body.contains("\"role\":\"active\"")
    })
    .await;
    assert_eq!(taken.code, 200);
    let m = scrape(http[standby]).await;
    assert!(m.get("baton_role_changes_total") >= 1.0);
    assert_eq!(m.get("baton_role{role=\"active\"}"), 1.0);
}

#[tokio::test]
async fn raft_leader_and_followers_are_healthy_and_a_node_cut_off_is_503() {
    let http = free_addrs(3).expect("ports");
    let mut cluster = RaftCluster::start_each(3, |i| http_args(http[i]));
    let (leader, _) = cluster.wait_leader(Duration::from_secs(15)).await;
    let mut client = cluster.client(leader);
    let token = baton_tests::raft::grant(&mut client, "raft/1").await;
    cluster
        .wait_replicated(token, Duration::from_secs(10))
        .await;
    for (i, addr) in http.iter().enumerate() {
        // A node shows openraft's term as of its last metrics read, at
        // most a check interval old: poll past a first read of term 0.
        let reply = wait_http(*addr, "/health", Duration::from_secs(5), |r| {
            r.code == 200 && !r.body.contains("\"term\":0")
        })
        .await;
        let body = json(&reply);
        let role = if i == leader { "leader" } else { "follower" };
        assert_eq!(body["role"], role, "{body}");
        assert_eq!(body["active"], cluster.peers[leader].to_string());
        assert!(body["term"].as_u64().is_some_and(|t| t >= 1), "{body}");
    }
    // The Raft figures are as of the node's last metrics read, at most a
    // check interval old: poll until they show the applied grant.
    let m = wait_scrape(http[leader], |m| {
        m.samples
            .keys()
            .any(|k| k.starts_with("baton_replication_lag_entries"))
            && m.samples.contains_key("baton_raft_applied_index")
    })
    .await;
    assert!(m.get("baton_term") >= 1.0);
    assert!(m.get("baton_raft_commit_index") >= 1.0);
    assert!(m.get("baton_raft_applied_index") >= 1.0);
    assert_eq!(m.get("baton_role{role=\"leader\"}"), 1.0);
    for (i, peer) in cluster
        .peers
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != leader)
    {
        let lag = format!("baton_replication_lag_entries{{peer=\"{peer}\"}}");
        assert!(
            m.samples.contains_key(&lag),
            "no lag for node {i}: {:?}",
            m.samples.keys().collect::<Vec<_>>()
        );
    }
    let view = json(&http_get(http[leader], "/v1/cluster", None).await);
    let followers = view["members"]
        .as_array()
        .expect("members")
        .iter()
        .filter(|m| m["state"] == "follower")
        .count();
    assert_eq!(followers, 2, "{view}");
    assert!(
        view["members"]
            .as_array()
            .expect("members")
            .iter()
            .any(|m| m["matched_index"].as_u64().is_some()),
        "{view}"
    );
    let listed = json(&http_get(http[leader], "/v1/locks", None).await);
    assert_eq!(keys(&listed), ["raft/1"]);

    // Cut the leader off: the others die; within an election timeout or
    // so it no longer has a majority and says so.
    for i in (0..3).filter(|i| *i != leader) {
        cluster.nodes[i].kill();
    }
    let cut = wait_http(http[leader], "/health", Duration::from_secs(10), |r| {
        r.code == 503
    })
    .await;
    assert_eq!(json(&cut)["status"], "unavailable", "{cut:?}");
}

#[tokio::test]
async fn a_raft_follower_whose_majority_is_gone_is_503() {
    let http = free_addrs(3).expect("ports");
    let mut cluster = RaftCluster::start_each(3, |i| http_args(http[i]));
    let (leader, _) = cluster.wait_leader(Duration::from_secs(15)).await;
    let follower = (leader + 1) % 3;
    let _ = wait_http(http[follower], "/health", Duration::from_secs(5), |r| {
        r.code == 200
    })
    .await;
    for i in (0..3).filter(|i| *i != follower) {
        cluster.nodes[i].kill();
    }
    let cut = wait_http(http[follower], "/health", Duration::from_secs(10), |r| {
        r.code == 503
    })
    .await;
    assert_eq!(json(&cut)["status"], "unavailable", "{cut:?}");
}

#[test]
fn an_http_address_in_use_stops_batond_at_start_with_one_line() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr").to_string();
    let args: Vec<String> = ["--listen", "127.0.0.1:0", "--http-listen", &addr]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let (_, stderr) = start_refused(&args);
    assert!(
        stderr.contains(&format!("batond: cannot listen for HTTP on {addr}")),
        "{stderr}"
    );
}

#[tokio::test]
async fn connections_past_the_limit_are_closed_and_the_endpoint_recovers() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let http = free_addr();
    let _node = Batond::start(&["--http-listen", &http.to_string()]);
    let _ = wait_http(http, "/health", Duration::from_secs(5), |r| r.code == 200).await;
    // 256 connections that send nothing hold every slot.
    let mut idle = Vec::new();
    for _ in 0..256 {
        idle.push(tokio::net::TcpStream::connect(http).await.expect("connect"));
    }
    // Give the endpoint time to take them all (each is accepted in turn).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut extra = tokio::net::TcpStream::connect(http).await.expect("connect");
        let _ = extra
            .write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await;
        let mut answer = Vec::new();
        let read =
            tokio::time::timeout(Duration::from_secs(5), extra.read_to_end(&mut answer)).await;
        if matches!(read, Ok(Ok(_)) | Ok(Err(_))) && answer.is_empty() {
            break; // closed unanswered: the limit holds
        }
        assert!(
            Instant::now() < deadline,
            "a connection past the limit was answered: {:?}",
            String::from_utf8_lossy(&answer)
        );
        idle.push(extra);
    }
    drop(idle);
    let back = wait_http(http, "/health", Duration::from_secs(5), |r| r.code == 200).await;
    assert_eq!(json(&back)["status"], "serving");
}

#[tokio::test]
async fn a_client_that_never_finishes_its_headers_is_closed() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let http = free_addr();
    let _node = Batond::start(&["--http-listen", &http.to_string()]);
    let _ = wait_http(http, "/health", Duration::from_secs(5), |r| r.code == 200).await;
    let mut slow = tokio::net::TcpStream::connect(http).await.expect("connect");
    slow.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        .await
        .expect("write");
    let started = Instant::now();
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(20), slow.read_to_end(&mut rest)).await;
    assert!(read.is_ok(), "still open after 20 s");
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(9) && took < Duration::from_secs(15),
        "closed after {took:?}"
    );
    assert!(
        !String::from_utf8_lossy(&rest).contains("200 OK"),
        "{rest:?}"
    );
}
