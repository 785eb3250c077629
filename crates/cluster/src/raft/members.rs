//! Who may be a member of a Raft cluster, and under which node id.
//!
//! A fresh cluster's nodes are its `--peers`, node `i` at the list's `i`th
//! address (the seeds). A node added later with `baton member add ADDR` is
//! started with `--join`; its id comes from its address ([`joined_id`]), so
//! the leader that adds it and the node itself agree on it without talking.
//! Seed ids are below [`MAX_SEEDS`]; joined ids have bit 62 set, so the two
//! never meet. Each node keeps the id it first ran with in its data
//! directory (see [`super::storage::identity`]).
//!
//! Memberships that peers report are checked here before openraft sees
//! them: at most [`MAX_MEMBERS`] nodes, each with a well-formed address and
//! an id its address allows, and a voter set within them.

use std::collections::{BTreeMap, BTreeSet};

use sha2::{Digest, Sha256};

use super::types::NodeId;

/// `--peers` lists at most this many nodes: their ids are `0..MAX_SEEDS`.
pub const MAX_SEEDS: usize = 64;
/// Nodes in one membership (voters and learners), at most.
pub const MAX_MEMBERS: usize = 64;
/// A member's address (`host:port`) is at most this many bytes, as every
/// address a flag takes.
pub use baton_proto::MAX_ADDR_LEN;
/// Set in every joined node's id, never in a seed's.
const JOINED_BIT: u64 = 1 << 62;

/// The id of a node that joins at `addr` after the cluster was seeded.
pub fn joined_id(addr: &str) -> NodeId {
    let digest = Sha256::digest(format!("baton-raft-node {addr}").as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    (u64::from_be_bytes(first) & (JOINED_BIT - 1)) | JOINED_BIT
}

/// Whether `id` is one a node can have: a seed's or a joined node's.
pub fn plausible_id(id: NodeId) -> bool {
    id < MAX_SEEDS as u64 || id >> 62 == 1
}

/// Whether `addr` is a well-formed `host:port` for a member.
pub fn plausible_addr(addr: &str) -> bool {
    let Some((host, port)) = addr.rsplit_once(':') else {
        return false;
    };
    !host.is_empty()
        && addr.len() <= MAX_ADDR_LEN
        && port.parse::<u16>().is_ok_and(|p| p > 0)
        && addr.bytes().all(|b| b.is_ascii_graphic())
}

/// Why a membership cannot be one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadMembership {
    #[error("{0} nodes, more than {MAX_MEMBERS}")]
    TooMany(usize),
    #[error("node {id} at {addr:?}: no node can have that id and address")]
    Node { id: NodeId, addr: String },
    #[error("voter {0} is not among the nodes")]
    UnknownVoter(NodeId),
    #[error("no voters")]
    NoVoters,
}

/// Checks `nodes` (id to address) and the voter sets of a membership (or
/// that it is the empty one).
pub fn check<'a>(
    nodes: impl Iterator<Item = (NodeId, &'a str)>,
    voter_sets: impl Iterator<Item = &'a BTreeSet<NodeId>>,
) -> Result<(), BadMembership> {
    let mut count = 0;
    let mut known = BTreeSet::new();
    for (id, addr) in nodes {
        count += 1;
        if count > MAX_MEMBERS {
            return Err(BadMembership::TooMany(count));
        }
        let id_fits = id < MAX_SEEDS as u64 || id == joined_id(addr);
        if !id_fits || !plausible_addr(addr) {
            return Err(BadMembership::Node {
                id,
                addr: addr.to_string(),
            });
        }
        known.insert(id);
    }
    let mut any_voter = false;
    let mut any_set = false;
    for set in voter_sets {
        any_set = true;
        if set.is_empty() {
            return Err(BadMembership::NoVoters);
        }
        any_voter = true;
        if let Some(unknown) = set.iter().find(|id| !known.contains(id)) {
            return Err(BadMembership::UnknownVoter(*unknown));
        }
    }
    // The empty membership is what a log starts from (a snapshot of
    // nothing carries it), not a cluster without voters.
    if any_voter || (count == 0 && !any_set) {
        Ok(())
    } else {
        Err(BadMembership::NoVoters)
    }
}

/// A membership's nodes, id to address, and its voters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Members {
    pub nodes: BTreeMap<NodeId, String>,
    pub voters: BTreeSet<NodeId>,
}

impl Members {
    /// The seeds of a fresh cluster: node `i` at `peers[i]`, all voters.
    pub fn seeded(peers: &[String]) -> Members {
        let nodes: BTreeMap<NodeId, String> = peers
            .iter()
            .enumerate()
            .map(|(i, addr)| (i as NodeId, addr.clone()))
            .collect();
        let voters = nodes.keys().copied().collect();
        Members { nodes, voters }
    }

    /// The members of openraft's membership (every voter of a joint one).
    pub fn of(membership: &openraft::Membership<NodeId, openraft::BasicNode>) -> Members {
        Members {
            nodes: membership
                .nodes()
                .map(|(id, node)| (*id, node.addr.clone()))
                .collect(),
            voters: membership.voter_ids().collect(),
        }
    }

    pub fn addr_of(&self, id: NodeId) -> Option<&str> {
        self.nodes.get(&id).map(String::as_str)
    }

    /// Node `id` as a log line names it: by its address, or, for a node
    /// not in this membership, as `node <id>`.
    pub fn name_of(&self, id: NodeId) -> String {
        self.addr_of(id)
            .map_or_else(|| format!("node {id}"), str::to_string)
    }

    /// The id of the node at `addr`, if it is a member.
    pub fn id_at(&self, addr: &str) -> Option<NodeId> {
        self.nodes
            .iter()
            .find(|(_, a)| a.as_str() == addr)
            .map(|(id, _)| *id)
    }

    pub fn is_voter(&self, id: NodeId) -> bool {
        self.voters.contains(&id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(ids: &[NodeId]) -> BTreeSet<NodeId> {
        ids.iter().copied().collect()
    }

    #[test]
    fn joined_ids_are_stable_distinct_and_never_a_seeds() {
        let a = joined_id("10.0.0.1:7411");
        assert_eq!(a, joined_id("10.0.0.1:7411"));
        assert_ne!(a, joined_id("10.0.0.2:7411"));
        for addr in ["a:1", "b:2", "localhost:7411", "x"] {
            let id = joined_id(addr);
            assert!(id >= MAX_SEEDS as u64 && id < 1 << 63 && plausible_id(id));
        }
        assert!(plausible_id(0) && plausible_id(63));
        assert!(!plausible_id(64) && !plausible_id(u64::MAX) && !plausible_id(1 << 63));
    }

    #[test]
    fn addresses_must_be_host_and_port() {
        for good in ["127.0.0.1:7411", "node-1.example:1", "[::1]:7411"] {
            assert!(plausible_addr(good), "{good}");
        }
        let long = format!("{}:1", "h".repeat(MAX_ADDR_LEN));
        // The longest address a flag takes is a member's address too.
        let label = "a".repeat(63);
        let longest = format!("{label}.{label}.{label}.{}:65535", "b".repeat(61));
        assert_eq!(longest.len(), MAX_ADDR_LEN);
        assert_eq!(
            baton_proto::host_port(&longest).as_deref(),
            Ok(&longest[..])
        );
        assert!(plausible_addr(&longest), "{longest}");
        for bad in [
            "",
            "host",
            ":7411",
            "host:0",
            "host:70000",
            "a b:1",
            "h\n:1",
            &long,
        ] {
            assert!(!plausible_addr(bad), "{bad:?}");
        }
    }

    #[test]
    fn a_membership_names_nodes_its_ids_allow_and_voters_among_them() {
        let joined = "c:3".to_string();
        let nodes = [(0, "a:1"), (1, "b:2"), (joined_id(&joined), "c:3")];
        let voters = set(&[0, 1, joined_id(&joined)]);
        assert_eq!(check(nodes.into_iter(), [&voters].into_iter()), Ok(()));
        // A joined id under another address is refused.
        let forged = [(0, "a:1"), (joined_id("d:4"), "c:3")];
        assert!(matches!(
            check(forged.into_iter(), [&set(&[0])].into_iter()),
            Err(BadMembership::Node { .. })
        ));
        let unknown = set(&[0, 7]);
        assert_eq!(
            check([(0, "a:1")].into_iter(), [&unknown].into_iter()),
            Err(BadMembership::UnknownVoter(7))
        );
        assert_eq!(
            check([(0, "a:1")].into_iter(), [&set(&[])].into_iter()),
            Err(BadMembership::NoVoters)
        );
        let many: Vec<(NodeId, String)> = (0..MAX_MEMBERS as u64 + 1)
            .map(|i| {
                let addr = format!("n{i}:1");
                (joined_id(&addr), addr)
            })
            .collect();
        assert_eq!(
            check(
                many.iter().map(|(id, a)| (*id, a.as_str())),
                [&set(&[many[0].0])].into_iter()
            ),
            Err(BadMembership::TooMany(MAX_MEMBERS + 1))
        );
    }

    #[test]
    fn seeds_are_the_peer_list_in_order() {
        let members = Members::seeded(&["a:1".into(), "b:2".into()]);
        assert_eq!(members.addr_of(1), Some("b:2"));
        assert_eq!(members.id_at("a:1"), Some(0));
        assert!(members.is_voter(0) && members.is_voter(1) && !members.is_voter(2));
    }
}
