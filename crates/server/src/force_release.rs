//! An operator's release of a key's grant by its token, from inside the
//! node (the HTTP console's force-release): the same `R` a client sends,
//! handed to the node as a [`LockRequest::Release`] and counted as one, so
//! the key goes to its next waiter exactly as after a client's release,
//! and a grant made since the operator read the token is never touched.

use std::time::Duration;

use baton_core::{Key, Outcome, Token};
use baton_proto::Response;
use tokio::sync::mpsc;

use crate::delivery::{Delivery, Mailbox};
use crate::locks::SharedLocks;
use crate::node::{LockNode, Served};
use crate::request::{Answer, LockRequest};

/// How long a release answered later (a Raft leader's, once committed)
/// is awaited: an election or two, well inside the HTTP endpoint's own
/// request timeout.
pub const FORCE_RELEASE_WAIT: Duration = Duration::from_secs(5);

/// How a force-release ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ForceRelease {
    /// The grant with that token ended; the next waiter, if any, has the key.
    Released,
    /// No live grant of the key carries that token (released, expired, or
    /// handed on since it was read): nothing changed.
    NotHeld,
    /// This node does not serve: the serving node's address, if known.
    NotServing(Option<String>),
    /// The node did not answer within [`FORCE_RELEASE_WAIT`] (a Raft
    /// leader without its majority): the release may still be applied.
    NoAnswer,
}

impl<N: LockNode> SharedLocks<N> {
    /// Releases the grant of `key` whose token is `token`.
    pub async fn force_release(&self, key: &Key, token: Token) -> ForceRelease {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let mailbox = Mailbox(tx);
        let mut events = Vec::new();
        let request = LockRequest::Release { key, token };
        let served = self.handle(request, self.clock().now(), &mailbox, &mut events);
        match served {
            Served::Done(Answer::Changed(Outcome::Released)) => ForceRelease::Released,
            Served::Done(_) => ForceRelease::NotHeld,
            Served::Redirect(to) => ForceRelease::NotServing(to),
            Served::Later => match tokio::time::timeout(FORCE_RELEASE_WAIT, rx.recv()).await {
                Ok(Some(Delivery::Reply(response))) => late(response),
                Ok(_) | Err(_) => ForceRelease::NoAnswer,
            },
        }
    }
}

/// The late answer to the release, as a [`ForceRelease`].
fn late(response: Response) -> ForceRelease {
    match response {
        Response::Released { .. } => ForceRelease::Released,
        Response::Moved { addr, .. } => ForceRelease::NotServing(addr),
        _ => ForceRelease::NotHeld,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::Clock;
    use crate::single::SingleNode;
    use crate::test_support::key;

    #[tokio::test]
    async fn only_the_named_token_is_released_and_the_next_waiter_gets_the_key() {
        let locks = SharedLocks::new(SingleNode::new(), Clock::new());
        let (tx, mut rx) = mpsc::unbounded_channel();
        let mailbox = Mailbox(tx);
        let k = key("jobs/1");
        let acquire = LockRequest::Acquire(crate::AcquireRef {
            key: &k,
            wait_ms: 60_000,
            lease_ms: 60_000,
            options: &Default::default(),
        });
        let mut events = Vec::new();
        let first = locks.handle(acquire, locks.clock().now(), &mailbox, &mut events);
        let Served::Done(Answer::Acquired(baton_core::AcquireOutcome::Granted { token })) = first
        else {
            panic!("not granted: {first:?}");
        };
        let queued = locks.handle(acquire, locks.clock().now(), &mailbox, &mut events);
        assert!(
            matches!(queued, Served::Done(Answer::Acquired(_))),
            "{queued:?}"
        );
        let wrong = token + 1;
        assert_eq!(locks.force_release(&k, wrong).await, ForceRelease::NotHeld);
        assert_eq!(locks.force_release(&k, token).await, ForceRelease::Released);
        match rx.try_recv() {
            Ok(Delivery::Granted {
                key, token: next, ..
            }) => {
                assert_eq!(key, k);
                assert!(next > token);
            }
            other => panic!("the waiter was not granted the key: {other:?}"),
        }
        assert_eq!(locks.force_release(&k, token).await, ForceRelease::NotHeld);
    }
}
