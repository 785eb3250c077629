//! Black-box tests of the priority cluster: three real `batond`
//! nodes on loopback, started with `--mode priority` and one peer list, seen
//! only through the client protocol and signals.
//!
//! Covered: election of the first node and redirects from standbys; kill -9
//! of the active (failover time, locks kept, old tokens still release, new
//! tokens higher); graceful stop by SIGTERM and SIGINT (handoff gap, locks
//! kept, exit 0); the old active restarted (rejoins, takes over again, locks
//! kept); SIGSTOP of the active past the failure timeout then SIGCONT (one
//! active again, tokens never go back). More in `priority_continuity.rs`.
//!
//! Timing-sensitive, so the tests run one at a time (a shared lock) and print
//! what they measured.

mod priority_support;

use std::time::Duration;

use baton_tests::cluster::{field, Cluster};
use baton_tests::{grant_token, status_u64, LineClient};
use tokio::io::AsyncWriteExt;
use tokio::time::Instant;

use priority_support::{
    assert_held, assert_tokens_rise, churn_summary, connect_raw, finish_churn, grant, handoff_gap,
    read_raw_line, release, spawn_churn, status_of, Tokens, FAILOVER_BOUND, FAILURE_TIMEOUT,
    GAP_BOUND, SERIAL, SETTLE,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_cluster_makes_the_first_node_active_and_standbys_redirect() {
    let _serial = SERIAL.lock().await;
    let started = Instant::now();
    let mut cluster = Cluster::start(3, &[]);
    // Under load a later node may serve for a moment before it hears the
    // first (its link was slow); it then hands the role to the first, as
    // the peer order says: the cluster settles with node 0 active.
    cluster.wait_active(0, SETTLE).await;
    println!(
        "fresh cluster: node 0 agreed active {:?} after the first start",
        started.elapsed()
    );
    let a0 = cluster.addr(0);

    let mut c0 = LineClient::connect(a0).await;
    let s = c0.status().await;
    assert_eq!(field(&s, "role"), "active", "{s:?}");
    assert_eq!(field(&s, "mode"), "priority", "{s:?}");
    assert_eq!(field(&s, "self"), a0.to_string(), "{s:?}");
    assert_eq!(field(&s, "active"), a0.to_string(), "{s:?}");
    status_u64(&s, "locks");
    status_u64(&s, "waiters");
    let before = status_u64(&s, "token");
    let t = grant_token(&c0.request("A fresh/held 1 60").await, "fresh/held");
    assert!(t > before, "token {t} not above status token={before}");

    for i in 1..3 {
        let mut c = LineClient::connect(cluster.addr(i)).await;
        let s = c.status().await;
        assert_eq!(field(&s, "role"), "standby", "node {i}: {s:?}");
        assert_eq!(field(&s, "mode"), "priority", "node {i}: {s:?}");
        assert_eq!(field(&s, "self"), cluster.addr(i).to_string(), "{s:?}");
        assert_eq!(field(&s, "active"), a0.to_string(), "node {i}: {s:?}");
        status_u64(&s, "locks");
        status_u64(&s, "waiters");

        // Pipelined: all three are answered, each with a redirect to node 0.
        c.send("A fresh/held 1 60").await;
        c.send(&format!("R fresh/held {t}")).await;
        c.send(&format!("K fresh/held {t} 60")).await;
        let mut got = vec![c.recv().await, c.recv().await, c.recv().await];
        got.sort();
        let mut want = vec![
            format!("M A fresh/held {a0}"),
            format!("M K fresh/held {a0}"),
            format!("M R fresh/held {a0}"),
        ];
        want.sort();
        assert_eq!(got, want, "node {i} should redirect every A/R/K to node 0");
        c.expect_silence(Duration::from_millis(100)).await;

        // The grant reached the standby by replication.
        c.wait_status("at the replicated token", Duration::from_secs(2), |s| {
            status_u64(s, "token") >= t
        })
        .await;
    }

    // The standbys did not act on the requests they redirected.
    let s = c0.status().await;
    assert_eq!(status_u64(&s, "locks"), 1, "{s:?}");
    assert_eq!(
        c0.request(&format!("K fresh/held {t} 60")).await,
        "K fresh/held"
    );
    release(&mut c0, "fresh/held", t).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_the_active_promotes_the_next_node_with_the_locks() {
    let _serial = SERIAL.lock().await;
    let mut cluster = Cluster::start(3, &[]);
    cluster.wait_active(0, SETTLE).await;
    let mut client = cluster.client(0);
    let mut tokens = Tokens::default();
    let mut held = Vec::new();
    for i in 0..4 {
        let key = format!("crash/held-{i}");
        let (t, reply) = grant(&mut client, &key, "1", "60").await;
        assert_eq!(reply.node, 0, "grant of {key} should come from node 0");
        tokens.record(t, &key);
        held.push((key, t));
    }
    let (t, _) = grant(&mut client, "crash/late", "1", "60").await;
    tokens.record(t, "crash/late");
    held.push(("crash/late".to_owned(), t));
    // The contract: a grant made 200 ms before the crash is replicated.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let max_before = tokens.max();

    cluster.kill(0);
    let took = cluster.wait_active(1, SETTLE).await;
    println!("kill -9 failover: node 1 active and agreed {took:?} after the kill");
    assert!(
        took < FAILOVER_BOUND,
        "failover took {took:?}, the contract is about the failure timeout ({FAILURE_TIMEOUT:?}) plus a heartbeat"
    );

    let a1 = cluster.addr(1);
    let mut c2 = LineClient::connect(cluster.addr(2)).await;
    assert_eq!(
        c2.request("A crash/probe 1 10").await,
        format!("M A crash/probe {a1}")
    );

    let mut c1 = LineClient::connect(a1).await;
    let s = c1.status().await;
    assert_eq!(
        status_u64(&s, "locks"),
        5,
        "held locks after failover: {s:?}"
    );
    assert!(
        status_u64(&s, "token") >= max_before,
        "token= after promotion is below the replicated {max_before}: {s:?}"
    );
    for (key, t) in &held {
        assert_held(&mut c1, key, *t).await;
    }
    let fresh = grant_token(&c1.request("A crash/new 1 10").await, "crash/new");
    tokens.record(fresh, "crash/new after failover");
    for (key, t) in &held {
        assert_eq!(
            c1.request(&format!("K {key} {t} 60")).await,
            format!("K {key}"),
            "renewing a pre-failover grant"
        );
        release(&mut c1, key, *t).await;
    }
    // Released keys pass on with tokens above everything before.
    for (key, _) in &held {
        let t = grant_token(&c1.request(&format!("A {key} 1 10")).await, key);
        tokens.record(t, &format!("{key} again"));
        release(&mut c1, key, t).await;
    }
    release(&mut c1, "crash/new", fresh).await;
}

/// SIGTERM or SIGINT of the active while a client churns: the handoff gap
/// the client sees, held locks, exit status.
async fn graceful_stop(signal: &str, stop: impl FnOnce(&mut Cluster) -> std::process::ExitStatus) {
    let mut cluster = Cluster::start(3, &[]);
    cluster.wait_active(0, SETTLE).await;
    let mut c0 = LineClient::connect(cluster.addr(0)).await;
    let mut held = Vec::new();
    for i in 0..3 {
        let key = format!("stop/held-{i}");
        let t = grant_token(&c0.request(&format!("A {key} 1 60")).await, &key);
        held.push((key, t));
    }

    let (stop_churn, task) = spawn_churn(cluster.client(0), "stop/churn", Duration::ZERO);
    tokio::time::sleep(Duration::from_millis(400)).await;
    // Granted just before the signal: the handoff carries the final state.
    let t = grant_token(&c0.request("A stop/last 1 60").await, "stop/last");
    held.push(("stop/last".to_owned(), t));
    let signalled = Instant::now();
    let status = tokio::task::block_in_place(|| stop(&mut cluster));
    let exited = signalled.elapsed();
    assert!(
        status.success(),
        "the active should exit 0 after {signal}: {status}"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let log = finish_churn(stop_churn, task).await;

    let gap = handoff_gap(&log, 0, 1);
    println!(
        "{signal} handoff: client gap {gap:?} (goal < 100 ms); node 0 exited {exited:?} after the signal; churn: {}",
        churn_summary(&log)
    );
    assert!(gap < GAP_BOUND, "handoff gap {gap:?} after {signal}");
    // Until the successor confirms (one round trip), nobody serves: the old
    // active answers `M ... -` rather than a redirect the successor could
    // send back; the gap bound above covers those answers.
    assert_tokens_rise(&log.grants, 0, "churn across the handoff");
    assert!(
        log.lost_releases.is_empty(),
        "releases of grants answered `N R` after a graceful handoff (grants lost): {:?}",
        log.lost_releases
    );

    let took = cluster.wait_active(1, Duration::from_secs(2)).await;
    println!("{signal} handoff: cluster agreed on node 1 {took:?} after node 0 exited");
    let mut c1 = LineClient::connect(cluster.addr(1)).await;
    let s = c1.status().await;
    if log.ambiguous_timeouts == 0 {
        assert_eq!(
            status_u64(&s, "locks"),
            held.len() as u64,
            "held locks on node 1: {s:?}"
        );
    }
    let last_churn = log.grants.last().map(|g| g.token).unwrap_or(0);
    for (key, t) in &held {
        assert_held(&mut c1, key, *t).await;
    }
    let fresh = grant_token(&c1.request("A stop/after 1 10").await, "stop/after");
    let max_before = held
        .iter()
        .map(|(_, t)| *t)
        .max()
        .unwrap_or(0)
        .max(last_churn);
    assert!(fresh > max_before, "token {fresh} not above {max_before}");
    for (key, t) in &held {
        release(&mut c1, key, *t).await;
    }
    release(&mut c1, "stop/after", fresh).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_of_the_active_hands_over_with_a_short_gap_and_no_lost_lock() {
    let _serial = SERIAL.lock().await;
    graceful_stop("SIGTERM", |cluster| cluster.terminate(0)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_of_the_active_hands_over_with_a_short_gap_and_no_lost_lock() {
    let _serial = SERIAL.lock().await;
    graceful_stop("SIGINT", |cluster| cluster.interrupt(0)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_old_active_restarted_rejoins_and_takes_over_without_losing_locks() {
    let _serial = SERIAL.lock().await;
    let mut cluster = Cluster::start(3, &[]);
    cluster.wait_active(0, SETTLE).await;
    let mut client = cluster.client(0);
    let mut tokens = Tokens::default();

    let (ta, _) = grant(&mut client, "back/a", "1", "60").await;
    tokens.record(ta, "back/a on node 0");
    cluster.wait_replicated(ta, SETTLE).await;
    cluster.kill(0);
    cluster.wait_active(1, SETTLE).await;
    let (tb, reply) = grant(&mut client, "back/b", "1", "60").await;
    assert_eq!(reply.node, 1, "back/b should be granted by node 1");
    tokens.record(tb, "back/b on node 1");
    cluster.wait_replicated(tb, SETTLE).await;

    // A client keeps acquiring and releasing through both steps.
    let (stop, task) = spawn_churn(cluster.client(1), "back/churn", Duration::from_millis(1));
    tokio::time::sleep(Duration::from_millis(200)).await;
    tokio::task::block_in_place(|| cluster.restart(0));
    let restarted = Instant::now();
    let first = status_of(&cluster, 0).await;
    assert_eq!(
        field(&first, "role"),
        "standby",
        "a node that comes back must join as a standby first: {first:?}"
    );
    cluster.wait_active(0, SETTLE).await;
    println!(
        "restart: node 0 active and agreed {:?} after it printed `listening`",
        restarted.elapsed()
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let log = finish_churn(stop, task).await;
    let gap = handoff_gap(&log, 1, 0);
    println!(
        "restart: client gap {gap:?} at the takeover by node 0; churn: {}",
        churn_summary(&log)
    );
    assert!(gap < GAP_BOUND, "takeover gap {gap:?}");
    assert_tokens_rise(&log.grants, tb, "churn across the rejoin and takeover");
    assert!(
        log.lost_releases.is_empty(),
        "releases answered `N R` through the rejoin and takeover (grants lost): {:?}",
        log.lost_releases
    );
    if let Some(last) = log.grants.last() {
        tokens.record(last.token, "last churn grant");
    }
    assert!(
        cluster.is_up(1),
        "node 1 should hand over and stay up as a standby"
    );
    let s1 = status_of(&cluster, 1).await;
    assert_eq!(field(&s1, "role"), "standby", "{s1:?}");

    let mut c0 = LineClient::connect(cluster.addr(0)).await;
    let s = c0.status().await;
    if log.ambiguous_timeouts == 0 {
        assert_eq!(
            status_u64(&s, "locks"),
            2,
            "locks after the takeover: {s:?}"
        );
    }
    assert_held(&mut c0, "back/a", ta).await;
    assert_held(&mut c0, "back/b", tb).await;
    let tc = grant_token(&c0.request("A back/c 1 10").await, "back/c");
    tokens.record(tc, "back/c on node 0 after the takeover");
    release(&mut c0, "back/a", ta).await;
    release(&mut c0, "back/b", tb).await;
    release(&mut c0, "back/c", tc).await;
    let mut c1 = LineClient::connect(cluster.addr(1)).await;
    assert_eq!(
        c1.request("A back/d 1 10").await,
        format!("M A back/d {}", cluster.addr(0))
    );
}

/// SIGSTOP node 0 until node 1 promotes and grants; returns the tokens
/// granted so far and the grant node 0 made (and replicated) before the
/// pause, with node 0 still paused.
async fn pause_until_node_1_grants(cluster: &mut Cluster, prefix: &str) -> (Tokens, (String, u64)) {
    cluster.wait_active(0, SETTLE).await;
    let mut client = cluster.client(0);
    let mut tokens = Tokens::default();
    let first = format!("{prefix}/a");
    let (t, _) = grant(&mut client, &first, "1", "60").await;
    tokens.record(t, "on node 0 before the pause");
    cluster.wait_replicated(t, SETTLE).await;

    cluster.pause(0);
    let took = cluster.wait_active(1, SETTLE).await;
    println!("SIGSTOP: node 1 active and agreed {took:?} after node 0 stopped");
    let mut client = cluster.client(1);
    for i in 0..3 {
        let key = format!("{prefix}/b{i}");
        let (t, reply) = grant(&mut client, &key, "1", "60").await;
        assert_eq!(reply.node, 1, "{key} should be granted by node 1");
        tokens.record(t, &format!("{key} on node 1 during the pause"));
    }
    (tokens, (first, t))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_active_resumes_into_one_active_and_tokens_never_go_back() {
    let _serial = SERIAL.lock().await;
    let mut cluster = Cluster::start(
        3,
        &["--heartbeat-interval", "0.05", "--failure-timeout", "0.3"],
    );
    let (tokens, (first, first_token)) = pause_until_node_1_grants(&mut cluster, "pause").await;
    let max_before = tokens.max();

    let mut client = cluster.client(1);
    client.set_reply_timeout(Duration::from_secs(1));
    cluster.resume(0);
    let resumed = Instant::now();
    let (stop, task) = spawn_churn(client, "pause/after", Duration::from_millis(5));

    tokio::time::sleep(2 * FAILURE_TIMEOUT).await;
    let active = cluster.wait_single_active(Duration::from_secs(3)).await;
    println!(
        "SIGCONT: exactly one agreed active (node {active}) {:?} after the resume",
        resumed.elapsed()
    );
    cluster.wait_active(0, SETTLE).await;
    println!(
        "SIGCONT: the highest-priority node 0 active and agreed {:?} after the resume",
        resumed.elapsed()
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let log = finish_churn(stop, task).await;
    println!(
        "SIGCONT churn: {} of the grants on node 0; {}",
        log.grants.iter().filter(|g| g.node == 0).count(),
        churn_summary(&log)
    );
    assert!(
        log.grants.iter().any(|g| g.node == 0),
        "the churn client never reached node 0 once it was active again: {log:?}"
    );
    assert_tokens_rise(&log.grants, max_before, "grants after the SIGCONT");

    // Still exactly one active, and the next token is above everything.
    assert_eq!(cluster.wait_single_active(Duration::from_secs(1)).await, 0);
    let mut c0 = LineClient::connect(cluster.addr(0)).await;
    // Granted and replicated before the pause: both sides of the episode
    // hold it, so whichever wins must still hold it.
    assert_held(&mut c0, &first, first_token).await;
    let t = grant_token(&c0.request("A pause/final 1 10").await, "pause/final");
    let last = log.grants.last().map(|g| g.token).unwrap_or(max_before);
    assert!(t > last, "final token {t} not above {last}");
}

/// docs/protocol.md: every grant gets a token above every earlier grant by any
/// node. An acquire that reached the paused active's socket before it was
/// paused is read only after SIGCONT, when node 1 has granted higher tokens:
/// node 0 must not grant it below them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_parked_at_a_paused_active_is_not_granted_below_newer_tokens() {
    let _serial = SERIAL.lock().await;
    let mut cluster = Cluster::start(3, &[]);
    cluster.wait_active(0, SETTLE).await;
    let mut parked = connect_raw(cluster.addr(0)).await;
    let (tokens, _) = pause_until_node_1_grants(&mut cluster, "parked").await;
    let max_before = tokens.max();
    if let Err(e) = parked.get_mut().write_all(b"A parked/x 1 10\n").await {
        panic!("cannot write to the paused node's socket: {e}");
    }

    cluster.resume(0);
    let answer = read_raw_line(&mut parked, Duration::from_secs(5)).await;
    println!("parked request answered {answer:?} (tokens before the SIGCONT up to {max_before})");
    let active = cluster.wait_single_active(SETTLE).await;
    if let Some(line) = &answer {
        if line.starts_with("A ") {
            let t = grant_token(line, "parked/x");
            assert!(
                t > max_before,
                "node 0 granted {line:?} after the SIGCONT, below the token {max_before} node 1 issued before"
            );
        } else {
            let redirect = line.starts_with("M A parked/x ");
            assert!(
                redirect || line == "T parked/x",
                "unexpected answer to the parked acquire: {line:?}"
            );
        }
    }
    let mut client = cluster.client(active);
    let (t, _) = grant(&mut client, "parked/y", "1", "10").await;
    assert!(
        t > max_before,
        "token {t} after the episode not above {max_before}"
    );
}
