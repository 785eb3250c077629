//! A three-node cluster of either mode for tests that freeze nodes with
//! SIGSTOP: which running node serves, freeze one, and resume them all at
//! the end so that no process is left stopped.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::time::Instant;

use crate::cluster::{field, probe_status, Cluster};
use crate::port::peer_list;
use crate::raft::RaftCluster;
use crate::Batond;

/// How long one `S` probe may take before a node counts as not answering.
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);

/// The cluster modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClusterMode {
    Priority,
    Raft,
}

#[derive(Debug)]
enum Nodes {
    Priority(Cluster),
    Raft(RaftCluster),
}

/// Three nodes of one mode; some may be frozen.
#[derive(Debug)]
pub struct FreezableCluster {
    nodes: Nodes,
    frozen: Vec<bool>,
}

impl FreezableCluster {
    pub fn start(mode: ClusterMode) -> FreezableCluster {
        let nodes = match mode {
            ClusterMode::Priority => Nodes::Priority(Cluster::start(3, &[])),
            ClusterMode::Raft => Nodes::Raft(RaftCluster::start(3)),
        };
        FreezableCluster {
            nodes,
            frozen: vec![false; 3],
        }
    }

    pub fn peers(&self) -> Vec<SocketAddr> {
        match &self.nodes {
            Nodes::Priority(cluster) => cluster.peers().to_vec(),
            Nodes::Raft(cluster) => cluster.peers.clone(),
        }
    }

    /// The peer list as the CLI takes it: `a,b,c`.
    pub fn servers(&self) -> String {
        peer_list(&self.peers())
    }

    fn node(&mut self, i: usize) -> &mut Batond {
        match &mut self.nodes {
            Nodes::Priority(cluster) => cluster.node_mut(i),
            Nodes::Raft(cluster) => &mut cluster.nodes[i],
        }
    }

    /// SIGSTOP node `i` (returns once it is stopped).
    pub fn freeze(&mut self, i: usize) {
        self.node(i).stop_signal();
        self.frozen[i] = true;
    }

    /// SIGCONT every frozen node.
    pub fn resume_all(&mut self) {
        for i in 0..self.frozen.len() {
            if self.frozen[i] {
                self.node(i).cont();
                self.frozen[i] = false;
            }
        }
    }

    /// Polls the nodes not frozen until one says it serves (`role=active`
    /// or `leader`); its index. Panics after `within`.
    pub async fn wait_serving(&mut self, within: Duration) -> usize {
        let deadline = Instant::now() + within;
        loop {
            for (i, addr) in self.peers().into_iter().enumerate() {
                if self.frozen[i] {
                    continue;
                }
                let status = probe_status(addr, PROBE_TIMEOUT).await;
                if status.is_some_and(|s| matches!(field(&s, "role"), "active" | "leader")) {
                    return i;
                }
            }
            assert!(
                Instant::now() < deadline,
                "no running node serves within {within:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Polls `S` until every node not frozen has token `at_least`.
    pub async fn wait_token_everywhere(&mut self, at_least: u64, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let mut behind = Vec::new();
            for (i, addr) in self.peers().into_iter().enumerate() {
                if self.frozen[i] {
                    continue;
                }
                let status = probe_status(addr, PROBE_TIMEOUT).await;
                let token = status.and_then(|s| field(&s, "token").parse::<u64>().ok());
                if token.is_none_or(|t| t < at_least) {
                    behind.push((i, token));
                }
            }
            if behind.is_empty() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "token {at_least} not everywhere within {within:?}: {behind:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
