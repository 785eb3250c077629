//! The Raft cluster the black-box Raft tests run: three (or n) real
//! `batond --mode raft` nodes on loopback, each with its own data
//! directory, and the client helpers they share.

#![allow(dead_code)] // each test file uses its own subset

use std::net::SocketAddr;
use std::time::Duration;

use baton_tests::cluster::{field, probe_status, ClusterClient};
use baton_tests::{free_addr, Batond, Status};
use tempfile::TempDir;
use tokio::sync::Mutex;
use tokio::time::Instant;

/// The tests share two cores with everything else: one cluster at a time.
pub static SERIAL: Mutex<()> = Mutex::const_new(());

/// A fresh cluster must agree on a leader within this.
pub const SETTLE: Duration = Duration::from_secs(10);
/// Election after a leader kill: ~1 s expected with the default timeouts
/// (0.3-0.6 s before a follower stands), with room for a loaded machine.
pub const ELECTION_BOUND: Duration = Duration::from_millis(2_500);
pub const REQUEST: Duration = Duration::from_secs(10);

/// Three (or n) Raft nodes, each with its own data directory.
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
        let mut peers: Vec<SocketAddr> = Vec::new();
        while peers.len() < n {
            let addr = free_addr();
            if !peers.contains(&addr) {
                peers.push(addr);
            }
        }
        let list = peers
            .iter()
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join(",");
        let dirs: Vec<TempDir> = (0..n)
            .map(|_| {
                tempfile::Builder::new()
                    .prefix("baton-raft-")
                    .tempdir()
                    .unwrap_or_else(|e| panic!("temp dir: {e}"))
            })
            .collect();
        let nodes = peers
            .iter()
            .zip(&dirs)
            .map(|(addr, dir)| {
                let data = dir.path().to_string_lossy().into_owned();
                let mut args = vec!["--peers", &list, "--mode", "raft", "--data-dir", &data];
                args.extend_from_slice(extra);
                Batond::start_at(*addr, &args)
            })
            .collect();
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

    pub fn client(&self, first: usize) -> ClusterClient {
        ClusterClient::new(self.peers.clone(), first)
    }
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
