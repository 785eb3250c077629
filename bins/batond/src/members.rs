//! `/v1/members` on a Raft node: the HTTP endpoint's membership changes,
//! made through `baton_cluster::raft::membership` on this node's Raft.

use std::sync::Arc;
use std::time::Duration;

use baton_cluster::raft::membership::{self, CatchUp, MemberView, MembershipError};
use baton_cluster::raft::types::Raft;
use baton_http::limits::REQUEST_TIMEOUT;
use baton_http::members::{AdminError, AdminFuture, MemberEntry, MembershipAdmin};

/// How long one `POST /v1/members` waits for a learner to catch up: within
/// the endpoint's request deadline; `baton member add` asks again.
const CATCH_UP_PER_REQUEST: Duration = Duration::from_secs(5);
const _: () = assert!(CATCH_UP_PER_REQUEST.as_secs() + 3 < REQUEST_TIMEOUT.as_secs());

struct RaftMembers(Raft);

/// The membership admin of a Raft node.
pub fn admin(raft: &Raft) -> Arc<dyn MembershipAdmin> {
    Arc::new(RaftMembers(raft.clone()))
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
        MembershipError::AlreadyMember(_) | MembershipError::LastVoter(_) => {
            AdminError::Conflict(text)
        }
        MembershipError::NotCaughtUp { .. } => AdminError::Pending(text),
        MembershipError::RolledBack { .. } => AdminError::TimedOut(text),
        MembershipError::Failed(_) => AdminError::Failed(text),
    }
}

impl MembershipAdmin for RaftMembers {
    fn list(&self) -> Vec<MemberEntry> {
        entries(membership::list(&self.0))
    }

    /// Waits at most [`CATCH_UP_PER_REQUEST`], less if the caller waits
    /// less in all; then it is the caller's last ask (see [`CatchUp`]).
    fn add<'a>(&'a self, addr: &'a str, wait: Option<Duration>) -> AdminFuture<'a> {
        let catch_up = match wait {
            Some(wait) if wait <= CATCH_UP_PER_REQUEST => CatchUp {
                wait,
                roll_back: true,
            },
            _ => CatchUp {
                wait: CATCH_UP_PER_REQUEST,
                roll_back: false,
            },
        };
        Box::pin(async move {
            membership::add(&self.0, addr, catch_up)
                .await
                .map(entries)
                .map_err(admin_error)
        })
    }

    fn remove<'a>(&'a self, addr: &'a str) -> AdminFuture<'a> {
        Box::pin(async move {
            membership::remove(&self.0, addr)
                .await
                .map(entries)
                .map_err(admin_error)
        })
    }
}
