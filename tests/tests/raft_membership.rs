//! Raft membership changed online with real `batond` processes, through
//! the HTTP endpoint's `/v1/members` (what `baton member` calls): a dead
//! follower's disk replaced (removed, wiped, started with `--join`, added
//! again), a cluster grown by a node that joins and shrunk again (with a
//! warning at four voters), and the refusals (an address taken twice, a
//! follower asked, a node added but started without `--join`); a removed
//! node that says so and serves no more; an add with no node behind the
//! address, rolled back within its `--timeout`.

mod raft_membership_support;

use std::time::Duration;

use baton_tests::cluster::{field, probe_status};
use baton_tests::http::{http_get, http_send};
use baton_tests::port::free_addrs;
use baton_tests::raft::{grant, RaftCluster, REQUEST, SERIAL, SETTLE};
use raft_membership_support::{
    add_member, baton, http_args, json, log_lines, members, remove_member, start_joining,
    wait_holds, wipe,
};
use serde_json::Value;
use tokio::time::Instant;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_followers_disk_is_replaced_and_it_holds_every_lock_again() {
    let _serial = SERIAL.lock().await;
    let http = free_addrs(3).expect("ports");
    let mut cluster = RaftCluster::start_each(3, |i| http_args(http[i]));
    let (leader, _) = cluster.wait_leader(SETTLE).await;
    let mut client = cluster.client(leader);
    let mut tokens = Vec::new();
    for i in 0..20 {
        tokens.push(grant(&mut client, &format!("m/{i}")).await);
    }
    let highest = *tokens.iter().max().expect("tokens");
    cluster.wait_replicated(highest, REQUEST).await;

    // A follower dies with its disk.
    let dead = (leader + 1) % 3;
    let other = (leader + 2) % 3;
    let dead_addr = cluster.peers[dead];
    cluster.nodes[dead].kill();
    wipe(cluster.dirs[dead].path());

    // Its address is taken: it cannot be added over itself.
    let again = add_member(http[leader], dead_addr).await;
    assert_eq!(again.code, 409, "{again:?}");
    // A follower does not change the membership: it names the leader.
    let asked = remove_member(http[other], dead_addr).await;
    assert_eq!(asked.code, 421, "{asked:?}");
    assert_eq!(json(&asked)["leader"], cluster.peers[leader].to_string());

    let removed = remove_member(http[leader], dead_addr).await;
    assert_eq!(removed.code, 200, "{removed:?}");
    assert!(
        members(&removed)
            .iter()
            .all(|(a, _)| *a != dead_addr.to_string()),
        "{removed:?}"
    );

    // The replacement: the same address, an empty disk, --join.
    cluster.nodes[dead] = start_joining(dead_addr, cluster.dirs[dead].path(), http[dead]);
    let added = add_member(http[leader], dead_addr).await;
    assert_eq!(added.code, 200, "{added:?}");
    assert!(
        members(&added).contains(&(dead_addr.to_string(), "voter".to_string())),
        "{added:?}"
    );
    wait_holds(dead_addr, 20, highest).await;

    // It counts in the majority: with the third node gone, the leader
    // and the new node still grant, above every earlier token.
    cluster.nodes[other].kill();
    let mut client = cluster.client(leader);
    let later = grant(&mut client, "m/after").await;
    assert!(later > highest, "{later} after {highest}");
    wait_holds(dead_addr, 21, later).await;

    // Every node restarted: each uses the committed membership, not its
    // --peers (where the replaced node still stands under its old id).
    for i in 0..3 {
        if cluster.nodes[i].is_running() {
            cluster.nodes[i].kill();
        }
    }
    for i in 0..3 {
        cluster.nodes[i].restart();
    }
    let (leader, _) = cluster.wait_leader(SETTLE).await;
    let mut queries = cluster.nodes[leader].connect().await;
    for (i, token) in tokens.iter().enumerate() {
        let reply = queries.request(&format!("Q m/{i}")).await;
        assert!(
            reply.starts_with(&format!("Q m/{i} token={token} ")),
            "{reply:?}"
        );
    }
    let mut client = cluster.client(leader);
    let last = grant(&mut client, "m/restarted").await;
    assert!(last > later, "{last} after {later}");
    let listed = http_get(http[leader], "/v1/members", None).await;
    assert_eq!(members(&listed).len(), 3, "{listed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_grows_by_a_joining_node_and_shrinks_again() {
    let _serial = SERIAL.lock().await;
    let http = free_addrs(4).expect("ports");
    let mut cluster = RaftCluster::start_each(3, |i| http_args(http[i]));
    let (leader, _) = cluster.wait_leader(SETTLE).await;
    let mut client = cluster.client(leader);
    let token = grant(&mut client, "grow/1").await;

    let fourth = free_addrs(1).expect("port")[0];
    let dir = tempfile::tempdir().expect("dir");
    // Started without --join, a node the cluster did not seed refuses to
    // guess who it is.
    let data = dir.path().to_string_lossy().into_owned();
    let list = cluster
        .peers
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let alone = baton_tests::binary::batond_bin();
    let output = std::process::Command::new(alone)
        .args(["--mode", "raft", "--listen", &fourth.to_string()])
        .args(["--peers", &list, "--data-dir", &data])
        .args(["--cluster-key-file", "/dev/null"])
        .output()
        .expect("batond runs");
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("--join"),
        "{output:?}"
    );

    // Through the CLI, given a follower: it finds the leader's endpoint.
    let mut joined = start_joining(fourth, dir.path(), http[3]);
    let follower = cluster.peers[(leader + 1) % 3].to_string();
    let (code, out, err) =
        baton(&["--servers", &follower, "member", "add", &fourth.to_string()]).await;
    assert_eq!(code, Some(0), "{out} {err}");
    assert!(
        out.contains(&format!("{fourth}")) && out.contains("voter"),
        "{out}"
    );
    // Four voters tolerate one failure, as three do: the CLI and the
    // leader's log say so.
    assert!(err.contains("warning: 4 voters"), "{err}");
    let warned = cluster.nodes[leader].log_tail(100_000);
    assert!(
        warned
            .lines()
            .any(|l| l.contains("WARN") && l.contains("4 voters")),
        "{warned}"
    );
    let (code, out, _) = baton(&["--servers", &follower, "member", "list", "--json"]).await;
    assert_eq!(code, Some(0));
    let listed: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(listed.as_array().map(Vec::len), Some(4), "{listed}");
    let (code, _, err) =
        baton(&["--servers", &follower, "member", "add", &fourth.to_string()]).await;
    assert_eq!(code, Some(5), "already a voter: {err}");
    assert!(err.contains("already a voting member"), "{err}");
    wait_holds(fourth, 1, token).await;
    let view = json(&http_get(http[leader], "/v1/cluster", None).await);
    let listed = view["members"].as_array().expect("members");
    assert_eq!(listed.len(), 4, "{view}");
    assert!(listed.iter().all(|m| m["membership"] == "voter"), "{view}");
    // The joined node redirects clients to the leader it learned.
    let status = probe_status(fourth, Duration::from_millis(500))
        .await
        .expect("S");
    assert_eq!(field(&status, "role"), "follower");
    assert_eq!(field(&status, "active"), cluster.peers[leader].to_string());
    // Its log names nodes by address, though it heard the leader before
    // the log told it the members.
    let roles = joined.log_tail(100_000);
    assert!(
        roles.contains(&format!("follower of {}", cluster.peers[leader])),
        "{roles}"
    );
    assert!(
        !roles.contains("follower of node ") && !roles.contains("node=\"\""),
        "{roles}"
    );

    // Shrunk again: the joined node leaves, and the three carry on.
    let (code, out, err) = baton(&[
        "--servers",
        &follower,
        "member",
        "remove",
        &fourth.to_string(),
    ])
    .await;
    assert_eq!(code, Some(0), "{out} {err}");
    assert_eq!(out.lines().count(), 4, "a head and three members: {out}");
    joined.kill();
    let next = grant(&mut client, "grow/2").await;
    assert!(next > token);
    let missing = remove_member(http[leader], fourth).await;
    assert_eq!(missing.code, 404, "{missing:?}");
    let bad = http_send(
        http[leader],
        "POST",
        "/v1/members",
        Some("{\"addr\": \"no port\"}"),
    )
    .await;
    assert_eq!(bad.code, 400, "{bad:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_node_says_so_serves_no_more_and_is_not_taken_for_a_wrong_key() {
    let _serial = SERIAL.lock().await;
    let http = free_addrs(3).expect("ports");
    let mut cluster = RaftCluster::start_each(3, |i| http_args(http[i]));
    let (leader, _) = cluster.wait_leader(SETTLE).await;
    let gone = (leader + 1) % 3;
    let gone_addr = cluster.peers[gone];
    let removed = remove_member(http[leader], gone_addr).await;
    assert_eq!(removed.code, 200, "{removed:?}");

    // It learns it from the others (it seldom receives the membership
    // without it), within a few election timeouts.
    let status = cluster
        .wait_status(gone, "removed", Duration::from_secs(15), |s| {
            field(s, "role") == "removed"
        })
        .await;
    assert_eq!(field(&status, "mode"), "raft", "{status:?}");
    let health = http_get(http[gone], "/health", None).await;
    assert_eq!(health.code, 503, "{health:?}");
    assert_eq!(json(&health)["role"], "removed", "{health:?}");
    assert!(health.body.contains("removed"), "{health:?}");
    let view = http_get(http[gone], "/v1/cluster", None).await;
    let view = json(&view);
    let me = view["members"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["self"] == true))
        .unwrap_or_else(|| panic!("itself in {view}"));
    assert_eq!(me["state"], "removed", "{view}");
    assert_eq!(me["membership"], "removed", "not a voter any more: {view}");
    // It grants nothing: every request is redirected.
    let mut line = cluster.nodes[gone].connect().await;
    let reply = line.request("A removed/k 5 60").await;
    assert!(reply.starts_with("M A removed/k "), "{reply:?}");
    let said = log_lines(
        &cluster.nodes[gone],
        "removed from the cluster's membership",
    );
    assert_eq!(said.len(), 1, "one line: {said:?}");
    // The two others carry on.
    let mut client = cluster.client(leader);
    grant(&mut client, "removed/after").await;

    // Added back without wiping its disk, it still has its old id: it
    // refuses the leader's links as a wrong node id (not a wrong key), and
    // `member add` gives up within its --timeout and takes it out again.
    let started = Instant::now();
    let leader_addr = cluster.peers[leader].to_string();
    let (code, out, err) = baton(&[
        "--servers",
        &leader_addr,
        "member",
        "add",
        &gone_addr.to_string(),
        "--timeout",
        "3",
    ])
    .await;
    assert_eq!(code, Some(3), "{out} {err}");
    assert!(
        err.contains("within 3 s") && err.contains("removed again"),
        "{err}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let listed = http_get(http[leader], "/v1/members", None).await;
    assert_eq!(members(&listed).len(), 2, "{listed:?}");
    let refusals = log_lines(&cluster.nodes[gone], "refused a peer connection");
    assert!(
        refusals.iter().any(|l| l.contains("wrong node id")),
        "{refusals:?}"
    );
    assert!(
        refusals.iter().all(|l| !l.contains("cluster-key-file")),
        "{refusals:?}"
    );
    // The leader's log says it too: the node refused the link, and why.
    let told = log_lines(&cluster.nodes[leader], &format!("peer={gone_addr}"));
    assert!(told.iter().any(|l| l.contains("wrong node id")), "{told:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn member_add_of_an_address_with_no_node_honours_a_short_timeout_and_is_rolled_back() {
    let _serial = SERIAL.lock().await;
    let http = free_addrs(3).expect("ports");
    let mut cluster = RaftCluster::start_each(3, |i| http_args(http[i]));
    let (leader, _) = cluster.wait_leader(SETTLE).await;
    let nobody = free_addrs(1).expect("port")[0].to_string();
    let servers = cluster.peers[leader].to_string();
    let started = Instant::now();
    let (code, out, err) = baton(&[
        "--servers",
        &servers,
        "member",
        "add",
        &nobody,
        "--timeout",
        "1.5",
    ])
    .await;
    let took = started.elapsed();
    assert_eq!(code, Some(3), "{out} {err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("within 1.5 s"), "{err}");
    assert!(err.contains("nothing took the log there"), "{err}");
    // Honoured: not the endpoint's 5 s per ask.
    assert!(took < Duration::from_millis(4_500), "took {took:?}");
    // Rolled back: no learner is left behind.
    let listed = http_get(http[leader], "/v1/members", None).await;
    let now = members(&listed);
    assert_eq!(now.len(), 3, "{listed:?}");
    assert!(now.iter().all(|(_, m)| m == "voter"), "{listed:?}");
    let rolled = log_lines(&cluster.nodes[leader], "removed it again");
    assert_eq!(rolled.len(), 1, "{rolled:?}");
}
