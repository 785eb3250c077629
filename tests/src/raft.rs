//! A Raft cluster of real `batond --mode raft` processes on loopback, each
//! with its own data directory, next to the priority [`Cluster`](crate::cluster::Cluster)
//! (`crate::cluster::Cluster`) and started the same way (one peer list of
//! free ports, [`start_cluster_nodes`]); and the client helpers the Raft
//! tests share. Every wait polls `S` and is bounded.

use std::net::SocketAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tempfile::TempDir;
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::cluster::{field, probe_status, tokens_reached, ClusterClient};
use crate::port::{distinct_free_addrs, start_cluster_nodes};
use crate::{Batond, Status};

/// The tests share two cores with everything else: one cluster at a time.
pub static SERIAL: Mutex<()> = Mutex::const_new(());

/// A fresh cluster must agree on a leader within this.
pub const SETTLE: Duration = Duration::from_secs(10);
/// Election after a leader kill: ~1 s expected with the default timeouts
/// (0.3-0.6 s before a follower stands), with room for a loaded machine.
pub const ELECTION_BOUND: Duration = Duration::from_millis(2_500);
pub const REQUEST: Duration = Duration::from_secs(10);

/// Three (or n) Raft nodes, each with its own data directory.
#[derive(Debug)]
pub struct RaftCluster {
    pub nodes: Vec<Batond>,
    pub peers: Vec<SocketAddr>,
    // Kept for the nodes' lifetime: restarts reuse the same directories.
    pub dirs: Vec<TempDir>,
}

impl RaftCluster {
    pub fn start(n: usize) -> RaftCluster {
        RaftCluster::start_with(n, &[])
    }

    /// Starts `n` nodes with `extra` arguments each.
    pub fn start_with(n: usize, extra: &[&str]) -> RaftCluster {
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        RaftCluster::start_each(n, |_| extra.clone())
    }

    /// As [`RaftCluster::start_with`], with arguments of its own for node
    /// `i` (an HTTP address each, say).
    pub fn start_each(n: usize, extra: impl Fn(usize) -> Vec<String>) -> RaftCluster {
        let peers = distinct_free_addrs(n);
        let dirs: Vec<TempDir> = (0..n)
            .map(|_| {
                tempfile::Builder::new()
                    .prefix("baton-raft-")
                    .tempdir()
                    .unwrap_or_else(|e| panic!("temp dir: {e}"))
            })
            .collect();
        let nodes = start_cluster_nodes(&peers, "raft", |i| {
            let data = dirs[i].path().to_string_lossy().into_owned();
            let mut args = vec!["--data-dir".to_string(), data];
            args.extend(extra(i));
            args
        });
        RaftCluster { nodes, peers, dirs }
    }

    pub async fn statuses(&mut self) -> Vec<Option<Status>> {
        let mut out = Vec::new();
        for i in 0..self.nodes.len() {
            let status = if self.nodes[i].is_running() {
                probe_status(self.peers[i], Duration::from_millis(500)).await
            } else {
                None
            };
            if let Some(status) = &status {
                assert_eq!(field(status, "mode"), "raft", "{status:?}");
                assert_eq!(field(status, "self"), self.peers[i].to_string());
            }
            out.push(status);
        }
        out
    }

    /// Polls until one running node is leader and every other running node
    /// is a follower naming it; returns it and how long that took.
    pub async fn wait_leader(&mut self, within: Duration) -> (usize, Duration) {
        let started = Instant::now();
        loop {
            let statuses = self.statuses().await;
            if let Some(leader) = self.agreed_leader(&statuses) {
                return (leader, started.elapsed());
            }
            if started.elapsed() > within {
                panic!("no agreed leader within {within:?}: {statuses:?}");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    pub fn agreed_leader(&mut self, statuses: &[Option<Status>]) -> Option<usize> {
        let mut leader = None;
        for (i, status) in statuses.iter().enumerate() {
            if !self.nodes[i].is_running() {
                continue;
            }
            if field(status.as_ref()?, "role") == "leader" {
                if leader.is_some() {
                    return None;
                }
                leader = Some(i);
            }
        }
        let leader = leader?;
        let want = self.peers[leader].to_string();
        let agreed = statuses
            .iter()
            .enumerate()
            .filter(|(i, _)| self.nodes[*i].is_running())
            .all(|(_, s)| s.as_ref().is_some_and(|s| field(s, "active") == want));
        agreed.then_some(leader)
    }

    /// Polls `S` on node `i` until `accept` holds; returns that status.
    pub async fn wait_status(
        &mut self,
        i: usize,
        what: &str,
        within: Duration,
        accept: impl Fn(&Status) -> bool,
    ) -> Status {
        let deadline = Instant::now() + within;
        loop {
            let status = probe_status(self.peers[i], Duration::from_millis(500)).await;
            match status {
                Some(status) if accept(&status) => return status,
                last if Instant::now() >= deadline => {
                    panic!("node {i}: not {what} within {within:?}: {last:?}")
                }
                _ => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
    }

    /// Polls `S` until every running node has applied token `at_least`
    /// (its `token=` is at least that): the grant is replicated.
    pub async fn wait_replicated(&mut self, at_least: u64, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let statuses = self.statuses().await;
            let up: Vec<bool> = self.nodes.iter_mut().map(Batond::is_running).collect();
            if tokens_reached(&statuses, |i| up[i], at_least) {
                return;
            }
            if Instant::now() >= deadline {
                panic!(
                    "token {at_least} not on every running node within {within:?}: {statuses:?}"
                );
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    pub fn client(&self, first: usize) -> ClusterClient {
        ClusterClient::new(self.peers.clone(), first)
    }

    /// Starts every node again on its address and data directory (after
    /// kills, or wipes) and waits for them to agree on a leader.
    pub async fn restart_all(&mut self) -> (usize, Duration) {
        for node in &mut self.nodes {
            node.restart();
        }
        self.wait_leader(SETTLE).await
    }

    /// Kills node `i` and empties its data directory: restarted, it is a
    /// new node that knows nothing of the cluster's past.
    pub fn wipe(&mut self, i: usize) {
        self.nodes[i].kill();
        let dir = self.dirs[i].path();
        std::fs::remove_dir_all(dir)
            .and_then(|()| std::fs::create_dir(dir))
            .unwrap_or_else(|e| panic!("emptying {}: {e}", dir.display()));
    }
}

/// The wall-clock floor now: milliseconds since 1970 << 20, which every
/// token a leader elected from now on issues is above (docs/cluster.md).
pub fn wall_clock_floor() -> u64 {
    let since_1970 = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_else(|e| panic!("the clock reads before 1970: {e}"));
    let ms = u64::try_from(since_1970.as_millis()).unwrap_or(u64::MAX);
    ms << 20
}

pub async fn grant(client: &mut ClusterClient, key: &str) -> u64 {
    let reply = client.request(&format!("A {key} 5 60"), REQUEST).await;
    let prefix = format!("A {key} ");
    match reply.line.strip_prefix(&prefix).map(str::parse::<u64>) {
        Some(Ok(token)) => token,
        _ => panic!("expected a grant of {key}, got {:?}", reply.line),
    }
}

pub async fn release(client: &mut ClusterClient, key: &str, token: u64) {
    let reply = client.request(&format!("R {key} {token}"), REQUEST).await;
    assert_eq!(reply.line, format!("R {key}"), "release of {key} {token}");
}
