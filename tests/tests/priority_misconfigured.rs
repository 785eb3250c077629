//! A misconfigured priority node never becomes a second lock service,
//! seen from outside with real `batond` processes: a node started with
//! another cluster key, or with another peer list, is refused by the real
//! nodes, and it in turn never serves while they answer: it answers
//! `M <op> <key> -` (a `--try` acquire of a key the real active holds is
//! not granted), `/health` says why, and the refusals are logged once,
//! not at every redial. Listed first, such a node blocks no failover of
//! the real nodes. `baton status` that sees two serving nodes exits 11.

mod priority_support;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use baton_tests::cluster::{field, probe_status, Cluster};
use baton_tests::http::http_get;
use baton_tests::{
    baton_bin, distinct_free_addrs, free_addr, peer_list, write_key_file, Batond, LineClient,
};
use tokio::time::Instant;

use priority_support::{grant, SERIAL, SETTLE};

/// How long the misconfigured node is watched: many failure timeouts
/// (0.3 s by default), in which today's rule would have it promote.
const WATCH: Duration = Duration::from_secs(4);
/// One `S` probe's bound.
const PROBE: Duration = Duration::from_millis(500);

/// A key file of another cluster in `dir`.
fn other_key_file(dir: &Path) -> PathBuf {
    let path = dir.join("other.key");
    let text = baton_tests::key::random_key_text().expect("random key");
    write_key_file(&path, &text);
    path
}

/// A priority node at `addr` with peer list `peers` (and `extra`), with
/// an HTTP endpoint; returns it and the endpoint's address.
fn node(addr: SocketAddr, peers: &[SocketAddr], extra: &[&str]) -> (Batond, SocketAddr) {
    let http = free_addr();
    let list = peer_list(peers);
    let http_arg = http.to_string();
    let mut args = vec![
        "--mode",
        "priority",
        "--peers",
        &list,
        "--http-listen",
        &http_arg,
    ];
    args.extend_from_slice(extra);
    (Batond::start_at(addr, &args), http)
}

/// For `WATCH`, the misconfigured node at `addr` never says it serves,
/// and a `--try` acquire (wait 1 ms) of `held` there is answered
/// `M A held -` every time.
async fn never_serves(addr: SocketAddr, held: &str) {
    let mut line = LineClient::connect(addr).await;
    let end = Instant::now() + WATCH;
    let mut asked = 0;
    while Instant::now() < end {
        let answer = line.request(&format!("A {held} 0.001 10")).await;
        assert_eq!(answer, format!("M A {held} -"), "after {asked} tries");
        let status = probe_status(addr, PROBE).await.expect("it answers S");
        assert_eq!(field(&status, "role"), "standby", "{status:?}");
        assert_eq!(field(&status, "active"), "-", "{status:?}");
        asked += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `/health` of the misconfigured node: 503, the reason naming the
/// refusing peer `peer` and `why`.
async fn health_says(http: SocketAddr, peer: SocketAddr, why: &str) {
    let reply = http_get(http, "/health", None).await;
    assert_eq!(reply.code, 503, "{reply:?}");
    assert!(
        reply.body.contains(&peer.to_string()) && reply.body.contains(why),
        "{}",
        reply.body
    );
}

/// Lines of `node`'s log that contain `text`.
fn log_lines(node: &Batond, text: &str) -> usize {
    node.log_tail(usize::MAX)
        .lines()
        .filter(|l| l.contains(text))
        .count()
}

/// The real cluster (3 nodes) with a lock held on its active, node 0
/// (a node that promoted first hands the role to node 0 once it is
/// ready); returns the cluster and the held key.
async fn serving_cluster() -> (Cluster, &'static str) {
    let mut cluster = Cluster::start(3, &[]);
    cluster.wait_active(0, SETTLE).await;
    let mut client = cluster.client(0);
    grant(&mut client, "held", "1", "600").await;
    (cluster, "held")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fourth_node_with_another_key_never_grants_while_the_cluster_serves() {
    let _serial = SERIAL.lock().await;
    let (mut cluster, held) = serving_cluster().await;
    let dir = tempfile::tempdir().expect("dir");
    let key = other_key_file(dir.path()).display().to_string();
    let fourth = free_addr();
    let mut peers = cluster.peers().to_vec();
    peers.push(fourth);
    let (odd, http) = node(fourth, &peers, &["--cluster-key-file", &key]);
    never_serves(fourth, held).await;
    health_says(http, cluster.addr(0), "cluster key").await;
    assert!(
        log_lines(&odd, "not serving") <= 1,
        "logged more than once a minute:\n{}",
        odd.log_tail(20)
    );
    cluster.wait_active(0, SETTLE).await;
    let status = baton_status(&[cluster.addr(0), fourth]);
    assert!(status.status.success(), "{status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fourth_node_with_another_peer_list_never_grants_while_the_cluster_serves() {
    let _serial = SERIAL.lock().await;
    let (mut cluster, held) = serving_cluster().await;
    let fourth = free_addr();
    let mut peers = cluster.peers().to_vec();
    peers.push(fourth);
    let (odd, http) = node(fourth, &peers, &[]);
    never_serves(fourth, held).await;
    health_says(http, cluster.addr(0), "another peer list").await;
    assert!(log_lines(&odd, "not serving") <= 1, "{}", odd.log_tail(20));
    cluster.wait_active(0, SETTLE).await;
    // The real nodes refuse its links at every redial (10 a second): the
    // refusal is logged once a minute per peer.
    for i in 0..cluster.len() {
        let lines = log_lines(cluster.node_mut(i), "another peer list");
        assert!(
            (1..=2).contains(&lines),
            "node {i} logged the refusal {lines} times in {WATCH:?}"
        );
    }
}

/// Polls until node `want` of `addrs` says it is active and the others
/// but `misconfigured` follow it; `misconfigured` must never serve.
async fn wait_serving(addrs: &[SocketAddr], want: usize, misconfigured: usize, up: &[bool]) {
    let deadline = Instant::now() + SETTLE;
    loop {
        let mut agreed = true;
        for (i, addr) in addrs.iter().enumerate() {
            if !up[i] {
                continue;
            }
            let status = probe_status(*addr, PROBE).await;
            let role = status.as_ref().map(|s| field(s, "role").to_owned());
            if i == misconfigured {
                assert_ne!(role.as_deref(), Some("active"), "{status:?}");
                continue;
            }
            let want_role = if i == want { "active" } else { "standby" };
            agreed &= status.as_ref().is_some_and(|s| {
                field(s, "role") == want_role && field(s, "active") == addrs[want].to_string()
            });
        }
        if agreed {
            return;
        }
        assert!(Instant::now() < deadline, "node {want} not serving");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_another_key_listed_first_blocks_no_failover() {
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().expect("dir");
    let key = other_key_file(dir.path()).display().to_string();
    let addrs = distinct_free_addrs(4);
    // The real nodes first: a node that hears nobody at all serves alone,
    // misconfigured or not, until its peers answer.
    let mut nodes: Vec<Batond> = (1..4).map(|i| node(addrs[i], &addrs, &[]).0).collect();
    let (_odd, _) = node(addrs[0], &addrs, &["--cluster-key-file", &key]);
    let mut up = vec![true; 4];
    wait_serving(&addrs, 1, 0, &up).await;
    let end = Instant::now() + WATCH;
    while Instant::now() < end {
        wait_serving(&addrs, 1, 0, &up).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    nodes[0].kill();
    up[1] = false;
    wait_serving(&addrs, 2, 0, &up).await;
    let mut line = LineClient::connect(addrs[0]).await;
    assert_eq!(line.request("A fresh 0.001 10").await, "M A fresh -");
}

/// `baton --servers <addrs> status`.
fn baton_status(addrs: &[SocketAddr]) -> std::process::Output {
    let servers: Vec<String> = addrs.iter().map(ToString::to_string).collect();
    Command::new(baton_bin())
        .args(["--servers", &servers.join(","), "status"])
        .stdin(Stdio::null())
        .output()
        .expect("run baton")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn baton_status_that_sees_two_serving_nodes_says_so_and_exits_11() {
    let _serial = SERIAL.lock().await;
    // Two nodes that each list a peer nobody runs: each serves alone.
    let (a, b) = (free_addr(), free_addr());
    let (_one, _) = node(a, &[a, free_addr()], &[]);
    let (_two, _) = node(b, &[b, free_addr()], &[]);
    for addr in [a, b] {
        let deadline = Instant::now() + SETTLE;
        while probe_status(addr, PROBE)
            .await
            .is_none_or(|s| field(&s, "role") != "active")
        {
            assert!(Instant::now() < deadline, "{addr} never served");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let out = baton_status(&[a, b]);
    assert_eq!(out.status.code(), Some(11), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&a.to_string()) && stderr.contains(&b.to_string()),
        "{stderr}"
    );
    assert!(stderr.contains("serve at once"), "{stderr}");
    let one = baton_status(&[a]);
    assert!(one.status.success(), "{one:?}");
}
