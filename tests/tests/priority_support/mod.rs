//! Helpers shared by the priority-cluster test files: token bookkeeping,
//! held-lock probes, and a churning client that measures handoff gaps.

#![allow(dead_code)] // each test file uses its own subset

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use baton_tests::cluster::{probe_status, Cluster, ClusterClient, Reply};
use baton_tests::{grant_token, LineClient, Status};
use tokio::io::AsyncBufReadExt;
use tokio::io::BufReader;
use tokio::net::TcpStream;
use tokio::sync::Mutex;
use tokio::time::Instant;

/// One cluster at a time: three nodes per test on a small shared machine
/// already strain the timings these tests measure.
pub static SERIAL: Mutex<()> = Mutex::const_new(());

/// The contract's default failure timeout.
pub const FAILURE_TIMEOUT: Duration = Duration::from_millis(300);

/// Generous bound for a cluster to agree on its active node after a start.
pub const SETTLE: Duration = Duration::from_secs(10);

/// A crash failover is "well under 1 s" by contract (failure timeout 0.3 s
/// plus a heartbeat): 1 s leaves room for a loaded machine.
pub const FAILOVER_BOUND: Duration = Duration::from_secs(1);

/// The handoff gap a client sees has a goal of 100 ms; this is the bound
/// asserted.
pub const GAP_BOUND: Duration = Duration::from_secs(1);

/// Bound on any single request through the redirect-following client.
pub const REQUEST_BOUND: Duration = Duration::from_secs(10);

/// Tokens in the order they were handed out; each must exceed all before.
#[derive(Debug, Default)]
pub struct Tokens(Vec<(u64, String)>);

impl Tokens {
    pub fn record(&mut self, token: u64, what: &str) {
        if let Some((last, last_what)) = self.0.last() {
            assert!(
                token > *last,
                "token {token} ({what}) is not above the earlier token {last} ({last_what}); all so far: {:?}",
                self.0
            );
        }
        self.0.push((token, what.to_owned()));
    }

    pub fn max(&self) -> u64 {
        self.0.iter().map(|(t, _)| *t).max().unwrap_or(0)
    }
}

/// `A key wait lease` through the cluster client; panics unless granted.
pub async fn grant(client: &mut ClusterClient, key: &str, wait: &str, lease: &str) -> (u64, Reply) {
    let reply = client
        .request(&format!("A {key} {wait} {lease}"), REQUEST_BOUND)
        .await;
    (grant_token(&reply.line, key), reply)
}

/// The key is still held: an acquire with a short wait must time out.
pub async fn assert_held(c: &mut LineClient, key: &str, token: u64) {
    let line = c.request(&format!("A {key} 0.2 60")).await;
    assert_eq!(
        line,
        format!("T {key}"),
        "{key} (granted with token {token}) should still be held"
    );
}

/// Releases a grant and expects exactly `R key`.
pub async fn release(c: &mut LineClient, key: &str, token: u64) {
    assert_eq!(
        c.request(&format!("R {key} {token}")).await,
        format!("R {key}"),
        "releasing {key} with its token {token}"
    );
}

/// A status of node `i` right now; panics if it does not answer.
pub async fn status_of(cluster: &Cluster, i: usize) -> Status {
    match probe_status(cluster.addr(i), Duration::from_secs(2)).await {
        Some(status) => status,
        None => panic!("node {i} ({}) did not answer S", cluster.addr(i)),
    }
}

/// One grant seen by [`churn`].
#[derive(Debug, Clone, Copy)]
pub struct Grant {
    pub node: usize,
    pub token: u64,
    pub at: Instant,
}

/// What a [`churn`] client went through.
#[derive(Debug, Default)]
pub struct ChurnLog {
    pub grants: Vec<Grant>,
    /// Acquires answered `T` after an attempt was lost: the lost attempt may
    /// have been granted.
    pub ambiguous_timeouts: usize,
    /// Releases answered `N R` although no attempt of them was lost.
    pub lost_releases: Vec<String>,
    pub redirects: usize,
    pub unknown_active: usize,
    pub lost_attempts: usize,
}

/// Acquires and releases fresh keys `<prefix>-<n>` one after the other
/// against whichever node is active, until `stop` (or 30 s). Panics on any
/// answer a correct cluster cannot give.
pub async fn churn(
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

pub fn spawn_churn(
    client: ClusterClient,
    prefix: &str,
    pace: Duration,
) -> (Arc<AtomicBool>, tokio::task::JoinHandle<ChurnLog>) {
    let stop = Arc::new(AtomicBool::new(false));
    let task = tokio::spawn(churn(client, prefix.to_owned(), pace, Arc::clone(&stop)));
    (stop, task)
}

pub async fn finish_churn(
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<ChurnLog>,
) -> ChurnLog {
    stop.store(true, Ordering::SeqCst);
    match task.await {
        Ok(log) => log,
        Err(e) => panic!("the churn client failed: {e}"),
    }
}

pub fn assert_tokens_rise(grants: &[Grant], above: u64, what: &str) {
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

/// Reads one line from a raw connection; `None` on close or after `wait`.
pub async fn read_raw_line(reader: &mut BufReader<TcpStream>, wait: Duration) -> Option<String> {
    let mut line = Vec::new();
    match tokio::time::timeout(wait, reader.read_until(b'\n', &mut line)).await {
        Ok(Ok(_)) if line.last() == Some(&b'\n') => {
            line.pop();
            Some(String::from_utf8_lossy(&line).into_owned())
        }
        _ => None,
    }
}

pub async fn connect_raw(addr: SocketAddr) -> BufReader<TcpStream> {
    match TcpStream::connect(addr).await {
        Ok(stream) => BufReader::new(stream),
        Err(e) => panic!("cannot connect to {addr}: {e}"),
    }
}

/// The gap a churning client saw when the active moved from node `from` to
/// node `to`: from its last grant by `from` to its first grant by `to`.
/// Panics unless every grant came from one of them and the switch happened
/// once, for good.
pub fn handoff_gap(log: &ChurnLog, from: usize, to: usize) -> Duration {
    if let Some(stray) = log.grants.iter().find(|g| g.node != from && g.node != to) {
        panic!(
            "grant from node {} while the active moved from node {from} to node {to}: {stray:?}",
            stray.node
        );
    }
    let last_old = log.grants.iter().rposition(|g| g.node == from);
    let first_new = log.grants.iter().position(|g| g.node == to);
    let (Some(last_old), Some(first_new)) = (last_old, first_new) else {
        panic!(
            "the churn client needs grants from node {from} and then node {to}: {} grants, nodes {:?}",
            log.grants.len(),
            log.grants.iter().map(|g| g.node).collect::<std::collections::BTreeSet<_>>()
        );
    };
    assert!(
        last_old < first_new,
        "grants from node {from} came after grants from node {to}: {:?}",
        &log.grants[first_new.min(last_old)..=last_old.max(first_new)]
    );
    log.grants[first_new].at - log.grants[last_old].at
}

/// One line summing up what a churn client went through.
pub fn churn_summary(log: &ChurnLog) -> String {
    format!(
        "{} grants, {} redirects, {} `M -`, {} lost attempts, {} ambiguous timeouts, releases answered N: {:?}",
        log.grants.len(),
        log.redirects,
        log.unknown_active,
        log.lost_attempts,
        log.ambiguous_timeouts,
        log.lost_releases
    )
}

/// The longest time between two consecutive grants of a churn client.
pub fn longest_pause(log: &ChurnLog) -> Duration {
    log.grants
        .windows(2)
        .map(|w| w[1].at - w[0].at)
        .max()
        .unwrap_or_default()
}
