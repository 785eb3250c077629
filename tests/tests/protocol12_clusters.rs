//! Protocol 1.2 in the cluster modes, real `batond` processes: a priority
//! active replicates semaphores, shared grants and values to the standbys,
//! whose answer to `W` and `V` is `M`, and a graceful stop answers the
//! active's pending watches `M W` and hands every holder and value on; a
//! Raft cluster of this release refuses 1.2 requests with a clear `E`.

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raft_cluster_refuses_1_2_requests_with_a_clear_e() {
    let _serial = RAFT_SERIAL.lock().await;
    let mut cluster = RaftCluster::start(3);
    let (leader, _) = cluster.wait_leader(RAFT_SETTLE).await;
    let mut c = LineClient::connect(cluster.peers[leader]).await;
    let reason = "raft mode does not serve permits, shared locks, values or watches yet";
    assert_eq!(
        c.request("A k 1 10 permits=2").await,
        format!("E A k {reason}")
    );
    assert_eq!(
        c.request("A k 1 10 mode=shared").await,
        format!("E A k {reason}")
    );
    assert_eq!(c.request("V k 1 x").await, format!("E V k {reason}"));
    assert_eq!(c.request("W k 1 -").await, format!("E W k {reason}"));
    // Plain 1.1 requests are served as before.
    let t = grant_token(&c.request("A k 5 10").await, "k");
    assert_eq!(c.request(&format!("R k {t}")).await, "R k");
}
