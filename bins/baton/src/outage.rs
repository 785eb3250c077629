//! A wait of 0 means "as long as the node allows" (its `--max-wait`), which
//! only a serving node can measure: while none serves (a Raft cluster
//! without its majority, a priority cluster with no active node) the
//! client would follow redirects for good, saying nothing. An acquire with
//! that wait, or an election's campaign (which waits for its turn however
//! long it takes), is given up once no node has said it serves for
//! [`OUTAGE_LIMIT`]: exit 4, as for a wait that ran out unanswered.

use std::future::IntoFuture;
use std::time::Duration;

use baton_client::{Client, Error, NodeStatus, Result, Role};
use tokio::time::Instant;

/// How long no node may serve before a wait of 0 is given up: well past a
/// Raft election (about 1 s) or a priority failover (about the failure
/// timeout plus a heartbeat), so a failover is ridden out.
pub const OUTAGE_LIMIT: Duration = Duration::from_secs(10);

/// How often the nodes are asked whether one serves (one `S` each).
const POLL_INTERVAL: Duration = Duration::from_secs(1);

/// Runs `acquire`; for a wait of 0, ends it with [`Error::NotServing`]
/// once no node has served for [`OUTAGE_LIMIT`]. Dropping the acquire
/// gives back a grant that comes later.
pub async fn bounded<T>(
    client: &Client,
    wait: Duration,
    acquire: impl IntoFuture<Output = Result<T>>,
) -> Result<T> {
    if !wait.is_zero() {
        return acquire.await;
    }
    tokio::select! {
        done = acquire => done,
        () = no_node_serves_for(client, OUTAGE_LIMIT) => Err(Error::NotServing),
    }
}

/// Returns once no node has said it serves for `limit`.
async fn no_node_serves_for(client: &Client, limit: Duration) {
    let mut served_at = Instant::now();
    loop {
        tokio::time::sleep(POLL_INTERVAL).await;
        if client.status_all().await.iter().any(serves) {
            served_at = Instant::now();
        } else if served_at.elapsed() >= limit {
            return;
        }
    }
}

/// Whether the node said it serves: a single node, a priority active, a
/// Raft leader.
pub fn serves(node: &NodeStatus) -> bool {
    node.status
        .as_ref()
        .is_ok_and(|s| matches!(s.role, Role::Single | Role::Active | Role::Leader))
}
