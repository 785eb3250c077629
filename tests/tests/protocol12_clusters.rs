//! Protocol 1.2 in the cluster modes, real `batond` processes: a priority
//! active replicates semaphores, shared grants and values to the standbys,
//! whose answer to `W` and `V` is `M`, and a graceful stop answers the
//! active's pending watches `M W` and hands every holder and value on; a
//! Raft cluster commits every 1.2 change through its log and answers
//! watches on its leader (followers redirect them), through a kill -9.

mod priority_support;

use std::time::Duration;

use baton_tests::cluster::Cluster;
use baton_tests::raft::{RaftCluster, SERIAL as RAFT_SERIAL, SETTLE as RAFT_SETTLE};
use baton_tests::{grant_token, LineClient};
use priority_support::{SERIAL, SETTLE};

fn field<'a>(line: &'a str, name: &str) -> &'a str {
    line.split(' ')
        .find_map(|f| f.strip_prefix(name).and_then(|f| f.strip_prefix('=')))
        .unwrap_or_else(|| panic!("no {name}= in {line:?}"))
}

fn holders(line: &str) -> Vec<&str> {
    line.split(' ')
        .filter_map(|f| f.strip_prefix("holder="))
        .collect()
}

/// The holder fields without their lease, which moves.
fn holders_without_lease(line: &str) -> Vec<String> {
    holders(line)
        .into_iter()
        .map(|h| {
            let mut parts = h.splitn(3, ',');
            let token = parts.next().unwrap_or("");
            parts.next();
            format!("{token},{}", parts.next().unwrap_or(""))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_priority_active_replicates_holders_and_values_and_hands_its_watches_on() {
    let _serial = SERIAL.lock().await;
    let mut cluster = Cluster::start(3, &[]);
    // On a loaded machine a later node may serve first: whichever does.
    let active = cluster.wait_single_active(SETTLE).await;
    let (a0, a1) = (cluster.addr(active), cluster.addr((active + 1) % 3));
    let mut c0 = LineClient::connect(a0).await;
    let t1 = grant_token(&c0.request("A pool 0 60 permits=2 value=a").await, "pool");
    let t2 = grant_token(&c0.request("A pool 0 60 permits=2").await, "pool");
    let r1 = grant_token(&c0.request("A rw 0 60 mode=shared").await, "rw");
    assert_eq!(c0.request(&format!("V pool {t2} b,c")).await, "V pool");
    cluster.wait_replicated(r1, SETTLE).await;
    // A standby sends W and V to the active.
    let mut c1 = LineClient::connect(a1).await;
    assert_eq!(c1.request("W pool 1 -").await, format!("M W pool {a0}"));
    assert_eq!(
        c1.request(&format!("V pool {t1} x")).await,
        format!("M V pool {a0}")
    );
    let before = c0.request("Q pool").await;
    let mut watcher = LineClient::connect(a0).await;
    watcher
        .send(&format!("W pool 30 {}", field(&before, "state")))
        .await;
    watcher.expect_silence(Duration::from_millis(200)).await;
    // A graceful stop: the pending watch is sent on, the table handed over.
    cluster.terminate(active);
    let moved = watcher.recv().await;
    assert!(moved.starts_with("M W pool "), "{moved}");
    let successor = cluster.wait_single_active(SETTLE).await;
    assert_ne!(successor, active);
    let a1 = cluster.addr(successor);
    let mut c1 = LineClient::connect(a1).await;
    let after = c1.request("Q pool").await;
    assert_eq!(
        field(&after, "state"),
        field(&before, "state"),
        "{before} / {after}"
    );
    assert_eq!(
        holders_without_lease(&after),
        vec![format!("{t1},a"), format!("{t2},b,c")]
    );
    assert_eq!(field(&c1.request("Q rw").await, "mode"), "shared");
    assert_eq!(
        c1.request("A pool 0 60 permits=3").await,
        "E A pool the key has 2 permits"
    );
    // The watch sent again to the new active with the same tag waits.
    let mut watcher = LineClient::connect(a1).await;
    watcher
        .send(&format!("W pool 30 {}", field(&after, "state")))
        .await;
    watcher.expect_silence(Duration::from_millis(200)).await;
    assert_eq!(c1.request(&format!("R pool {t1}")).await, "R pool");
    assert_eq!(holders(&watcher.recv().await).len(), 1);
    let t3 = grant_token(&c1.request("A pool 0 60 permits=2").await, "pool");
    assert!(t3 > t2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicated_commands_carry_permits_modes_and_values_through_a_kill_9() {
    let _serial = SERIAL.lock().await;
    let mut cluster = Cluster::start(2, &[]);
    assert_eq!(cluster.wait_single_active(SETTLE).await, 0);
    let mut c0 = LineClient::connect(cluster.addr(0)).await;
    let t1 = grant_token(&c0.request("A pool 0 60 permits=3").await, "pool");
    let t2 = grant_token(&c0.request("A pool 0 60 permits=3 value=w2").await, "pool");
    assert_eq!(c0.request(&format!("V pool {t1} w1")).await, "V pool");
    let r1 = grant_token(&c0.request("A rw 0 60 mode=shared").await, "rw");
    let before = (c0.request("Q pool").await, c0.request("Q rw").await);
    // Commands replicate in order: once the last grant is there, so is the V.
    cluster.wait_replicated(r1, SETTLE).await;
    cluster.kill(0);
    assert_eq!(cluster.wait_single_active(SETTLE).await, 1);
    let mut c1 = LineClient::connect(cluster.addr(1)).await;
    let after = (c1.request("Q pool").await, c1.request("Q rw").await);
    assert_eq!(
        field(&after.0, "state"),
        field(&before.0, "state"),
        "{after:?}"
    );
    assert_eq!(
        field(&after.1, "state"),
        field(&before.1, "state"),
        "{after:?}"
    );
    assert_eq!(
        holders_without_lease(&after.0),
        vec![format!("{t1},w1"), format!("{t2},w2")]
    );
    let t3 = grant_token(&c1.request("A pool 0 60 permits=3").await, "pool");
    assert!(t3 > r1);
}

/// A Raft cluster of three with an agreed leader, and a client on it.
async fn raft_leader(extra: &[&str]) -> (RaftCluster, usize, LineClient) {
    let mut cluster = RaftCluster::start_with(3, extra);
    let (leader, _) = cluster.wait_leader(RAFT_SETTLE).await;
    let client = LineClient::connect(cluster.peers[leader]).await;
    (cluster, leader, client)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raft_leader_hands_semaphores_and_shared_keys_on_through_the_log() {
    let _serial = RAFT_SERIAL.lock().await;
    let (mut cluster, leader, mut c) = raft_leader(&[]).await;
    let t1 = grant_token(&c.request("A pool 0 60 permits=2").await, "pool");
    let t2 = grant_token(&c.request("A pool 0 60 permits=2").await, "pool");
    let mut waiter = LineClient::connect(cluster.peers[leader]).await;
    waiter.send("A pool 20 60 permits=2").await;
    waiter.expect_silence(Duration::from_millis(200)).await;
    assert_eq!(
        c.request("A pool 0 60 permits=3").await,
        "E A pool the key has 2 permits"
    );
    assert_eq!(c.request(&format!("R pool {t1}")).await, "R pool");
    let t3 = grant_token(&waiter.recv().await, "pool");
    assert!(t3 > t2, "{t3} after {t2}");
    // A writer holds; two readers wait, and pass together when it leaves.
    let w = grant_token(&c.request("A rw 0 60").await, "rw");
    let mut readers = Vec::new();
    for _ in 0..2 {
        let mut r = LineClient::connect(cluster.peers[leader]).await;
        r.send("A rw 20 60 mode=shared").await;
        readers.push(r);
    }
    readers[1].expect_silence(Duration::from_millis(200)).await;
    assert_eq!(c.request(&format!("R rw {w}")).await, "R rw");
    for r in &mut readers {
        assert!(grant_token(&r.recv().await, "rw") > w);
    }
    let q = c.request("Q rw").await;
    assert_eq!((field(&q, "mode"), field(&q, "holders")), ("shared", "2"));
    // Every node applied the same: the followers' tables hold the grants.
    cluster.wait_replicated(t3, RAFT_SETTLE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raft_values_commit_and_a_watch_is_answered_on_a_change_and_redirected_by_followers() {
    let _serial = RAFT_SERIAL.lock().await;
    let (cluster, leader, mut c) = raft_leader(&[]).await;
    let t = grant_token(&c.request("A chief 0 60 value=a").await, "chief");
    let q = c.request("Q chief").await;
    assert_eq!(holders_without_lease(&q), vec![format!("{t},a")]);
    // A client that saw nothing is answered at once (after a read round).
    let now = c.request("W chief 10 -").await;
    assert_eq!(field(&now, "state"), field(&q, "state"), "{now}");
    // One that saw the state waits for the next committed change: a V.
    let mut watcher = LineClient::connect(cluster.peers[leader]).await;
    watcher
        .send(&format!("W chief 30 {}", field(&q, "state")))
        .await;
    watcher.expect_silence(Duration::from_millis(300)).await;
    assert_eq!(c.request(&format!("V chief {t} b")).await, "V chief");
    let changed = watcher.recv().await;
    assert_eq!(holders_without_lease(&changed), vec![format!("{t},b")]);
    assert_eq!(
        c.request(&format!("V chief {} c", t + 1000)).await,
        "N V chief"
    );
    // A follower sends W to the leader.
    let follower = (leader + 1) % 3;
    let mut f = LineClient::connect(cluster.peers[follower]).await;
    assert_eq!(
        f.request("W chief 1 -").await,
        format!("M W chief {}", cluster.peers[leader])
    );
    // A wait that runs out answers the unchanged state.
    let tag = field(&changed, "state").to_string();
    let ran_out = c.request(&format!("W chief 0.3 {tag}")).await;
    assert_eq!(field(&ran_out, "state"), tag, "{ran_out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_pending_on_a_killed_raft_leader_is_sent_again_and_its_tag_still_works() {
    let _serial = RAFT_SERIAL.lock().await;
    let (mut cluster, leader, mut c) = raft_leader(&[]).await;
    let t1 = grant_token(&c.request("A pool 0 60 permits=3 value=x").await, "pool");
    let t2 = grant_token(&c.request("A pool 0 60 permits=3").await, "pool");
    let tag = field(&c.request("Q pool").await, "state").to_string();
    let mut watcher = LineClient::connect(cluster.peers[leader]).await;
    watcher.send(&format!("W pool 30 {tag}")).await;
    watcher.expect_silence(Duration::from_millis(200)).await;
    cluster.nodes[leader].kill();
    watcher.expect_eof().await;
    let (next, _) = cluster.wait_leader(RAFT_SETTLE).await;
    assert_ne!(next, leader);
    // The client sends its W again, with the tag it had: the state is the
    // same on the new leader, so the watch waits for the next change.
    let mut watcher = LineClient::connect(cluster.peers[next]).await;
    watcher.send(&format!("W pool 30 {tag}")).await;
    watcher.expect_silence(Duration::from_millis(300)).await;
    let mut c = LineClient::connect(cluster.peers[next]).await;
    assert_eq!(c.request(&format!("R pool {t2}")).await, "R pool");
    let changed = watcher.recv().await;
    assert_eq!(holders_without_lease(&changed), vec![format!("{t1},x")]);
    let t3 = grant_token(&c.request("A pool 0 60 permits=3").await, "pool");
    assert!(t3 > t2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raft_watches_have_their_limits() {
    let _serial = RAFT_SERIAL.lock().await;
    let limits = ["--max-watches", "2", "--max-watches-per-connection", "1"];
    let (cluster, leader, _) = raft_leader(&limits).await;
    let mut a = LineClient::connect(cluster.peers[leader]).await;
    a.send("W k 30 -").await;
    a.expect_silence(Duration::from_millis(200)).await;
    assert_eq!(a.request("W j 30 -").await, "E W j too many watches");
    let mut b = LineClient::connect(cluster.peers[leader]).await;
    b.send("W k 30 -").await;
    b.expect_silence(Duration::from_millis(200)).await;
    let mut c = LineClient::connect(cluster.peers[leader]).await;
    assert_eq!(c.request("W k 30 -").await, "E W k too many watches");
    // Plain 1.1 requests are served as before, and answer the watches.
    let t = grant_token(&c.request("A k 5 10").await, "k");
    assert!(a.recv().await.starts_with("W k token="));
    assert!(b.recv().await.starts_with("W k token="));
    assert_eq!(c.request(&format!("R k {t}")).await, "R k");
}
