//! Black-box tests of the priority cluster under faults that should not move
//! the active: a standby crashes or is paused and comes back. Also the token
//! rule of docs/protocol.md across a restart of the whole cluster, and graceful
//! stops with no live successor or of a standby.

mod priority_support;

use std::time::Duration;

use baton_tests::cluster::{field, probe_status, Cluster};
use baton_tests::{grant_token, LineClient};
use tokio::time::Instant;

use priority_support::{
    assert_held, assert_tokens_rise, churn_summary, finish_churn, grant, handoff_gap,
    longest_pause, release, spawn_churn, FAILOVER_BOUND, GAP_BOUND, SERIAL, SETTLE,
};

/// Longest pause between two grants the active may show while a standby
/// fails: replication is asynchronous, so a lost standby costs it nothing.
const UNDISTURBED: Duration = Duration::from_millis(500);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_a_standby_does_not_disturb_the_active() {
    let _serial = SERIAL.lock().await;
    let mut cluster = Cluster::start(3, &[]);
    cluster.wait_active(0, SETTLE).await;
    let (stop, task) = spawn_churn(cluster.client(0), "lose/churn", Duration::from_millis(1));
    tokio::time::sleep(Duration::from_millis(300)).await;
    tokio::task::block_in_place(|| cluster.kill(1));
    tokio::time::sleep(Duration::from_millis(600)).await;
    let log = finish_churn(stop, task).await;
    let longest = longest_pause(&log);
    println!(
        "standby killed: longest pause between grants {longest:?}; churn: {}",
        churn_summary(&log)
    );
    assert!(
        log.grants.iter().all(|g| g.node == 0),
        "every grant should come from node 0"
    );
    assert!(
        longest < UNDISTURBED,
        "the active stalled {longest:?} when a standby died"
    );
    assert_tokens_rise(&log.grants, 0, "churn while a standby dies");
    assert!(log.lost_releases.is_empty(), "{:?}", log.lost_releases);

    // The remaining standby still follows: it takes over with the lock.
    cluster.wait_active(0, Duration::from_secs(2)).await;
    let mut client = cluster.client(0);
    let (t, _) = grant(&mut client, "lose/held", "1", "60").await;
    cluster.wait_replicated(t, SETTLE).await;
    cluster.kill(0);
    let took = cluster.wait_active(2, SETTLE).await;
    println!("then kill -9 of node 0: node 2 active and agreed after {took:?}");
    assert!(took < FAILOVER_BOUND, "failover to node 2 took {took:?}");
    let mut c2 = LineClient::connect(cluster.addr(2)).await;
    assert_held(&mut c2, "lose/held", t).await;
    let after = log.grants.last().map(|g| g.token).unwrap_or(t).max(t);
    let fresh = grant_token(&c2.request("A lose/new 1 10").await, "lose/new");
    assert!(fresh > after, "token {fresh} not above {after}");
    release(&mut c2, "lose/held", t).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_standby_resumes_as_a_standby_and_catches_up() {
    let _serial = SERIAL.lock().await;
    let mut cluster = Cluster::start(3, &[]);
    cluster.wait_active(0, SETTLE).await;
    let (stop, task) = spawn_churn(cluster.client(0), "nap/churn", Duration::from_millis(2));
    tokio::time::sleep(Duration::from_millis(200)).await;

    tokio::task::block_in_place(|| cluster.pause(1));
    let mut client = cluster.client(0);
    // Granted while node 1 sleeps: it must catch up after the SIGCONT.
    let (t, _) = grant(&mut client, "nap/held", "1", "60").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    tokio::task::block_in_place(|| cluster.resume(1));

    // Node 1 missed heartbeats while stopped; it must not take that for
    // the active's death now that it runs again.
    let a0 = cluster.addr(0).to_string();
    let watch_until = Instant::now() + Duration::from_secs(1);
    let mut seen = Vec::new();
    while Instant::now() < watch_until {
        if let Some(s) = probe_status(cluster.addr(1), Duration::from_millis(500)).await {
            let role = field(&s, "role").to_owned();
            let active = field(&s, "active").to_owned();
            assert!(
                role == "standby" && (active == a0 || active == "-"),
                "node 1 after its SIGCONT, with node 0 alive and active: {s:?} (earlier: {seen:?})"
            );
            if seen.last() != Some(&active) {
                seen.push(active);
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let log = finish_churn(stop, task).await;
    let longest = longest_pause(&log);
    println!(
        "standby paused 1 s: node 1 said active= {seen:?} after the SIGCONT; longest pause between grants {longest:?}; churn: {}",
        churn_summary(&log)
    );
    assert!(
        log.grants.iter().all(|g| g.node == 0),
        "every grant should come from node 0"
    );
    assert!(
        longest < UNDISTURBED,
        "the active stalled {longest:?} while a standby was paused"
    );
    assert_tokens_rise(&log.grants, 0, "churn while a standby is paused");
    assert!(log.lost_releases.is_empty(), "{:?}", log.lost_releases);

    cluster.wait_active(0, Duration::from_secs(2)).await;
    let last = log.grants.iter().map(|g| g.token).max().unwrap_or(t).max(t);
    cluster.wait_replicated(last, SETTLE).await;
    cluster.kill(0);
    let took = cluster.wait_active(1, SETTLE).await;
    println!("then kill -9 of node 0: node 1 active and agreed after {took:?}");
    let mut c1 = LineClient::connect(cluster.addr(1)).await;
    assert_held(&mut c1, "nap/held", t).await;
    release(&mut c1, "nap/held", t).await;
}

/// docs/protocol.md: tokens rise "across failovers and restarts". Without a data
/// directory the locks are gone after a full restart, but no token may be
/// handed out again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_keep_rising_across_a_restart_of_the_whole_cluster() {
    let _serial = SERIAL.lock().await;
    let mut cluster = Cluster::start(3, &[]);
    cluster.wait_active(0, SETTLE).await;
    let mut client = cluster.client(0);
    let mut before = 0;
    for i in 0..5 {
        let (t, _) = grant(&mut client, &format!("all/{i}"), "1", "60").await;
        before = before.max(t);
    }
    for i in (0..3).rev() {
        cluster.kill(i);
    }
    for i in 0..3 {
        cluster.restart(i);
    }
    cluster.wait_active(0, SETTLE).await;
    let mut client = cluster.client(0);
    let (t, _) = grant(&mut client, "all/after", "1", "10").await;
    println!("full restart: last token before {before}, first after {t}");
    assert!(
        t > before,
        "token {t} after the restart not above {before} from before"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_stop_skips_a_dead_successor_and_the_last_node_still_exits() {
    let _serial = SERIAL.lock().await;
    let mut cluster = Cluster::start(3, &[]);
    cluster.wait_active(0, SETTLE).await;
    cluster.kill(1);
    cluster.wait_active(0, Duration::from_secs(2)).await;
    let mut c0 = LineClient::connect(cluster.addr(0)).await;
    let held = grant_token(&c0.request("A skip/held 1 60").await, "skip/held");

    let (stop, task) = spawn_churn(cluster.client(0), "skip/churn", Duration::ZERO);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let status = tokio::task::block_in_place(|| cluster.terminate(0));
    assert!(status.success(), "node 0 should exit 0: {status}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let log = finish_churn(stop, task).await;
    let gap = handoff_gap(&log, 0, 2);
    println!(
        "SIGTERM with node 1 dead: client gap {gap:?} to node 2; churn: {}",
        churn_summary(&log)
    );
    assert!(gap < GAP_BOUND, "handoff gap {gap:?} to node 2");
    assert_tokens_rise(&log.grants, held, "churn across the handoff to node 2");
    assert!(log.lost_releases.is_empty(), "{:?}", log.lost_releases);

    cluster.wait_active(2, Duration::from_secs(2)).await;
    let mut c2 = LineClient::connect(cluster.addr(2)).await;
    assert_held(&mut c2, "skip/held", held).await;

    // Nobody left to hand over to: the stop must not hang on it.
    let signalled = Instant::now();
    let status = tokio::task::block_in_place(|| cluster.terminate(2));
    println!(
        "SIGTERM of the last node: exited {:?} after the signal",
        signalled.elapsed()
    );
    assert!(status.success(), "the last node should exit 0: {status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_stopped_gracefully_exits_and_the_active_carries_on() {
    let _serial = SERIAL.lock().await;
    let mut cluster = Cluster::start(3, &[]);
    cluster.wait_active(0, SETTLE).await;
    let signalled = Instant::now();
    let status = tokio::task::block_in_place(|| cluster.interrupt(2));
    println!(
        "SIGINT of a standby: exited {:?} after the signal",
        signalled.elapsed()
    );
    assert!(status.success(), "the standby should exit 0: {status}");
    cluster.wait_active(0, Duration::from_secs(2)).await;
    let mut client = cluster.client(0);
    let (t, reply) = grant(&mut client, "calm/k", "1", "10").await;
    assert_eq!(reply.node, 0, "node 0 should still serve");
    let mut c0 = LineClient::connect(cluster.addr(0)).await;
    release(&mut c0, "calm/k", t).await;
}

/// The successor is paused when the active stops: its socket still accepts
/// the handoff, but it cannot act on it. The cluster must go on serving
/// (node 2), and once node 1 runs again settle on one active that still
/// holds the locks from before the stop, with tokens above all earlier ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_stop_onto_a_paused_successor_still_leaves_one_active() {
    let _serial = SERIAL.lock().await;
    let mut cluster = Cluster::start(3, &[]);
    cluster.wait_active(0, SETTLE).await;
    let mut c0 = LineClient::connect(cluster.addr(0)).await;
    let held = grant_token(&c0.request("A stuck/held 1 60").await, "stuck/held");
    cluster.wait_replicated(held, SETTLE).await;

    cluster.pause(1);
    let signalled = Instant::now();
    let status = tokio::task::block_in_place(|| cluster.terminate(0));
    let exited = signalled.elapsed();
    assert!(status.success(), "node 0 should exit 0: {status}");
    let mut client = cluster.client(2);
    client.set_reply_timeout(Duration::from_millis(500));
    let (during, reply) = grant(&mut client, "stuck/during", "1", "60").await;
    let served = signalled.elapsed();
    println!(
        "SIGTERM onto a paused successor: node 0 exited after {exited:?}, node {} granted after {served:?}",
        reply.node
    );
    assert_eq!(reply.node, 2, "only node 2 can serve");
    assert!(during > held, "token {during} not above {held}");
    assert!(
        served < Duration::from_secs(3),
        "no grant for {served:?} after the stop"
    );

    cluster.resume(1);
    let resumed = Instant::now();
    let active = cluster.wait_single_active(SETTLE).await;
    println!(
        "SIGCONT of node 1: one agreed active (node {active}) after {:?}",
        resumed.elapsed()
    );
    cluster.wait_active(1, SETTLE).await;
    let mut c1 = LineClient::connect(cluster.addr(1)).await;
    assert_held(&mut c1, "stuck/held", held).await;
    let fresh = grant_token(&c1.request("A stuck/after 1 10").await, "stuck/after");
    assert!(
        fresh > during,
        "token {fresh} on node 1 not above {during} from node 2"
    );
    release(&mut c1, "stuck/held", held).await;
}
