//! Black-box tests of a two-node priority cluster whose peer links run
//! through fault proxies: a healed partition leaves
//! one active within two failure timeouts, a graceful stop right at the
//! heal keeps its locks, and a paused active that resumes never has the two
//! nodes send clients to each other.
//!
//! Each node listens on its own port and advertises its proxy's address in
//! `--peers`, so every peer link (and only peer links, the tests talk to
//! the nodes directly) crosses a proxy. A proxy's `partition` refuses new
//! connections and freezes open ones for good, as a real link is while its
//! retransmissions back off.

mod priority_support;

use std::net::SocketAddr;
use std::time::Duration;

use baton_tests::cluster::{field, probe_status, Cluster};
use baton_tests::proxy::FaultProxy;
use baton_tests::{free_addr, grant_token, Batond, LineClient};
use tokio::time::Instant;

use priority_support::{release, FAILURE_TIMEOUT, SERIAL, SETTLE};

/// Two nodes, each behind a proxy for its peer traffic.
struct ProxiedPair {
    nodes: Vec<Batond>,
    proxies: Vec<FaultProxy>,
}

impl ProxiedPair {
    async fn start() -> ProxiedPair {
        let real: Vec<SocketAddr> = loop {
            let (a, b) = (free_addr(), free_addr());
            if a != b {
                break vec![a, b];
            }
        };
        let mut proxies = Vec::new();
        for addr in &real {
            proxies.push(FaultProxy::start(*addr).await);
        }
        let peers = proxies
            .iter()
            .map(|p| p.addr().to_string())
            .collect::<Vec<_>>()
            .join(",");
        let nodes = real
            .iter()
            .zip(&proxies)
            .map(|(addr, proxy)| {
                let advertise = proxy.addr().to_string();
                Batond::start_at(
                    *addr,
                    &[
                        "--peers",
                        &peers,
                        "--mode",
                        "priority",
                        "--advertise",
                        &advertise,
                    ],
                )
            })
            .collect();
        ProxiedPair { nodes, proxies }
    }

    fn addr(&self, i: usize) -> SocketAddr {
        self.nodes[i].addr()
    }

    fn partition(&self, on: bool) {
        for proxy in &self.proxies {
            proxy.partition(on);
        }
    }

    /// The nodes that report `role=active` now.
    async fn actives(&self) -> Vec<usize> {
        let mut actives = Vec::new();
        for i in 0..self.nodes.len() {
            let status = probe_status(self.addr(i), Duration::from_secs(1)).await;
            if status.is_some_and(|s| field(&s, "role") == "active") {
                actives.push(i);
            }
        }
        actives
    }

    /// Polls until the nodes reporting active are exactly `want`.
    async fn wait_actives(&self, want: &[usize], within: Duration) -> Duration {
        let started = Instant::now();
        loop {
            let actives = self.actives().await;
            if actives == want {
                return started.elapsed();
            }
            assert!(
                started.elapsed() < within,
                "actives still {actives:?}, not {want:?}, after {within:?}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// Item 3: heartbeats must not wait in a connection a partition froze.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healed_partition_leaves_one_active_within_two_failure_timeouts() {
    let _serial = SERIAL.lock().await;
    let pair = ProxiedPair::start().await;
    pair.wait_actives(&[0], SETTLE).await;
    pair.partition(true);
    pair.wait_actives(&[0, 1], Duration::from_secs(3)).await;
    pair.partition(false);
    // Some slack over the goal for a loaded two-core machine.
    let bound = 2 * FAILURE_TIMEOUT + Duration::from_millis(300);
    let took = pair.wait_actives(&[0], Duration::from_secs(3)).await;
    println!(
        "partition healed: one active after {took:?} (goal {:?})",
        2 * FAILURE_TIMEOUT
    );
    assert!(took < bound, "two actives for {took:?} after the heal");
}

/// Item 4: SIGTERM of an active right at the heal, while the other side
/// serves too: its locks go to the other node, which answers for them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_stop_at_the_heal_hands_its_locks_to_the_other_active() {
    let _serial = SERIAL.lock().await;
    let mut pair = ProxiedPair::start().await;
    pair.wait_actives(&[0], SETTLE).await;
    pair.partition(true);
    pair.wait_actives(&[0, 1], Duration::from_secs(3)).await;
    let mut c0 = LineClient::connect(pair.addr(0)).await;
    let t = grant_token(&c0.request("A heal/held 1 60").await, "heal/held");
    pair.partition(false);
    let status = tokio::task::block_in_place(|| pair.nodes[0].terminate());
    assert!(
        status.success(),
        "node 0 should exit 0 on SIGTERM: {status}"
    );
    pair.wait_actives(&[1], Duration::from_secs(3)).await;
    let mut c1 = LineClient::connect(pair.addr(1)).await;
    let answer = c1.request("A heal/held 0.2 60").await;
    assert_eq!(
        answer,
        "T heal/held",
        "node 1 does not hold node 0's lock (token {t}) after its graceful stop\n\
         node 0:\n{}\nnode 1:\n{}",
        pair.nodes[0].log_tail(30),
        pair.nodes[1].log_tail(30)
    );
    release(&mut c1, "heal/held", t).await;
}

/// Item 5: after a paused active resumes, no two nodes send a client to
/// each other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_active_and_its_replacement_never_redirect_to_each_other() {
    let _serial = SERIAL.lock().await;
    let mut cluster = Cluster::start(2, &[]);
    cluster.wait_active(0, SETTLE).await;
    let (a0, a1) = (cluster.addr(0), cluster.addr(1));
    let c0 = LineClient::connect(a0).await;
    let mut c1 = LineClient::connect(a1).await;
    tokio::task::block_in_place(|| cluster.pause(0));
    let paused = Instant::now();
    // Node 1 promotes once node 0 has been silent for a failure timeout.
    loop {
        let line = c1.request("R resume/probe 1").await;
        if line == "N R resume/probe" {
            break;
        }
        assert!(
            paused.elapsed() < Duration::from_secs(3),
            "node 1 never promoted: {line}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::task::block_in_place(|| cluster.resume(0));
    // A release of a lock nobody holds: `N R` on the active, `M R` on a
    // node that sends the client elsewhere. Asked in turn, one answer
    // after the other, as a client following redirects would: node A
    // sends it to B, B sends it back to A, and A still sends it to B. (Two
    // answers alone prove nothing: A may have taken over between them.)
    let redirect_to = [
        format!("M R resume/probe {a1}"),
        format!("M R resume/probe {a0}"),
    ];
    let mut clients = [c0, c1];
    let mut last: Vec<(usize, String)> = Vec::new();
    let watch = Instant::now();
    let mut rounds = 0;
    while watch.elapsed() < 6 * FAILURE_TIMEOUT {
        let node = rounds % 2;
        let line = clients[node].request("R resume/probe 1").await;
        rounds += 1;
        last.push((node, line));
        if last.len() > 3 {
            last.remove(0);
        }
        let bounced =
            last.len() == 3 && last.iter().all(|(node, line)| *line == redirect_to[*node]);
        assert!(
            !bounced,
            "{:?} after the resume, nodes 0 and 1 send clients to each other: {last:?}",
            watch.elapsed()
        );
    }
    println!("resume: {rounds} rounds without a redirect loop");
    cluster.wait_single_active(Duration::from_secs(2)).await;
}
