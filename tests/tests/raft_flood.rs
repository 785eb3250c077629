//! A Raft cluster whose leases lapse all at once, as when a fleet of
//! clients loses its network together: tens of thousands of grants taken
//! over a few pipelined connections, then left to run out. The leader
//! must expire them all promptly while it keeps its lead (no election, no
//! change of term) and keeps serving other clients: a probe's
//! acquire-release cycles on other keys are granted within a bound all
//! along (an `M A <key> -`, which a busy leader's log may answer when it
//! refuses a write for a moment, is retried as a client does).
//!
//! Timing-sensitive, so it runs alone (the kit's lock) and prints what it
//! measured. Speed goals live in baton-bench's `expiry-flood`; the bounds
//! here are generous for a debug build on a shared machine, and far below
//! what a stalled leader takes.

use std::net::SocketAddr;
use std::time::Duration;

use baton_tests::cluster::field;
use baton_tests::raft::{RaftCluster, SERIAL, SETTLE};
use baton_tests::{grant_token, status_u64, LineClient, Status};
use tokio::task::JoinSet;
use tokio::time::Instant;

/// Leases taken, over this many connections, this many in flight on each.
const LEASES: usize = 24_000;
const CONNECTIONS: usize = 4;
const IN_FLIGHT: usize = 500;
/// Long enough for every grant to be taken before the first lapses.
const LEASE: Duration = Duration::from_secs(8);
/// All leases gone within this after the last one's end.
const ALL_GONE_WITHIN: Duration = Duration::from_secs(20);
/// The longest a probe's acquire may take to be granted: generous for a
/// debug build on a busy shared machine, short of a stalled leader.
const PROBE_BOUND: Duration = Duration::from_millis(2_500);
/// Between two probe cycles.
const PROBE_EVERY: Duration = Duration::from_millis(20);

/// Acquires `count` keys of connection `id` on `addr`, `IN_FLIGHT` at a
/// time; panics on anything but a grant.
async fn hold_leases(addr: SocketAddr, id: usize, count: usize) {
    let mut c = LineClient::connect(addr).await;
    c.set_timeout(Duration::from_secs(30));
    let lease = LEASE.as_secs();
    let mut next = 0;
    while next < count {
        let burst = IN_FLIGHT.min(count - next);
        let mut lines = String::new();
        for i in next..next + burst {
            lines.push_str(&format!("A flood/{id}/{i} 0 {lease}\n"));
        }
        c.send_raw(lines.as_bytes()).await;
        for _ in 0..burst {
            let line = c.recv().await;
            assert!(line.starts_with("A flood/"), "not a grant: {line:?}");
            let key = line.split(' ').nth(1).unwrap_or_default().to_owned();
            grant_token(&line, &key);
        }
        next += burst;
    }
}

/// One acquire-release cycle on a key of its own, an acquire sent to
/// nobody (`M A <key> -`: no leader to name) retried as a client does;
/// returns how long the grant took and how many times it was retried.
async fn probe_cycle(c: &mut LineClient, n: u64) -> (Duration, u32) {
    let key = format!("probe/{n}");
    let sent = Instant::now();
    let mut retries = 0;
    let line = loop {
        let line = c.request(&format!("A {key} 0 10")).await;
        if line != format!("M A {key} -") || sent.elapsed() > PROBE_BOUND {
            break line;
        }
        retries += 1;
        tokio::time::sleep(PROBE_EVERY).await;
    };
    let took = sent.elapsed();
    let token = grant_token(&line, &key);
    assert_eq!(
        c.request(&format!("R {key} {token}")).await,
        format!("R {key}")
    );
    (took, retries)
}

/// Every node's term, and who leads, as `S` tells.
fn terms(statuses: &[Option<Status>]) -> Vec<Option<u64>> {
    statuses
        .iter()
        .map(|s| s.as_ref().map(|s| status_u64(s, "term")))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_leases_lapsing_at_once_expire_without_an_election_or_a_stall() {
    let _serial = SERIAL.lock().await;
    let mut cluster = RaftCluster::start(3);
    let (leader, _) = cluster.wait_leader(SETTLE).await;
    let addr = cluster.peers[leader];
    let before = terms(&cluster.statuses().await);

    let started = Instant::now();
    let mut fills = JoinSet::new();
    for id in 0..CONNECTIONS {
        fills.spawn(hold_leases(addr, id, LEASES / CONNECTIONS));
    }
    while let Some(filled) = fills.join_next().await {
        filled.unwrap_or_else(|e| panic!("a connection holding leases failed: {e}"));
    }
    let granted_in = started.elapsed();
    println!("raft flood: {LEASES} leases granted in {granted_in:?}");
    assert!(
        granted_in < LEASE,
        "granting took {granted_in:?}: the leases do not lapse together"
    );
    let all_end = started + LEASE;

    let mut probe = LineClient::connect(addr).await;
    probe.set_timeout(PROBE_BOUND);
    let mut status = LineClient::connect(addr).await;
    let (mut cycles, mut slowest, mut retries) = (0u64, Duration::ZERO, 0);
    let gone_at = loop {
        let (took, retried) = probe_cycle(&mut probe, cycles).await;
        (slowest, retries) = (slowest.max(took), retries + retried);
        cycles += 1;
        let s = status.status().await;
        if Instant::now() > all_end && status_u64(&s, "locks") == 0 {
            break Instant::now();
        }
        assert!(
            Instant::now() < all_end + ALL_GONE_WITHIN,
            "leases still held {ALL_GONE_WITHIN:?} after their end: {s:?}"
        );
        tokio::time::sleep(PROBE_EVERY).await;
    };
    let gone_after = gone_at.saturating_duration_since(all_end);
    println!(
        "raft flood: all gone {gone_after:?} after the leases' end; \
         {cycles} probe cycles, slowest acquire {slowest:?}, {retries} retried"
    );
    assert!(
        slowest < PROBE_BOUND,
        "a probe waited {slowest:?} for its grant"
    );

    let statuses = cluster.statuses().await;
    assert_eq!(terms(&statuses), before, "the term changed: {statuses:?}");
    let still = statuses[leader]
        .as_ref()
        .map(|s| field(s, "role").to_owned());
    assert_eq!(still.as_deref(), Some("leader"), "{statuses:?}");
    for i in 0..3 {
        let within = Duration::from_secs(10);
        cluster
            .wait_status(i, "without leases", within, |s| status_u64(s, "locks") == 0)
            .await;
    }
}
