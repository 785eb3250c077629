//! etcd as a lock service: the v3 Lock API (`Lock` with this session's
//! lease, `Unlock` with the key it returned). The fencing token is the
//! store revision at which the lock was granted. Also finds the leader of
//! an etcd cluster (`is_leader`).

use std::net::SocketAddr;
use std::time::Duration;

use etcd_client::{Client, LockOptions};

use crate::error::BenchError;
use crate::session::LockSession;

/// Longer than any run, so the driver never has to keep leases alive; the
/// lease is revoked when the session closes.
const LEASE_TTL_SECS: i64 = 300;

fn peer(error: impl std::fmt::Display) -> BenchError {
    BenchError::Peer {
        target: "etcd",
        message: error.to_string(),
    }
}

/// One gRPC connection with its own lease.
#[derive(Clone)]
pub struct EtcdSession {
    client: Client,
    lease: i64,
}

impl std::fmt::Debug for EtcdSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdSession")
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

impl EtcdSession {
    pub async fn connect(addr: SocketAddr) -> Result<Self, BenchError> {
        let connect = Client::connect([format!("http://{addr}")], None);
        let mut client = tokio::time::timeout(Duration::from_secs(10), connect)
            .await
            .map_err(|_| peer("connect timed out"))?
            .map_err(peer)?;
        let lease = client
            .lease_grant(LEASE_TTL_SECS, None)
            .await
            .map_err(peer)?
            .id();
        Ok(Self { client, lease })
    }
}

impl LockSession for EtcdSession {
    type Held = Vec<u8>;

    async fn acquire(&mut self, key: &str) -> Result<(u64, Vec<u8>), BenchError> {
        let options = LockOptions::new().with_lease(self.lease);
        let granted = self.client.lock(key, Some(options)).await.map_err(peer)?;
        let revision = granted
            .header()
            .map(|header| header.revision())
            .ok_or_else(|| peer("lock response without a header"))?;
        let token = u64::try_from(revision).map_err(|_| peer("negative revision"))?;
        Ok((token, granted.key().to_vec()))
    }

    async fn release(&mut self, held: Vec<u8>) -> Result<(), BenchError> {
        self.client.unlock(held).await.map_err(peer)?;
        Ok(())
    }

    async fn close(mut self) {
        // The lease would run out on its own; revoking frees the keys now.
        let _ = self.client.lease_revoke(self.lease).await;
    }
}

/// Whether the etcd member serving clients on `addr` is its cluster's
/// leader (its own id is the leader it reports), so the driver can talk to
/// it as it talks to the Raft leader of a Baton cluster.
pub async fn is_leader(addr: SocketAddr) -> Result<bool, BenchError> {
    let connect = Client::connect([format!("http://{addr}")], None);
    let mut client = tokio::time::timeout(Duration::from_secs(2), connect)
        .await
        .map_err(|_| peer("connect timed out"))?
        .map_err(peer)?;
    let status = tokio::time::timeout(Duration::from_secs(2), client.status())
        .await
        .map_err(|_| peer("status timed out"))?
        .map_err(peer)?;
    let member = status
        .header()
        .map(|header| header.member_id())
        .ok_or_else(|| peer("status response without a header"))?;
    Ok(status.leader() != 0 && status.leader() == member)
}
