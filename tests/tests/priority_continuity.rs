//! Black-box tests of the priority cluster's continuity guarantees beyond the
//! basic scenarios of `priority_cluster.rs`: a restarted standby catches up by
//! a full copy, failover down to the last node and back keeps every lock,
//! leases (and their renewals) keep running across a promotion, and a waiter
//! on a stopping active is redirected to its successor.

mod priority_support;

use std::time::Duration;

use baton_tests::cluster::Cluster;
use baton_tests::{grant_token, status_u64, LineClient};
use tokio::io::AsyncWriteExt;
use tokio::time::Instant;

use priority_support::{
    assert_held, connect_raw, grant, read_raw_line, release, Tokens, FAILOVER_BOUND, SERIAL, SETTLE,
};

/// Kills the active node `from` and waits for node `to` to take over within
/// the failover bound.
async fn crash_over(cluster: &mut Cluster, from: usize, to: usize) {
    cluster.kill(from);
    let took = cluster.wait_active(to, SETTLE).await;
    println!("kill -9 of node {from}: node {to} active and agreed after {took:?}");
    assert!(
        took < FAILOVER_BOUND,
        "failover from node {from} to node {to} took {took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_down_to_the_last_node_and_back_keeps_every_lock() {
    let _serial = SERIAL.lock().await;
    let mut cluster = Cluster::start(3, &[]);
    cluster.wait_active(0, SETTLE).await;
    let mut client = cluster.client(0);
    let mut tokens = Tokens::default();
    let mut held: Vec<(String, u64)> = Vec::new();
    let mut take = |key: &str, t: u64, what: &str, held: &mut Vec<(String, u64)>| {
        tokens.record(t, &format!("{key} {what}"));
        held.push((key.to_owned(), t));
    };

    let (t, _) = grant(&mut client, "roll/a", "1", "60").await;
    take("roll/a", t, "on node 0", &mut held);
    // Granted while node 2 is down: node 2 can only learn it from the full
    // copy it must receive when it comes back.
    cluster.kill(2);
    let (t, _) = grant(&mut client, "roll/b", "1", "60").await;
    take("roll/b", t, "on node 0 while node 2 is down", &mut held);
    cluster.restart(2);
    cluster.wait_active(0, SETTLE).await;
    // Node 2 has the full copy before the next grant.
    cluster.wait_replicated(t, SETTLE).await;
    let (t, _) = grant(&mut client, "roll/c", "1", "60").await;
    take("roll/c", t, "on node 0 after node 2 rejoined", &mut held);
    cluster.wait_replicated(t, SETTLE).await;

    crash_over(&mut cluster, 0, 1).await;
    let (t, reply) = grant(&mut client, "roll/d", "1", "60").await;
    assert_eq!(reply.node, 1, "roll/d should be granted by node 1");
    take("roll/d", t, "on node 1", &mut held);
    cluster.wait_replicated(t, SETTLE).await;

    crash_over(&mut cluster, 1, 2).await;
    let mut c2 = LineClient::connect(cluster.addr(2)).await;
    let s = c2.status().await;
    assert_eq!(
        status_u64(&s, "locks"),
        held.len() as u64,
        "the last node standing should hold every lock: {s:?}"
    );
    for (key, t) in &held {
        assert_held(&mut c2, key, *t).await;
    }
    let t = grant_token(&c2.request("A roll/e 1 60").await, "roll/e");
    take("roll/e", t, "on node 2, the last node standing", &mut held);
    cluster.wait_replicated(t, SETTLE).await;

    // Back up, in reverse: each returning node joins, catches up and takes
    // over by handoff.
    cluster.restart(1);
    let took = cluster.wait_active(1, SETTLE).await;
    println!("node 1 restarted: active and agreed after {took:?}");
    cluster.restart(0);
    let took = cluster.wait_active(0, SETTLE).await;
    println!("node 0 restarted: active and agreed after {took:?}");

    let mut c0 = LineClient::connect(cluster.addr(0)).await;
    // By handoff the table comes with the role. Under load node 0 may
    // promote itself before it hears node 1 (two actives): node 1 then
    // steps down, names node 0, and hands its table over just after.
    c0.wait_status("holding every lock", SETTLE, |s| {
        status_u64(s, "locks") == held.len() as u64
    })
    .await;
    for (key, t) in &held {
        assert_held(&mut c0, key, *t).await;
    }
    let fresh = grant_token(&c0.request("A roll/f 1 10").await, "roll/f");
    tokens.record(fresh, "roll/f on node 0 after everything");
    for (key, t) in &held {
        release(&mut c0, key, *t).await;
    }
    release(&mut c0, "roll/f", fresh).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_and_its_renewal_keep_running_across_a_failover() {
    let _serial = SERIAL.lock().await;
    let mut cluster = Cluster::start(3, &[]);
    cluster.wait_active(0, SETTLE).await;
    let mut c0 = LineClient::connect(cluster.addr(0)).await;
    // Lease 2 s, renewed for 2 s half a second later: the grant ends 2.5 s
    // after it was made. Kill at 1 s, promotion about 0.35 s later: a new
    // active that restarted the lease at promotion would free it near 3.3 s,
    // one that missed the renewal at 2 s, one that lost it at once.
    let t = grant_token(&c0.request("A lease/k 1 2").await, "lease/k");
    let granted = Instant::now();
    tokio::time::sleep_until(granted + Duration::from_millis(500)).await;
    assert_eq!(c0.request(&format!("K lease/k {t} 2")).await, "K lease/k");
    let renewed = granted.elapsed();
    tokio::time::sleep_until(granted + Duration::from_secs(1)).await;
    crash_over(&mut cluster, 0, 1).await;

    let mut c1 = LineClient::connect(cluster.addr(1)).await;
    c1.set_timeout(Duration::from_secs(5));
    let line = c1.request("A lease/k 5 10").await;
    let freed = granted.elapsed();
    let t2 = grant_token(&line, "lease/k");
    assert!(t2 > t, "token {t2} after the expiry not above {t}");
    let due = renewed + Duration::from_secs(2);
    println!("lease renewed {renewed:?} after the grant, due to end at {due:?}; node 1 freed it at {freed:?}");
    assert!(
        freed + Duration::from_millis(50) >= due,
        "node 1 freed the lease at {freed:?}, before it was due ({due:?})"
    );
    assert!(
        freed <= due + Duration::from_millis(600),
        "node 1 freed the lease at {freed:?}, long after it was due ({due:?})"
    );
    release(&mut c1, "lease/k", t2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_on_a_stopping_active_is_redirected_to_its_successor() {
    let _serial = SERIAL.lock().await;
    let mut cluster = Cluster::start(3, &[]);
    cluster.wait_active(0, SETTLE).await;
    let a1 = cluster.addr(1);
    let mut c0 = LineClient::connect(cluster.addr(0)).await;
    let t1 = grant_token(&c0.request("A wait/held 1 60").await, "wait/held");
    let mut waiter = connect_raw(cluster.addr(0)).await;
    if let Err(e) = waiter.get_mut().write_all(b"A wait/held 5 60\n").await {
        panic!("cannot send the waiting acquire: {e}");
    }
    let s = c0
        .wait_status("with one waiter", Duration::from_secs(2), |s| {
            status_u64(s, "waiters") == 1
        })
        .await;
    assert_eq!(status_u64(&s, "locks"), 1, "{s:?}");

    let status = tokio::task::block_in_place(|| cluster.terminate(0));
    assert!(
        status.success(),
        "node 0 should exit 0 on SIGTERM: {status}"
    );
    let answer = read_raw_line(&mut waiter, Duration::from_secs(2)).await;
    assert_eq!(
        answer,
        Some(format!("M A wait/held {a1}")),
        "a waiter queued on the stopping active should be redirected to node 1 (None: closed or silent)"
    );

    // Re-sent to the successor, it waits behind the holder that the handoff
    // carried over, and gets the key when it is released.
    cluster.wait_active(1, Duration::from_secs(2)).await;
    let mut c1 = LineClient::connect(a1).await;
    c1.send("A wait/held 5 60").await;
    c1.expect_silence(Duration::from_millis(200)).await;
    let mut holder = LineClient::connect(a1).await;
    release(&mut holder, "wait/held", t1).await;
    let t2 = grant_token(&c1.recv().await, "wait/held");
    assert!(t2 > t1, "token {t2} not above {t1}");
    release(&mut c1, "wait/held", t2).await;
}
