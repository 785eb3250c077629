//! Black-box tests of the priority cluster (issue 4): three real `batond`
//! nodes on loopback, started with `--mode priority` and one peer list, seen
//! only through the client protocol and signals.
//!
//! Covered: election of the first node and redirects from standbys; kill -9
//! of the active (failover time, locks kept, old tokens still release, new
//! tokens higher); graceful stop by SIGTERM and SIGINT (handoff gap, locks
//! kept, exit 0); the old active restarted (rejoins, takes over again, locks
//! kept); SIGSTOP of the active past the failure timeout then SIGCONT (one
//! active again, tokens never go back).
//!
//! Timing-sensitive, so the tests run one at a time (a shared lock) and print
//! what they measured.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use baton_tests::cluster::{field, probe_status, Cluster, ClusterClient, Reply};
use baton_tests::{grant_token, status_u64, LineClient};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::Mutex;
use tokio::time::Instant;

/// One cluster at a time: three nodes per test on a small shared machine
/// already strain the timings these tests measure.
static SERIAL: Mutex<()> = Mutex::const_new(());

/// The contract's default failure timeout.
const FAILURE_TIMEOUT: Duration = Duration::from_millis(300);

/// Generous bound for a cluster to agree on its active node after a start.
const SETTLE: Duration = Duration::from_secs(10);

/// A crash failover is "well under 1 s" by contract (failure timeout 0.3 s
/// plus a heartbeat): 1 s leaves room for a loaded machine.
const FAILOVER_BOUND: Duration = Duration::from_secs(1);

/// The handoff gap a client sees has a goal of 100 ms; this is the bound
/// asserted.
const GAP_BOUND: Duration = Duration::from_secs(1);

/// Bound on any single request through the redirect-following client.
const REQUEST_BOUND: Duration = Duration::from_secs(10);

/// Tokens in the order they were handed out; each must exceed all before.
#[derive(Debug, Default)]
struct Tokens(Vec<(u64, String)>);

impl Tokens {
    fn record(&mut self, token: u64, what: &str) {
        if let Some((last, last_what)) = self.0.last() {
            assert!(
                token > *last,
                "token {token} ({what}) is not above the earlier token {last} ({last_what}); all so far: {:?}",
                self.0
            );
        }
        self.0.push((token, what.to_owned()));
    }

    fn max(&self) -> u64 {
        self.0.iter().map(|(t, _)| *t).max().unwrap_or(0)
    }
}

/// `A key wait lease` through the cluster client; panics unless granted.
async fn grant(client: &mut ClusterClient, key: &str, wait: &str, lease: &str) -> (u64, Reply) {
    let reply = client
        .request(&format!("A {key} {wait} {lease}"), REQUEST_BOUND)
        .await;
    (grant_token(&reply.line, key), reply)
}

/// The key is still held: an acquire with a short wait must time out.
async fn assert_held(c: &mut LineClient, key: &str, token: u64) {
    let line = c.request(&format!("A {key} 0.2 60")).await;
    assert_eq!(
        line,
        format!("T {key}"),
        "{key} (granted with token {token}) should still be held"
    );
}

/// Releases a grant and expects exactly `R key`.
async fn release(c: &mut LineClient, key: &str, token: u64) {
    assert_eq!(
        c.request(&format!("R {key} {token}")).await,
        format!("R {key}"),
        "releasing {key} with its token {token}"
    );
}

/// A status of node `i` right now; panics if it does not answer.
async fn status_of(cluster: &Cluster, i: usize) -> baton_tests::Status {
    match probe_status(cluster.addr(i), Duration::from_secs(2)).await {
        Some(status) => status,
        None => panic!("node {i} ({}) did not answer S", cluster.addr(i)),
    }
}

/// One grant seen by [`churn`].
#[derive(Debug, Clone, Copy)]
struct Grant {
    node: usize,
    token: u64,
    at: Instant,
}

/// What a [`churn`] client went through.
#[derive(Debug, Default)]
struct ChurnLog {
    grants: Vec<Grant>,
    /// Acquires answered `T` after an attempt was lost: the lost attempt may
    /// have been granted.
    ambiguous_timeouts: usize,
    /// Releases answered `N R` although no attempt of them was lost.
    lost_releases: Vec<String>,
    redirects: usize,
    unknown_active: usize,
    lost_attempts: usize,
}

/// Acquires and releases fresh keys `<prefix>-<n>` one after the other
/// against whichever node is active, until `stop` (or 30 s). Panics on any
/// answer a correct cluster cannot give.
async fn churn(
    mut client: ClusterClient,
    prefix: String,
    pace: Duration,
    stop: Arc<AtomicBool>,
) -> ChurnLog {
    let mut log = ChurnLog::default();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut n = 0u64;
    while !stop.load(Ordering::SeqCst) && Instant::now() < deadline {
        n += 1;
        let key = format!("{prefix}-{n}");
        let reply = client
            .request(&format!("A {key} 0.05 10"), REQUEST_BOUND)
            .await;
        if reply.line == format!("T {key}") && reply.ambiguous {
            log.ambiguous_timeouts += 1;
            continue;
        }
        let token = grant_token(&reply.line, &key);
        log.grants.push(Grant {
            node: reply.node,
            token,
            at: reply.at,
        });
        let released = client
            .request(&format!("R {key} {token}"), REQUEST_BOUND)
            .await;
        if released.line == format!("N R {key}") {
            if !released.ambiguous {
                log.lost_releases
                    .push(format!("{key} token {token} on node {}", released.node));
            }
        } else {
            assert_eq!(
                released.line,
                format!("R {key}"),
                "release of {key} {token}"
            );
        }
        if !pace.is_zero() {
            tokio::time::sleep(pace).await;
        }
    }
    log.redirects = client.redirects();
    log.unknown_active = client.unknown_active();
    log.lost_attempts = client.lost();
    log
}

fn spawn_churn(
    client: ClusterClient,
    prefix: &str,
    pace: Duration,
) -> (Arc<AtomicBool>, tokio::task::JoinHandle<ChurnLog>) {
    let stop = Arc::new(AtomicBool::new(false));
    let task = tokio::spawn(churn(client, prefix.to_owned(), pace, Arc::clone(&stop)));
    (stop, task)
}

async fn finish_churn(stop: Arc<AtomicBool>, task: tokio::task::JoinHandle<ChurnLog>) -> ChurnLog {
    stop.store(true, Ordering::SeqCst);
    match task.await {
        Ok(log) => log,
        Err(e) => panic!("the churn client failed: {e}"),
    }
}

fn assert_tokens_rise(grants: &[Grant], above: u64, what: &str) {
    let mut last = above;
    for (i, g) in grants.iter().enumerate() {
        assert!(
            g.token > last,
            "{what}: grant #{i} on node {} has token {} not above {last}",
            g.node,
            g.token
        );
        last = g.token;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_cluster_makes_the_first_node_active_and_standbys_redirect() {
    let _serial = SERIAL.lock().await;
    let started = Instant::now();
    let mut cluster = Cluster::start(3, &[]);
    let active = cluster.wait_single_active(SETTLE).await;
    println!(
        "fresh cluster: one agreed active {:?} after the first start",
        started.elapsed()
    );
    assert_eq!(active, 0, "the first node of the peer list must be active");
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

    let last_old = log.grants.iter().rposition(|g| g.node == 0);
    let first_new = log.grants.iter().position(|g| g.node != 0);
    let (Some(last_old), Some(first_new)) = (last_old, first_new) else {
        panic!("the churn client needs grants from both the old and the new active: {log:?}");
    };
    assert!(
        last_old < first_new,
        "grants from node 0 after grants from another node: {:?}",
        &log.grants[first_new.min(last_old)..=last_old.max(first_new)]
    );
    let new_node = log.grants[first_new].node;
    assert_eq!(new_node, 1, "the successor must be node 1");
    assert!(
        log.grants[first_new..].iter().all(|g| g.node == 1),
        "after the handoff every grant comes from node 1"
    );
    let gap = log.grants[first_new].at - log.grants[last_old].at;
    println!(
        "{signal} handoff: client gap {gap:?} (goal < 100 ms); node 0 exited {exited:?} after the signal; \
         churn: {} grants ({} on node 0), {} redirects, {} `M -`, {} lost attempts, {} ambiguous timeouts",
        log.grants.len(),
        last_old + 1,
        log.redirects,
        log.unknown_active,
        log.lost_attempts,
        log.ambiguous_timeouts
    );
    assert!(gap < GAP_BOUND, "handoff gap {gap:?} after {signal}");
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
    tokio::time::sleep(Duration::from_millis(200)).await;
    cluster.kill(0);
    cluster.wait_active(1, SETTLE).await;
    let (tb, reply) = grant(&mut client, "back/b", "1", "60").await;
    assert_eq!(reply.node, 1, "back/b should be granted by node 1");
    tokens.record(tb, "back/b on node 1");
    tokio::time::sleep(Duration::from_millis(200)).await;

    cluster.restart(0);
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
    assert!(
        cluster.is_up(1),
        "node 1 should hand over and stay up as a standby"
    );
    let s1 = status_of(&cluster, 1).await;
    assert_eq!(field(&s1, "role"), "standby", "{s1:?}");

    let mut c0 = LineClient::connect(cluster.addr(0)).await;
    let s = c0.status().await;
    assert_eq!(
        status_u64(&s, "locks"),
        2,
        "locks after the takeover: {s:?}"
    );
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
    tokio::time::sleep(Duration::from_millis(200)).await;

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
        "SIGCONT churn: {} grants ({} on node 0), {} redirects, {} `M -`, {} lost attempts, \
         {} ambiguous timeouts, releases lost to the dual-active episode: {:?}",
        log.grants.len(),
        log.grants.iter().filter(|g| g.node == 0).count(),
        log.redirects,
        log.unknown_active,
        log.lost_attempts,
        log.ambiguous_timeouts,
        log.lost_releases
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

/// Reads one line from a raw connection; `None` on close or after `wait`.
async fn read_raw_line(reader: &mut BufReader<TcpStream>, wait: Duration) -> Option<String> {
    let mut line = Vec::new();
    match tokio::time::timeout(wait, reader.read_until(b'\n', &mut line)).await {
        Ok(Ok(_)) if line.last() == Some(&b'\n') => {
            line.pop();
            Some(String::from_utf8_lossy(&line).into_owned())
        }
        _ => None,
    }
}

async fn connect_raw(addr: SocketAddr) -> BufReader<TcpStream> {
    match TcpStream::connect(addr).await {
        Ok(stream) => BufReader::new(stream),
        Err(e) => panic!("cannot connect to {addr}: {e}"),
    }
}

/// PROTOCOL.md: every grant gets a token above every earlier grant by any
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
