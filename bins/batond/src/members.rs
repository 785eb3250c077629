//! `/v1/members` on a Raft node: the HTTP endpoint's membership changes,
//! made through `baton_cluster::raft::membership` on this node's Raft.

use std::sync::Arc;
use std::time::Duration;

use baton_cluster::raft::membership::{
    AddAsk, MemberView, MembershipChanges, MembershipError, ROLLBACK_GRACE,
};
use baton_http::limits::REQUEST_TIMEOUT;
use baton_http::members::{AdminError, AdminFuture, MemberEntry, MembershipAdmin};

/// How long one `POST /v1/members` waits for a learner to catch up, and a
/// little more for its removal when the addition's deadline falls within:
/// within the endpoint's request deadline; `baton member add` asks again.
const CATCH_UP_PER_REQUEST: Duration = Duration::from_secs(5);
const _: () =
    assert!(CATCH_UP_PER_REQUEST.as_secs() + ROLLBACK_GRACE.as_secs() < REQUEST_TIMEOUT.as_secs());

struct RaftMembers(MembershipChanges);

/// The membership admin of a Raft node.
pub fn admin(changes: &MembershipChanges) -> Arc<dyn MembershipAdmin> {
    Arc::new(RaftMembers(changes.clone()))
}

fn entries(views: Vec<MemberView>) -> Vec<MemberEntry> {
    views
        .into_iter()
        .map(|view| MemberEntry {
            id: view.id,
            addr: view.addr,
            membership: if view.voter { "voter" } else { "learner" },
        })
        .collect()
}

fn admin_error(error: MembershipError) -> AdminError {
    let text = error.to_string();
    match error {
        MembershipError::NotLeader { leader } => AdminError::NotLeader { leader },
        MembershipError::BadAddress(_) => AdminError::BadRequest(text),
        MembershipError::NotMember(_) => AdminError::NotFound(text),
        MembershipError::AlreadyMember(_)
        | MembershipError::LastVoter(_)
        | MembershipError::WouldLoseMajority { .. }
        | MembershipError::AddingAnother { .. }
        | MembershipError::Busy
        | MembershipError::RemovedMeanwhile(_) => AdminError::Conflict(text),
        MembershipError::NoMajority { .. } | MembershipError::NotCommitted => {
            AdminError::Unavailable(text)
        }
        MembershipError::NotCaughtUp { .. } => AdminError::Pending(text),
        MembershipError::RolledBack { .. } => AdminError::TimedOut(text),
        MembershipError::Failed(_) => AdminError::Failed(text),
    }
}

impl MembershipAdmin for RaftMembers {
    fn list(&self) -> Vec<MemberEntry> {
        entries(self.0.list())
    }

    /// Waits at most [`CATCH_UP_PER_REQUEST`]; `wait` sets the addition's
    /// deadline (see [`AddAsk`]).
    fn add<'a>(&'a self, addr: &'a str, wait: Option<Duration>) -> AdminFuture<'a> {
        let ask = AddAsk {
            wait: CATCH_UP_PER_REQUEST,
            within: wait,
        };
        Box::pin(async move {
            self.0
                .add(addr, ask)
                .await
                .map(entries)
                .map_err(admin_error)
        })
    }

    fn remove<'a>(&'a self, addr: &'a str) -> AdminFuture<'a> {
        Box::pin(async move { self.0.remove(addr).await.map(entries).map_err(admin_error) })
    }
}
