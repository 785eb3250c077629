//! Raft membership changes at their edges, with real `batond` processes
//! through `/v1/members`: a raw add that says nothing of its wait is rolled
//! back at the leader's default deadline, though nobody asks for most of it;
//! one node is added at a time; a removal that would leave a silent
//! majority, or no voter, is refused and the cluster keeps serving; the
//! leader removing itself hands over and names itself in its log.

mod raft_membership_support;

use std::net::SocketAddr;
use std::time::Duration;

use baton_tests::cluster::field;
use baton_tests::http::{http_get, http_send, HttpReply};
use baton_tests::port::free_addrs;
use baton_tests::raft::{grant, RaftCluster, SERIAL, SETTLE};
use raft_membership_support::{http_args, json, log_lines, members, remove_member};
use tokio::time::Instant;

/// The leader's deadline for an add that does not say how long it waits:
/// `baton member add`'s default `--timeout`.
const DEFAULT_DEADLINE: Duration = Duration::from_secs(60);

async fn post_add(http: SocketAddr, body: &str) -> HttpReply {
    http_send(http, "POST", "/v1/members", Some(body)).await
}

/// The members listed by `http`.
async fn listed(http: SocketAddr) -> Vec<(String, String)> {
    members(&http_get(http, "/v1/members", None).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raw_add_without_a_wait_is_rolled_back_at_the_default_deadline_one_add_at_a_time() {
    let _serial = SERIAL.lock().await;
    let http = free_addrs(3).expect("ports");
    let mut cluster = RaftCluster::start_each(3, |i| http_args(http[i]));
    let (leader, _) = cluster.wait_leader(SETTLE).await;
    let nobody = free_addrs(2).expect("ports");
    let (first, second) = (nobody[0].to_string(), nobody[1].to_string());

    // An older client's add: no wait_ms. One request waits a few seconds
    // and says the learner is still catching up.
    let started = Instant::now();
    let asked = post_add(http[leader], &format!("{{\"addr\": \"{first}\"}}")).await;
    assert_eq!(asked.code, 202, "{asked:?}");
    assert!(json(&asked)["error"].as_str().is_some(), "{asked:?}");
    assert!(
        listed(http[leader])
            .await
            .contains(&(first.clone(), "learner".into())),
        "{asked:?}"
    );

    // A second add meanwhile is refused at once, naming the first.
    let other = post_add(
        http[leader],
        &format!("{{\"addr\": \"{second}\", \"wait_ms\": 1000}}"),
    )
    .await;
    assert_eq!(other.code, 409, "{other:?}");
    let why = json(&other)["error"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        why.contains(&first) && why.contains("one node is added at a time"),
        "{why}"
    );

    // Nobody asks again for most of the deadline: the learner stays till
    // then all the same...
    tokio::time::sleep(DEFAULT_DEADLINE * 5 / 6).await;
    assert_eq!(listed(http[leader]).await.len(), 4);
    // ...and the ask that reaches the deadline is answered 504, with the
    // whole wait in its error; the membership is as before.
    let reply = loop {
        let reply = post_add(http[leader], &format!("{{\"addr\": \"{first}\"}}")).await;
        if reply.code != 202 || started.elapsed() > DEFAULT_DEADLINE * 2 {
            break reply;
        }
    };
    assert_eq!(reply.code, 504, "{reply:?}");
    let why = json(&reply)["error"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        why.contains("within 60 s") && why.contains("removed again"),
        "{why}"
    );
    assert!(
        started.elapsed() >= DEFAULT_DEADLINE - Duration::from_secs(1),
        "rolled back after {:?}",
        started.elapsed()
    );
    let now = listed(http[leader]).await;
    assert_eq!(now.len(), 3, "{now:?}");
    assert!(now.iter().all(|(_, m)| m == "voter"), "{now:?}");
    let rolled = log_lines(&cluster.nodes[leader], "removed it again");
    assert_eq!(rolled.len(), 1, "{rolled:?}");
}

/// Polls the leader's `/v1/cluster` until it shows `addr` down.
async fn wait_down(http: SocketAddr, addr: SocketAddr) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let view = json(&http_get(http, "/v1/cluster", None).await);
        let down = view["members"].as_array().is_some_and(|members| {
            members
                .iter()
                .any(|m| m["addr"] == addr.to_string() && m["state"] == "down")
        });
        if down {
            return;
        }
        assert!(Instant::now() < deadline, "{addr} not shown down: {view}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removals_that_would_stop_the_cluster_are_refused_and_it_keeps_serving() {
    let _serial = SERIAL.lock().await;
    let http = free_addrs(3).expect("ports");
    let mut cluster = RaftCluster::start_each(3, |i| http_args(http[i]));
    let (leader, _) = cluster.wait_leader(SETTLE).await;
    let mut client = cluster.client(leader);
    let before = grant(&mut client, "edges/1").await;
    let (dead, live) = ((leader + 1) % 3, (leader + 2) % 3);
    cluster.nodes[dead].kill();
    wait_down(http[leader], cluster.peers[dead]).await;

    // Without the live follower, the voters left (the leader and the dead
    // node) would have no answering majority: refused, nothing changes.
    let refused = remove_member(http[leader], cluster.peers[live]).await;
    assert_eq!(refused.code, 409, "{refused:?}");
    let why = json(&refused)["error"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(why.contains("only 1 answer"), "{why}");
    assert_eq!(listed(http[leader]).await.len(), 3);
    let after = grant(&mut client, "edges/2").await;
    assert!(after > before, "{after} after {before}");

    // The dead node may go; then the live follower; never the last voter.
    let gone = remove_member(http[leader], cluster.peers[dead]).await;
    assert_eq!(gone.code, 200, "{gone:?}");
    let gone = remove_member(http[leader], cluster.peers[live]).await;
    assert_eq!(gone.code, 200, "{gone:?}");
    let last = remove_member(http[leader], cluster.peers[leader]).await;
    assert_eq!(last.code, 409, "{last:?}");
    assert!(last.body.contains("last voter"), "{last:?}");
    let alone = grant(&mut client, "edges/3").await;
    assert!(alone > after, "{alone} after {after}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_removes_itself_hands_over_and_names_itself_in_its_log() {
    let _serial = SERIAL.lock().await;
    let http = free_addrs(3).expect("ports");
    let mut cluster = RaftCluster::start_each(3, |i| http_args(http[i]));
    let (leader, _) = cluster.wait_leader(SETTLE).await;
    let mut client = cluster.client(leader);
    let before = grant(&mut client, "self/1").await;
    let removed = remove_member(http[leader], cluster.peers[leader]).await;
    assert_eq!(removed.code, 200, "{removed:?}");
    assert_eq!(members(&removed).len(), 2, "{removed:?}");

    let status = cluster
        .wait_status(leader, "removed", Duration::from_secs(15), |s| {
            field(s, "role") == "removed"
        })
        .await;
    assert_eq!(field(&status, "mode"), "raft", "{status:?}");
    let said = log_lines(
        &cluster.nodes[leader],
        "removed from the cluster's membership",
    );
    assert_eq!(said.len(), 1, "one line: {said:?}");
    let own = format!("node=\"{}\"", cluster.peers[leader]);
    let roles = log_lines(&cluster.nodes[leader], "raft role changed");
    assert!(
        roles.iter().all(|l| l.contains(&own)),
        "every role line names the node by its address: {roles:#?}"
    );

    // The two others elect a leader, which grants above every token.
    let next = (leader + 1) % 3;
    let mut client = cluster.client(next);
    let after = grant(&mut client, "self/2").await;
    assert!(after > before, "{after} after {before}");
}
