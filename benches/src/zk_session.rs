//! ZooKeeper as a lock service, by the standard recipe: create an
//! ephemeral sequential znode under the lock's directory; the lowest
//! sequence holds the lock, every other one watches the znode just before
//! its own and checks again when that one goes. Releasing deletes it.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::time::Duration;

use zookeeper_client::{Acls, Client, CreateMode};

use crate::error::BenchError;
use crate::session::LockSession;

const ROOT: &str = "/baton-bench";

fn peer(error: impl std::fmt::Display) -> BenchError {
    BenchError::Peer {
        target: "zookeeper",
        message: error.to_string(),
    }
}

/// One ZooKeeper session, and the lock directories it already made.
#[derive(Clone, Debug)]
pub struct ZkSession {
    client: Client,
    made: HashSet<String>,
}

impl ZkSession {
    pub async fn connect(addr: SocketAddr) -> Result<Self, BenchError> {
        let cluster = addr.to_string();
        let connect = Client::connect(&cluster);
        let client = tokio::time::timeout(Duration::from_secs(10), connect)
            .await
            .map_err(|_| peer("connect timed out"))?
            .map_err(peer)?;
        Ok(Self {
            client,
            made: HashSet::new(),
        })
    }
}

impl LockSession for ZkSession {
    /// The session's znode.
    type Held = String;

    async fn acquire(&mut self, key: &str) -> Result<(u64, String), BenchError> {
        let dir = format!("{ROOT}/{key}");
        if !self.made.contains(&dir) {
            let options = CreateMode::Persistent.with_acls(Acls::anyone_all());
            self.client.mkdir(&dir, &options).await.map_err(peer)?;
            self.made.insert(dir.clone());
        }
        let options = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
        let (_, sequence) = self
            .client
            .create(&format!("{dir}/l-"), &[], &options)
            .await
            .map_err(peer)?;
        let sequence = sequence.into_i64();
        // ZooKeeper pads sequence suffixes to ten digits, so names sort
        // in sequence order.
        let mine = format!("l-{sequence:010}");
        let path = format!("{dir}/{mine}");
        // Sequences start at 0; tokens must be above 0.
        let token = u64::try_from(sequence).map_err(|_| peer("negative sequence"))? + 1;
        loop {
            let mut children = self.client.list_children(&dir).await.map_err(peer)?;
            children.sort_unstable();
            let at = children
                .iter()
                .position(|child| *child == mine)
                .ok_or_else(|| peer("our lock znode vanished (session expired?)"))?;
            let Some(before) = at.checked_sub(1) else {
                return Ok((token, path));
            };
            let predecessor = format!("{dir}/{}", children[before]);
            let (stat, watcher) = self
                .client
                .check_and_watch_stat(&predecessor)
                .await
                .map_err(peer)?;
            if stat.is_some() {
                watcher.changed().await;
            }
        }
    }

    async fn release(&mut self, held: String) -> Result<(), BenchError> {
        self.client.delete(&held, None).await.map_err(peer)
    }

    async fn close(self) {
        // Dropping the last clone closes the session; its znodes go with it.
    }
}
