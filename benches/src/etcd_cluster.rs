//! etcd as a 3-node cluster ("etcd x3"), the durable peer of Baton's Raft
//! cluster (issue 14): three members on free 127.0.0.1 ports that list
//! each other in `--initial-cluster`, all pinned to the server CPU like the
//! Baton nodes, data in the work dir. Clients talk to the leader, as they
//! do with Baton's Raft, so no request pays a follower's forwarding hop.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::time::{sleep, Instant};

use crate::daemons::{self, Daemon, EtcdMember, READY};
use crate::error::BenchError;
use crate::server::{log_tail, spawn, Server, SpawnSettings};
use baton_tests::port::free_addrs as free_ports;

/// The members' names, in `--initial-cluster` order.
const NAMES: [&str; 5] = ["m0", "m1", "m2", "m3", "m4"];

/// Each member's settings, one per client and peer address pair.
pub fn members(clients: &[SocketAddr], peers: &[SocketAddr], dir: &Path) -> Vec<EtcdMember> {
    debug_assert_eq!(clients.len(), peers.len());
    debug_assert!(clients.len() <= NAMES.len());
    let initial_cluster = NAMES
        .iter()
        .zip(peers)
        .map(|(name, peer)| format!("{name}=http://{peer}"))
        .collect::<Vec<_>>()
        .join(",");
    NAMES
        .iter()
        .zip(clients.iter().zip(peers))
        .map(|(&name, (&client, &peer))| EtcdMember {
            name,
            client,
            peer,
            data_dir: dir.join(name),
            initial_cluster: initial_cluster.clone(),
        })
        .collect()
}

/// Starts `count` members and waits until each is healthy and one leads.
pub async fn start(
    program: &Path,
    count: usize,
    settings: &SpawnSettings,
) -> Result<Server, BenchError> {
    if count == 0 || count > NAMES.len() {
        return Err(BenchError::Scenario(format!(
            "an etcd cluster of {count} members is not supported (1 to {})",
            NAMES.len()
        )));
    }
    let ports = free_ports(2 * count).map_err(|source| BenchError::Setup {
        what: "pick ports for the etcd cluster".into(),
        source,
    })?;
    let (clients, peers) = ports.split_at(count);
    let dir = settings.fresh_dir("etcd-cluster")?;
    let mut nodes = Vec::with_capacity(count);
    let mut logs = Vec::with_capacity(count);
    for member in members(clients, peers, &dir) {
        let log = dir.join(format!("{}.log", member.name));
        match spawn(program, &member.args(), settings, Some(&log)).await {
            Ok(spawned) => nodes.push(spawned.into_node(member.client)),
            Err(error) => {
                Server::new(nodes, 0, Some(dir)).stop().await;
                return Err(error);
            }
        }
        logs.push(log);
    }
    match leader(clients, &logs).await {
        Ok(leader) => Ok(Server::new(nodes, leader, Some(dir))),
        Err(error) => {
            Server::new(nodes, 0, Some(dir)).stop().await;
            Err(error)
        }
    }
}

/// Waits until every member answers its health check (which needs a
/// leader), then returns the index of the leader.
async fn leader(clients: &[SocketAddr], logs: &[PathBuf]) -> Result<usize, BenchError> {
    let probe = Daemon::Etcd {
        program: PathBuf::new(),
    };
    let (request, healthy) = probe.probe();
    let deadline = Instant::now() + READY;
    let mut ready = vec![false; clients.len()];
    while Instant::now() < deadline {
        for (i, &addr) in clients.iter().enumerate() {
            if !ready[i] {
                ready[i] = daemons::probe(addr, request, healthy).await;
            }
        }
        if ready.iter().all(|&r| r) {
            if let Some(leader) = find_leader(clients).await {
                return Ok(leader);
            }
        }
        sleep(Duration::from_millis(100)).await;
    }
    let tails: Vec<String> = logs.iter().map(|log| log_tail(log)).collect();
    Err(BenchError::NotReady {
        what: "etcd cluster".into(),
        detail: format!(
            "not every member healthy with a leader within {READY:?} (healthy: {ready:?}); logs: {}",
            tails.join(" || ")
        ),
    })
}

/// The member that says it leads; `None` while none does (an election).
#[cfg(feature = "etcd")]
async fn find_leader(clients: &[SocketAddr]) -> Option<usize> {
    for (i, &addr) in clients.iter().enumerate() {
        if let Ok(true) = crate::etcd_session::is_leader(addr).await {
            return Some(i);
        }
    }
    None
}

/// Without the etcd client the target is skipped before it is started;
/// any member would do.
#[cfg(not(feature = "etcd"))]
async fn find_leader(_clients: &[SocketAddr]) -> Option<usize> {
    Some(0)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test
mod tests {
    use super::*;

    fn addrs(from: u16) -> Vec<SocketAddr> {
        (from..from + 3)
            .map(|port| SocketAddr::from(([127, 0, 0, 1], port)))
            .collect()
    }

    #[test]
    fn three_members_that_know_each_other_on_loopback() {
        let dir = Path::new("/work/x");
        let members = members(&addrs(7000), &addrs(8000), dir);
        assert_eq!(members.len(), 3);
        let cluster = "m0=http://127.0.0.1:8000,m1=http://127.0.0.1:8001,m2=http://127.0.0.1:8002";
        for (i, member) in members.iter().enumerate() {
            let args: Vec<String> = member
                .args()
                .into_iter()
                .map(|a| a.into_string().unwrap())
                .collect();
            let value = |flag: &str| {
                let at = args.iter().position(|a| a == flag).unwrap();
                args[at + 1].clone()
            };
            assert_eq!(value("--name"), format!("m{i}"));
            assert_eq!(value("--initial-cluster"), cluster);
            assert_eq!(value("--initial-cluster-state"), "new");
            assert_eq!(value("--data-dir"), format!("/work/x/m{i}"));
            let client = format!("http://127.0.0.1:{}", 7000 + i);
            assert_eq!(value("--listen-client-urls"), client);
            assert_eq!(value("--advertise-client-urls"), client);
            let peer = format!("http://127.0.0.1:{}", 8000 + i);
            assert_eq!(value("--listen-peer-urls"), peer);
            assert_eq!(value("--initial-advertise-peer-urls"), peer);
        }
    }

    #[tokio::test]
    async fn refuses_a_cluster_it_cannot_name() {
        let settings = SpawnSettings::default();
        for count in [0, 6] {
            let error = start(Path::new("etcd"), count, &settings)
                .await
                .unwrap_err();
            assert!(error.to_string().contains("not supported"), "{error}");
        }
    }
}
