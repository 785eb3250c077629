//! A flood of forged peer handshakes does not keep a genuine peer from
//! linking: real `batond` processes on 127.0.0.1, an attacker that keeps
//! every node's handshake slots full of hellos that never go on, from
//! 127.0.0.2 (Linux routes all of 127.0.0.0/8 to loopback), an address
//! no peer has, or from 127.0.0.1, the peers' own. Meanwhile a standby
//! (priority) or a follower (Raft) is killed with SIGKILL and started
//! again: it must get the grant made while it was down, which only a link
//! brings, within 8 s; shut out by slots the flood holds for the 5 s
//! handshake timeout each, it takes far longer.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use baton_tests::cluster::{field, probe_status, Cluster, ClusterClient};
use baton_tests::raft::{self, RaftCluster, SERIAL};
use baton_tests::status_u64;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::task::JoinHandle;
use tokio::time::{sleep, timeout, timeout_at, Instant};

/// An attacker's source address on loopback that no peer has.
const STRANGER: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
/// The peers' own address.
const PEERS_OWN: Ipv4Addr = Ipv4Addr::LOCALHOST;

/// Connections the attacker keeps trying per node: twice the 12
/// handshakes a 3-node cluster's node takes at once from its peers'
/// address (8 from strangers), so that a slot that frees is taken again
/// at once.
const FLOOD_PER_NODE: usize = 24;

/// Pause of one flood connection after the node closed it quickly
/// (refused, or closed for a newer one) or could not be reached: keeps
/// the flood's rate bounded while the slots stay full.
const FLOOD_RETRY: Duration = Duration::from_millis(10);

/// A connection the node closes sooner than this was not held.
const HELD_AT_LEAST: Duration = Duration::from_millis(100);

/// The flood ends by itself after this, whatever the test does.
const FLOOD_AT_MOST: Duration = Duration::from_secs(60);

/// Time for the restarted node to link and get the grant made while it
/// was down, from its restart. Without a flood 0.2 s (priority) and
/// 2.4-3.4 s (Raft) here; a node shut out by the flood's slots, each
/// held up to the 5 s handshake timeout, takes several of those.
const RELINK_WITHIN: Duration = Duration::from_secs(8);

/// A cluster must settle within this.
const SETTLE: Duration = Duration::from_secs(20);

/// Attacker connections that send a peer hello and never go on, to every
/// node in `targets`, until dropped or [`FLOOD_AT_MOST`].
struct Flood {
    tasks: Vec<JoinHandle<()>>,
    /// Hellos written, for the flood's rate.
    hellos: Arc<AtomicU64>,
    started: Instant,
}

impl Flood {
    fn start(from: Ipv4Addr, targets: &[SocketAddr], hello: &'static [u8]) -> Flood {
        let started = Instant::now();
        let until = started + FLOOD_AT_MOST;
        let hellos = Arc::new(AtomicU64::new(0));
        let tasks = targets
            .iter()
            .flat_map(|&to| (0..FLOOD_PER_NODE).map(move |_| to))
            .map(|to| {
                let attacker = Attacker {
                    from,
                    to,
                    hello,
                    hellos: hellos.clone(),
                };
                tokio::spawn(attacker.hold_handshakes(until))
            })
            .collect();
        Flood {
            tasks,
            hellos,
            started,
        }
    }

    /// Hellos written per second, on average so far.
    fn rate(&self) -> f64 {
        self.hellos.load(Ordering::Relaxed) as f64 / self.started.elapsed().as_secs_f64()
    }
}

impl Drop for Flood {
    fn drop(&mut self) {
        self.tasks.iter().for_each(JoinHandle::abort);
    }
}

/// One of the flood's connections at a time.
struct Attacker {
    from: Ipv4Addr,
    to: SocketAddr,
    hello: &'static [u8],
    hellos: Arc<AtomicU64>,
}

impl Attacker {
    /// One connection after another: a hello, then silence until the
    /// node closes it.
    async fn hold_handshakes(self, until: Instant) {
        while Instant::now() < until {
            let opened = Instant::now();
            if let Some(mut stream) = connect_from(self.from, self.to).await {
                if stream.write_all(self.hello).await.is_ok() {
                    self.hellos.fetch_add(1, Ordering::Relaxed);
                    let mut buf = [0u8; 256];
                    let _ = timeout_at(until, async {
                        while matches!(stream.read(&mut buf).await, Ok(n) if n > 0) {}
                    })
                    .await;
                }
            }
            if opened.elapsed() < HELD_AT_LEAST {
                sleep(FLOOD_RETRY).await;
            }
        }
    }
}

async fn connect_from(from: Ipv4Addr, to: SocketAddr) -> Option<TcpStream> {
    let socket = TcpSocket::new_v4().ok()?;
    socket.bind(SocketAddr::from((from, 0))).ok()?;
    timeout(Duration::from_secs(2), socket.connect(to))
        .await
        .ok()?
        .ok()
}

/// Polls node `addr`'s `S` until its token reaches `token` with `role`
/// (the grant came over a link); returns how long that took from `since`.
async fn wait_grant_on(addr: SocketAddr, role: &str, token: u64, since: Instant) -> Duration {
    let deadline = since + RELINK_WITHIN;
    loop {
        let status = probe_status(addr, Duration::from_millis(500)).await;
        if let Some(status) = &status {
            if field(status, "role") == role && status_u64(status, "token") >= token {
                return since.elapsed();
            }
        }
        assert!(
            Instant::now() < deadline,
            "the restarted node {addr} did not link within {RELINK_WITHIN:?} under the flood: {status:?}"
        );
        sleep(Duration::from_millis(20)).await;
    }
}

async fn grant(client: &mut ClusterClient, key: &str) -> u64 {
    raft::grant(client, key).await
}

/// Kills and restarts a standby of a priority cluster under a flood from
/// `from`; how long it took to link.
async fn priority_relink(from: Ipv4Addr) -> Duration {
    let timing = ["--heartbeat-interval", "0.1", "--failure-timeout", "2"];
    let mut cluster = Cluster::start(3, &timing);
    let active = cluster.wait_single_active(SETTLE).await;
    let standby = (active + 2) % 3;
    let mut client = cluster.client(active);
    grant(&mut client, "flood/before").await;
    let flood = Flood::start(from, cluster.peers(), baton_cluster::peer::PEER_HELLO);
    // Long enough for the flood to fill every node's slots.
    sleep(Duration::from_secs(1)).await;
    cluster.kill(standby);
    let token = grant(&mut client, "flood/while-down").await;
    let restarted = Instant::now();
    cluster.restart(standby);
    let took = wait_grant_on(cluster.addr(standby), "standby", token, restarted).await;
    println!(
        "priority, flood from {from} ({:.0} hellos/s): the restarted standby linked {took:?} after its restart",
        flood.rate()
    );
    took
}

/// Kills and restarts a follower of a Raft cluster under a flood from
/// `from`; how long it took to link.
async fn raft_relink(from: Ipv4Addr) -> Duration {
    let mut cluster = RaftCluster::start(3);
    let (leader, _) = cluster.wait_leader(SETTLE).await;
    let follower = (leader + 2) % 3;
    let mut client = cluster.client(leader);
    grant(&mut client, "flood/before").await;
    let hello = baton_cluster::raft::net::rpc::RAFT_HELLO;
    let flood = Flood::start(from, &cluster.peers, hello);
    sleep(Duration::from_secs(1)).await;
    cluster.nodes[follower].kill();
    let token = grant(&mut client, "flood/while-down").await;
    let restarted = Instant::now();
    cluster.nodes[follower].restart();
    let took = wait_grant_on(cluster.peers[follower], "follower", token, restarted).await;
    println!(
        "raft, flood from {from} ({:.0} hellos/s): the restarted follower linked {took:?} after its restart",
        flood.rate()
    );
    took
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_standby_links_under_a_flood_from_another_address() {
    let _serial = SERIAL.lock().await;
    priority_relink(STRANGER).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_follower_links_under_a_flood_from_another_address() {
    let _serial = SERIAL.lock().await;
    raft_relink(STRANGER).await;
}

/// The attacker shares the peers' address and slots: its own oldest
/// handshakes make room for a peer's, which, once its opening showed the
/// cluster key, the flood's never push out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_standby_links_under_a_flood_from_the_peers_address() {
    let _serial = SERIAL.lock().await;
    priority_relink(PEERS_OWN).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_follower_links_under_a_flood_from_the_peers_address() {
    let _serial = SERIAL.lock().await;
    raft_relink(PEERS_OWN).await;
}
