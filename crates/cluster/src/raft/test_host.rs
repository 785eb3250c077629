//! For tests of the Raft shell pieces: a lock table host over a bare
//! engine, a dialer that reaches nobody, and a node built on them.

use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use baton_core::TableSnapshot;

use super::engine::RaftEngine;
use super::net::link::{DialFuture, Dialer};
use super::shell::{build_raft, RaftSettings};
use super::storage::state_machine::TableHost;
use super::types::RaftOf;
use super::types::{members_of, Entry, NodeId};
use crate::peer::ClusterKeys;

/// The membership of a cluster of `peers`, every node a voter.
pub fn membership(peers: &[String]) -> openraft::Membership<NodeId, openraft::BasicNode> {
    let voters: std::collections::BTreeSet<NodeId> = (0..peers.len() as NodeId).collect();
    openraft::Membership::new(vec![voters], members_of(peers)).expect("membership")
}

pub const TEST_KEY: &str = "a test cluster key of at least thirty-two bytes";

pub fn keys() -> ClusterKeys {
    ClusterKeys::from_text(TEST_KEY).expect("key")
}

/// Holds the table in an engine nobody sends requests to.
#[derive(Debug)]
pub struct TestHost {
    engine: Mutex<RaftEngine<u32>>,
}

impl TestHost {
    pub fn new(me: NodeId, peers: Vec<String>) -> TestHost {
        TestHost {
            engine: Mutex::new(RaftEngine::new(me, peers, 1)),
        }
    }

    pub fn engine(&self) -> MutexGuard<'_, RaftEngine<u32>> {
        self.engine.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl TableHost for TestHost {
    fn apply(&self, entries: &[Entry]) {
        let mut engine = self.engine();
        let mut events = Vec::new();
        for entry in entries {
            engine.handle_committed(entry.into(), 0, &mut events);
        }
    }

    fn snapshot(&self) -> TableSnapshot {
        self.engine().snapshot(0)
    }

    fn restore(&self, snapshot: &TableSnapshot) {
        self.engine().handle_snapshot(snapshot, 0, &mut Vec::new());
    }
}

/// Reaches nobody: the node under test only answers.
pub struct NoDialer;

impl Dialer for NoDialer {
    fn dial(&self, _addr: &str) -> DialFuture {
        Box::pin(async { Err(io::Error::other("no network in this test")) })
    }
}

/// Settings for node `me` of `peers` in `dir`, with fast timeouts.
pub fn settings(me: NodeId, peers: &[String], dir: &Path) -> RaftSettings {
    let mut settings = RaftSettings::new(me, peers.to_vec(), dir.to_path_buf(), keys());
    settings.heartbeat_ms = 20;
    settings.election_timeout_ms = 100;
    settings
}

/// A node that dials nobody.
pub async fn node(settings: &RaftSettings) -> (RaftOf<TestHost>, Arc<TestHost>) {
    let host = Arc::new(TestHost::new(settings.me, settings.peers.clone()));
    let raft = build_raft(settings, host.clone(), Arc::new(NoDialer))
        .await
        .expect("raft starts");
    (raft, host)
}
