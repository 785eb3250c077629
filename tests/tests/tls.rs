//! TLS on the client port, black-box: real `batond` processes
//! with certificates made in the test, the Rust client, the CLI and a raw
//! TLS line client. A plaintext client of a TLS node and a TLS client of a
//! plaintext node fail fast with a clear error; certificates that do not
//! verify are refused; SIGHUP swaps the certificate; a TLS cluster still
//! links its peers (their hello comes in plain on the same port). The
//! openssl recipe of the operators' guide is tested in tls_recipe.rs.

#[path = "auth_support/mod.rs"]
mod auth_support;
mod tls_support;

use std::time::{Duration, Instant};

use baton_client::{Error, Role};
use baton_tests::cluster::Cluster;
use baton_tests::refused::start_refused;
use baton_tests::{Batond, LineClient};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use tls_support::{cli, client, strs, Pki, TlsLines};

/// A mismatch must be reported well before any reconnect round (3 s).
const FAST: Duration = Duration::from_millis(2500);

fn tls_node(pki: &Pki, extra: &[&str]) -> Batond {
    let mut flags = pki.main.node_flags();
    flags.extend(extra.iter().map(|s| s.to_string()));
    Batond::start(&strs(&flags))
}

fn assert_tls_error(result: Result<impl std::fmt::Debug, Error>, words: &str) {
    match result {
        Err(Error::Tls { why, .. }) => assert!(why.contains(words), "{why}"),
        other => panic!("expected Error::Tls ({words}), got {other:?}"),
    }
}

#[tokio::test]
async fn a_tls_node_serves_the_rust_client() {
    let pki = Pki::new();
    let node = tls_node(&pki, &[]);
    let client = client(node.addr(), Some(pki.main.client_tls()))
        .await
        .expect("TLS client");
    let guard = client
        .acquire("tls/a", Duration::from_secs(1), Duration::from_secs(30))
        .await
        .expect("acquire");
    guard.renew(Duration::from_secs(60)).await.expect("renew");
    let statuses = client.status_all().await;
    let status = statuses[0].status.as_ref().expect("status");
    assert_eq!(status.locks, 1);
    guard.release().await.expect("release");
    // Pipelined: many requests in flight on the same TLS connections.
    let acquires = (0..200).map(|i| {
        let client = client.clone();
        async move {
            client
                .acquire(
                    format!("tls/p{i}"),
                    Duration::from_secs(5),
                    Duration::from_secs(30),
                )
                .await
                .map(|g| g.into_token())
        }
    });
    let tokens = futures_util::future::join_all(acquires).await;
    assert!(tokens.iter().all(Result::is_ok), "{tokens:?}");
    client.close().await.expect("close");
}

#[tokio::test]
async fn a_raw_tls_connection_pipelines_lines() {
    let pki = Pki::new();
    let node = tls_node(&pki, &[]);
    let mut lines = TlsLines::connect(node.addr(), &pki.main.ca)
        .await
        .expect("handshake");
    let burst: String = (0..100).map(|i| format!("A raw/{i} 0 10\n")).collect();
    lines.send_raw(burst.as_bytes()).await;
    for _ in 0..100 {
        let line = lines.recv().await.expect("an answer");
        assert!(line.starts_with("A raw/"), "{line}");
    }
    lines.send_raw(b"S\n").await;
    let status = lines.recv().await.expect("status");
    assert!(status.contains("locks=100"), "{status}");
}

#[tokio::test]
async fn the_cli_speaks_tls() {
    let pki = Pki::new();
    let node = tls_node(&pki, &[]);
    let addr = node.addr().to_string();
    let ca = pki.main.ca.display().to_string();
    let base = ["--servers", addr.as_str(), "--tls-ca", ca.as_str()];
    let run = |more: &[&str]| {
        let args: Vec<&str> = base.iter().chain(more).copied().collect();
        cli(&args)
    };
    let acquired = run(&["acquire", "cli/k", "--lease", "30"]);
    assert!(acquired.status.success(), "{acquired:?}");
    let token = String::from_utf8_lossy(&acquired.stdout).trim().to_owned();
    assert!(run(&["renew", "cli/k", &token, "--lease", "40"])
        .status
        .success());
    let status = run(&["status"]);
    assert!(status.status.success(), "{status:?}");
    assert!(String::from_utf8_lossy(&status.stdout).contains("single"));
    assert!(run(&["release", "cli/k", &token]).status.success());
    // Without --tls-ca: one clear line, fast, exit 1.
    let started = Instant::now();
    let plain = cli(&["--servers", &addr, "acquire", "cli/k"]);
    assert!(started.elapsed() < FAST + Duration::from_secs(1));
    assert_eq!(plain.status.code(), Some(1), "{plain:?}");
    let stderr = String::from_utf8_lossy(&plain.stderr);
    assert!(
        stderr.contains("TLS") && stderr.lines().count() == 1,
        "{stderr}"
    );
}

#[tokio::test]
async fn a_plaintext_client_of_a_tls_node_fails_fast() {
    let pki = Pki::new();
    let node = tls_node(&pki, &[]);
    // Raw: one E line, then the node closes.
    let mut raw = LineClient::connect(node.addr()).await;
    raw.send("S").await;
    let line = raw.recv().await;
    assert!(line.starts_with("E ? ? TLS required"), "{line}");
    raw.expect_eof().await;
    // The Rust client: Error::Tls from the build, quickly (a connection is
    // used once its node answered a first `S`, which this one refuses).
    let started = Instant::now();
    let built = client(node.addr(), None).await;
    assert!(started.elapsed() < FAST, "took {:?}", started.elapsed());
    assert_tls_error(built, "TLS only");
}

#[tokio::test]
async fn a_tls_client_of_a_plaintext_node_fails_fast() {
    let pki = Pki::new();
    let node = Batond::start(&[]);
    let started = Instant::now();
    let built = client(node.addr(), Some(pki.main.client_tls())).await;
    assert!(started.elapsed() < FAST, "took {:?}", started.elapsed());
    assert_tls_error(built, "does not speak TLS");
    let addr = node.addr().to_string();
    let ca = pki.main.ca.display().to_string();
    let out = cli(&["--servers", &addr, "--tls-ca", &ca, "status"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not speak TLS"));
    // The node is unharmed.
    node.connect().await.status().await;
}

#[tokio::test]
async fn a_certificate_from_another_ca_does_not_verify() {
    let pki = Pki::new();
    let node = tls_node(&pki, &[]);
    let built = client(node.addr(), Some(pki.other.client_tls())).await;
    assert_tls_error(built, "does not verify");
    assert!(TlsLines::connect(node.addr(), &pki.other.ca).await.is_err());
}

#[tokio::test]
async fn a_required_client_certificate_is_checked() {
    let pki = Pki::new();
    let ca = pki.main.ca.display().to_string();
    let node = tls_node(&pki, &["--tls-client-ca", &ca]);
    let addr = node.addr();
    let request = |tls| async move {
        let client = client(addr, Some(tls)).await?;
        let guard = client
            .acquire("mtls", Duration::from_secs(1), Duration::from_secs(5))
            .await?;
        guard.release().await
    };
    // Without a certificate, and with one from another CA: refused, fast.
    let started = Instant::now();
    assert_tls_error(request(pki.main.client_tls()).await, "client certificate");
    assert!(started.elapsed() < FAST, "took {:?}", started.elapsed());
    assert_tls_error(request(pki.main.client_tls_as(&pki.other)).await, "");
    // With the right one: served.
    request(pki.main.client_tls_as(&pki.main))
        .await
        .expect("a client with a certificate of the CA is served");
    // The same, from PEM text in memory.
    let read = |path: &std::path::Path| std::fs::read(path).expect("read PEM");
    let from_pem = baton_client::TlsConfig::from_ca_pem(&read(&pki.main.ca))
        .and_then(|tls| tls.identity_pem(&read(&pki.main.client_cert), &read(&pki.main.client_key)))
        .expect("PEM in memory");
    request(from_pem).await.expect("served with in-memory PEM");
}

#[tokio::test]
async fn sighup_swaps_the_certificate_and_a_bad_set_keeps_the_old() {
    let pki = Pki::new();
    // The node serves copies, so the test can overwrite them.
    let (cert, key) = (pki.path("live.pem"), pki.path("live-key.pem"));
    std::fs::copy(&pki.main.node_cert, &cert).expect("copy");
    std::fs::copy(&pki.main.node_key, &key).expect("copy");
    let flags = [
        "--tls-cert".to_string(),
        cert.display().to_string(),
        "--tls-key".to_string(),
        key.display().to_string(),
    ];
    let node = Batond::start(&strs(&flags));
    TlsLines::connect(node.addr(), &pki.main.ca)
        .await
        .expect("the first certificate");
    std::fs::copy(&pki.other.node_cert, &cert).expect("copy");
    std::fs::copy(&pki.other.node_key, &key).expect("copy");
    let hangup = || kill(Pid::from_raw(node.pid() as i32), Signal::SIGHUP).expect("SIGHUP");
    hangup();
    let until = Instant::now() + Duration::from_secs(10);
    while TlsLines::connect(node.addr(), &pki.other.ca).await.is_err() {
        assert!(Instant::now() < until, "the new certificate was not served");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(TlsLines::connect(node.addr(), &pki.main.ca).await.is_err());
    // A bad set: the key does not match the certificate. The old one stays.
    std::fs::copy(&pki.main.node_cert, &cert).expect("copy");
    hangup();
    let until = Instant::now() + Duration::from_secs(10);
    while !node.log_tail(20).contains("TLS reload failed") {
        assert!(Instant::now() < until, "no reload failure logged");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    TlsLines::connect(node.addr(), &pki.other.ca)
        .await
        .expect("the previous certificate stays after a bad reload");
}

#[test]
fn bad_tls_files_stop_the_start_with_one_line_naming_the_file() {
    let pki = Pki::new();
    let garbage = pki.path("garbage.pem");
    std::fs::write(&garbage, "not a certificate\n").expect("write");
    let cases = [
        (
            pki.path("missing.pem"),
            pki.main.node_key.clone(),
            "missing.pem",
        ),
        (garbage.clone(), pki.main.node_key.clone(), "garbage.pem"),
        (pki.main.node_cert.clone(), garbage.clone(), "garbage.pem"),
        (
            pki.main.node_cert.clone(),
            pki.other.node_key.clone(),
            "main-node.pem",
        ),
    ];
    for (cert, key, named) in cases {
        let args = [
            "--listen",
            "127.0.0.1:0",
            "--tls-cert",
            &cert.display().to_string(),
            "--tls-key",
            &key.display().to_string(),
        ]
        .map(String::from);
        let (_, stderr) = start_refused(&args);
        let lines: Vec<&str> = stderr
            .lines()
            .filter(|l| l.starts_with("batond:"))
            .collect();
        assert_eq!(lines.len(), 1, "{stderr}");
        assert!(lines[0].contains(named), "{stderr}");
    }
}

#[tokio::test]
async fn a_tls_priority_cluster_links_its_peers_and_fails_over() {
    let pki = Pki::new();
    let flags = pki.main.node_flags();
    let mut cluster = Cluster::start(3, &strs(&flags));
    let peers: Vec<String> = cluster.peers().iter().map(|p| p.to_string()).collect();
    let client = baton_client::Client::builder()
        .servers(peers.clone())
        .tls(pki.main.client_tls())
        .build()
        .await
        .expect("TLS client of the cluster");
    // Linked: both standbys know the active.
    let linked = |active: &str, nodes: &[baton_client::NodeStatus], up: usize| {
        nodes
            .iter()
            .filter_map(|n| n.status.as_ref().ok())
            .filter(|s| s.active.as_deref() == Some(active))
            .count()
            == up
    };
    wait_for(Duration::from_secs(15), || async {
        linked(&peers[0], &client.status_all().await, 3)
    })
    .await;
    let guard = client
        .acquire("cluster/k", Duration::from_secs(5), Duration::from_secs(30))
        .await
        .expect("acquire on the active");
    guard.into_token();
    // Replicated over the peer links before the active dies.
    wait_for(Duration::from_secs(15), || async {
        let nodes = client.status_all().await;
        nodes
            .iter()
            .skip(1)
            .all(|n| n.status.as_ref().is_ok_and(|s| s.locks == 1))
    })
    .await;
    cluster.kill(0);
    wait_for(Duration::from_secs(15), || async {
        let nodes = client.status_all().await;
        nodes.iter().any(|n| {
            n.status
                .as_ref()
                .is_ok_and(|s| s.role == Role::Active && s.locks == 1)
        })
    })
    .await;
    client
        .acquire(
            "cluster/after",
            Duration::from_secs(5),
            Duration::from_secs(30),
        )
        .await
        .expect("served after the failover");
    client.close().await.expect("close");
}

#[tokio::test]
async fn a_tls_raft_cluster_elects_replicates_and_fails_over() {
    let pki = Pki::new();
    let flags = pki.main.node_flags();
    let mut cluster = baton_tests::raft::RaftCluster::start_with(3, &strs(&flags));
    let peers: Vec<String> = cluster.peers.iter().map(|p| p.to_string()).collect();
    let client = baton_client::Client::builder()
        .servers(peers.clone())
        .tls(pki.main.client_tls())
        .build()
        .await
        .expect("TLS client of the cluster");
    let leader_with = |nodes: &[baton_client::NodeStatus], locks: u64| {
        nodes.iter().position(|n| {
            n.status
                .as_ref()
                .is_ok_and(|s| s.role == Role::Leader && s.locks == locks)
        })
    };
    wait_for(Duration::from_secs(20), || async {
        leader_with(&client.status_all().await, 0).is_some()
    })
    .await;
    client
        .acquire("raft/k", Duration::from_secs(5), Duration::from_secs(60))
        .await
        .expect("acquire through the leader")
        .into_token();
    let leader = leader_with(&client.status_all().await, 1).expect("the leader holds it");
    cluster.nodes[leader].kill();
    // A new leader, elected over the TLS node's peer path, has the lock.
    wait_for(Duration::from_secs(20), || async {
        leader_with(&client.status_all().await, 1).is_some_and(|i| i != leader)
    })
    .await;
    client
        .acquire(
            "raft/after",
            Duration::from_secs(10),
            Duration::from_secs(30),
        )
        .await
        .expect("served after the failover");
    client.close().await.expect("close");
}

async fn wait_for<F, Fut>(within: Duration, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let until = Instant::now() + within;
    while !condition().await {
        assert!(
            Instant::now() < until,
            "condition not met within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// TLS and users together: credentials go inside TLS; a plaintext client
/// with credentials still learns that TLS is needed, not that its secret
/// is wrong; a wrong secret over TLS is an authentication failure.
#[tokio::test]
async fn credentials_travel_inside_tls() {
    let pki = Pki::new();
    let dir = tempfile::tempdir().expect("temp dir");
    let users = dir.path().join("users.toml");
    auth_support::write_users(&users, &auth_support::users_toml());
    let users = users.to_str().expect("UTF-8 path").to_owned();
    let node = tls_node(&pki, &["--auth-file", &users]);
    let build = |secret: &str, tls: Option<baton_client::TlsConfig>| {
        let mut builder = baton_client::Client::builder()
            .servers([node.addr().to_string()])
            .connect_timeout(Duration::from_secs(2))
            .credentials("billing", secret);
        if let Some(tls) = tls {
            builder = builder.tls(tls);
        }
        builder.build()
    };
    let client = build(auth_support::BILLING_SECRET, Some(pki.main.client_tls()))
        .await
        .expect("TLS with credentials");
    let guard = client
        .acquire(
            "billing/tls",
            Duration::from_secs(1),
            Duration::from_secs(30),
        )
        .await
        .expect("acquire");
    match client
        .acquire(
            "orders/tls",
            Duration::from_secs(1),
            Duration::from_secs(30),
        )
        .await
    {
        Err(Error::PermissionDenied { .. }) => {}
        other => panic!("expected PermissionDenied, got {other:?}"),
    }
    guard.release().await.expect("release");
    let started = Instant::now();
    assert_tls_error(build(auth_support::BILLING_SECRET, None).await, "TLS");
    assert!(started.elapsed() < FAST, "took {:?}", started.elapsed());
    match build("wrong-secret", Some(pki.main.client_tls())).await {
        Err(Error::AuthenticationFailed) => {}
        other => panic!("expected AuthenticationFailed, got {other:?}"),
    }
}

/// With TLS on the client port the HTTP endpoint speaks HTTPS with the same
/// certificate (its console included), and plain HTTP to it gets no answer.
#[tokio::test]
async fn the_http_endpoint_speaks_tls_with_the_client_port() {
    let pki = Pki::new();
    let http = baton_tests::free_addr();
    let http_text = http.to_string();
    let node = tls_node(&pki, &["--http-listen", &http_text]);
    let mut https = TlsLines::connect(http, &pki.main.ca)
        .await
        .expect("HTTPS handshake");
    https
        .send_raw(b"GET /health HTTP/1.1\r\nHost: baton\r\nConnection: close\r\n\r\n")
        .await;
    let status = https.recv().await.expect("a status line");
    assert!(status.starts_with("HTTP/1.1 200"), "{status:?}");
    // The console too: the same endpoint, the same certificate.
    let mut console = TlsLines::connect(http, &pki.main.ca)
        .await
        .expect("HTTPS handshake");
    console
        .send_raw(b"GET /ui HTTP/1.1\r\nHost: baton\r\nConnection: close\r\n\r\n")
        .await;
    let status = console.recv().await.expect("a status line");
    assert!(status.starts_with("HTTP/1.1 200"), "/ui: {status:?}");
    // Plain HTTP to it: the handshake fails, no HTTP answer comes back.
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut plain = tokio::net::TcpStream::connect(http).await.expect("connect");
    plain
        .write_all(b"GET /health HTTP/1.1\r\nHost: baton\r\n\r\n")
        .await
        .expect("write");
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), plain.read_to_end(&mut answer)).await;
    assert!(
        !answer.starts_with(b"HTTP/"),
        "plain HTTP was served: {:?}",
        String::from_utf8_lossy(&answer)
    );
    drop(node);
}
