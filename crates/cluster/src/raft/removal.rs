//! Whether this node was removed from the cluster's membership.
//!
//! openraft stops replicating to a removed node as soon as the leader
//! holds the membership without it, so the node rarely receives that
//! membership: it keeps the joint one, in which it still votes, hears no
//! leader, and would go on calling itself a follower. Two facts tell it:
//!
//! - its own log's membership leaves it out (it did receive the last one);
//! - a member it asks for a vote answers that its committed membership, at
//!   a later log position than this node's membership, leaves it out
//!   ([`refuses_vote`] on that member's side). A committed membership is a
//!   fact of the cluster's log; a node added back after it receives that
//!   later entry, and no longer counts as removed.
//!
//! A removed node serves no more: it redirects, says `removed` in `S` and
//! `/health`, and logs it once.

use tokio::sync::watch;

use super::types::{LogId, NodeId, StoredMembership};

/// The latest committed membership that a member said leaves this node
/// out, shared by the network (which hears it) and the shell (which tells
/// the node).
#[derive(Debug, Clone)]
pub struct RemovalNotice(watch::Sender<Option<LogId>>);

impl Default for RemovalNotice {
    fn default() -> Self {
        RemovalNotice(watch::channel(None).0)
    }
}

impl RemovalNotice {
    /// A member said its committed membership at `at` leaves this node out.
    pub fn heard(&self, at: LogId) {
        self.0.send_if_modified(|latest| {
            let newer = latest.is_none_or(|l| at > l);
            if newer {
                *latest = Some(at);
            }
            newer
        });
    }

    pub fn subscribe(&self) -> watch::Receiver<Option<LogId>> {
        self.0.subscribe()
    }
}

/// Whether node `me`, whose log holds `own`, is removed, given the latest
/// committed membership a member said leaves it out (`told`).
pub fn removed(me: NodeId, own: &StoredMembership, told: Option<LogId>) -> bool {
    let known = own.membership().nodes().next().is_some();
    let left_out = known && !own.membership().nodes().any(|(id, _)| *id == me);
    let told_later = told.is_some_and(|at| Some(at) > *own.log_id());
    left_out || told_later
}

/// Whether a member whose committed membership is `committed` answers a
/// vote request of node `from` (whose log ends at `last`) with
/// [`crate::raft::net::rpc::ReplyBody::NotMember`]: `from` is not in it,
/// and its log holds nothing past it, so it cannot know of a later
/// membership that has it (and could win no election: a majority holds
/// that committed entry).
pub fn refuses_vote(
    committed: &StoredMembership,
    from: NodeId,
    last: Option<LogId>,
) -> Option<LogId> {
    let at = (*committed.log_id())?;
    let member = committed.membership().nodes().any(|(id, _)| *id == from);
    (!member && last <= Some(at)).then_some(at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::impls::leader_id_adv::LeaderId;
    use openraft::{BasicNode, Membership};
    use std::collections::BTreeSet;

    fn log_id(term: u64, index: u64) -> LogId {
        LogId::new(LeaderId { term, node_id: 0 }, index)
    }

    fn membership(at: Option<LogId>, voters: &[NodeId]) -> StoredMembership {
        let set: BTreeSet<NodeId> = voters.iter().copied().collect();
        let nodes = voters
            .iter()
            .map(|id| (*id, BasicNode::new(format!("n{id}:1"))));
        let membership = Membership::new(
            vec![set],
            nodes.collect::<std::collections::BTreeMap<_, _>>(),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        StoredMembership::new(at, membership)
    }

    #[test]
    fn a_node_its_own_log_leaves_out_is_removed() {
        let without = membership(Some(log_id(2, 9)), &[0, 1]);
        assert!(removed(2, &without, None));
        assert!(!removed(1, &without, None));
        // No membership yet (a node that joins): not removed.
        assert!(!removed(2, &StoredMembership::default(), None));
    }

    #[test]
    fn a_member_that_committed_a_later_membership_without_it_tells_it() {
        let own = membership(Some(log_id(2, 9)), &[0, 1, 2]);
        assert!(!removed(2, &own, Some(log_id(2, 8))), "older news");
        assert!(!removed(2, &own, Some(log_id(2, 9))));
        assert!(removed(2, &own, Some(log_id(2, 10))));
        // Added back: its log holds the later membership that has it.
        let back = membership(Some(log_id(3, 20)), &[0, 1, 2]);
        assert!(!removed(2, &back, Some(log_id(2, 10))));
    }

    #[test]
    fn only_a_non_member_whose_log_ends_within_the_committed_one_is_refused() {
        let committed = membership(Some(log_id(2, 10)), &[0, 1]);
        assert_eq!(
            refuses_vote(&committed, 2, Some(log_id(2, 9))),
            Some(log_id(2, 10))
        );
        assert_eq!(refuses_vote(&committed, 2, None), Some(log_id(2, 10)));
        assert_eq!(refuses_vote(&committed, 1, Some(log_id(2, 9))), None);
        // Its log goes further: it may hold a later membership with it.
        assert_eq!(refuses_vote(&committed, 2, Some(log_id(2, 11))), None);
        assert_eq!(refuses_vote(&StoredMembership::default(), 2, None), None);
    }

    #[test]
    fn the_notice_keeps_the_latest() {
        let notice = RemovalNotice::default();
        let seen = notice.subscribe();
        notice.heard(log_id(2, 10));
        notice.heard(log_id(2, 5));
        assert_eq!(*seen.borrow(), Some(log_id(2, 10)));
    }
}
