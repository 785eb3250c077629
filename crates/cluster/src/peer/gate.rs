//! What peer connections may take from a node, counted apart from client
//! connections: a few handshakes in progress per configured peer, a few
//! authenticated links per peer (a peer that dials again supersedes its
//! oldest link), and the refusal log.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use super::refusals::RefusalLog;

/// Handshakes in progress per configured peer, at most.
pub const HANDSHAKES_PER_PEER: usize = 4;
/// Authenticated links one peer may hold open to this node at once. A
/// peer keeps one per mode; the rest lets a redial overlap a dying link.
pub const LINKS_PER_PEER: usize = 4;

/// The gate's caps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GateLimits {
    pub handshakes: usize,
    pub links_per_peer: usize,
}

impl GateLimits {
    /// The caps for a cluster of `nodes` nodes.
    pub fn for_cluster(nodes: usize) -> GateLimits {
        GateLimits {
            handshakes: (HANDSHAKES_PER_PEER * nodes.saturating_sub(1)).max(8),
            links_per_peer: LINKS_PER_PEER,
        }
    }
}

#[derive(Debug, Default)]
struct Counts {
    handshaking: usize,
    /// Per peer, its open links oldest first: an id and the token that
    /// closes the link.
    links: HashMap<u64, Vec<(u64, CancellationToken)>>,
    next_id: u64,
}

type SharedCounts = Arc<Mutex<Counts>>;

fn counts(shared: &SharedCounts) -> std::sync::MutexGuard<'_, Counts> {
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The peer gate of one node.
#[derive(Debug)]
pub struct PeerGate {
    limits: GateLimits,
    counts: SharedCounts,
    refusals: RefusalLog,
}

impl PeerGate {
    pub fn new(limits: GateLimits) -> PeerGate {
        PeerGate {
            limits,
            counts: SharedCounts::default(),
            refusals: RefusalLog::default(),
        }
    }

    /// A slot for one handshake, or `None` when too many are in progress
    /// (the connection is then closed at once).
    pub fn begin_handshake(&self) -> Option<HandshakePermit> {
        let mut counts = counts(&self.counts);
        if counts.handshaking >= self.limits.handshakes {
            return None;
        }
        counts.handshaking += 1;
        Some(HandshakePermit {
            counts: Some(self.counts.clone()),
        })
    }

    /// Turns a finished handshake from `peer` into a link. Past the cap,
    /// the peer's oldest link is told to close.
    pub fn admit_link(&self, handshake: HandshakePermit, peer: u64) -> LinkPermit {
        drop(handshake);
        let closed = CancellationToken::new();
        let mut counts = counts(&self.counts);
        let id = counts.next_id;
        counts.next_id += 1;
        let links = counts.links.entry(peer).or_default();
        links.push((id, closed.clone()));
        while links.len() > self.limits.links_per_peer {
            let (_, oldest) = links.remove(0);
            oldest.cancel();
        }
        LinkPermit {
            counts: self.counts.clone(),
            peer,
            id,
            closed,
        }
    }

    /// Logs a refused connection, at most once per address per interval.
    pub fn refused(&self, from: IpAddr, reason: &dyn std::fmt::Display) {
        self.refusals.refused(from, reason);
    }

    /// Authenticated links open from `peer` (for tests and status).
    pub fn links_of(&self, peer: u64) -> usize {
        counts(&self.counts).links.get(&peer).map_or(0, Vec::len)
    }
}

/// Holds one handshake slot until dropped.
#[derive(Debug)]
pub struct HandshakePermit {
    counts: Option<SharedCounts>,
}

impl Drop for HandshakePermit {
    fn drop(&mut self) {
        if let Some(shared) = self.counts.take() {
            let mut counts = counts(&shared);
            debug_assert!(counts.handshaking > 0);
            counts.handshaking = counts.handshaking.saturating_sub(1);
        }
    }
}

/// Holds one link slot until dropped; [`LinkPermit::superseded`]
/// resolves when a newer link of the same peer took its place.
#[derive(Debug)]
pub struct LinkPermit {
    counts: SharedCounts,
    peer: u64,
    id: u64,
    closed: CancellationToken,
}

impl LinkPermit {
    /// Resolves once this link must close for a newer one.
    pub fn superseded(&self) -> WaitForCancellationFutureOwned {
        self.closed.clone().cancelled_owned()
    }
}

impl Drop for LinkPermit {
    fn drop(&mut self) {
        let mut counts = counts(&self.counts);
        if let Some(links) = counts.links.get_mut(&self.peer) {
            links.retain(|(id, _)| *id != self.id);
            if links.is_empty() {
                counts.links.remove(&self.peer);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handshakes_are_capped_and_slots_come_back() {
        let gate = PeerGate::new(GateLimits {
            handshakes: 2,
            links_per_peer: 1,
        });
        let a = gate.begin_handshake().expect("first");
        let _b = gate.begin_handshake().expect("second");
        assert!(gate.begin_handshake().is_none(), "third is over the cap");
        drop(a);
        assert!(
            gate.begin_handshake().is_some(),
            "a finished one frees its slot"
        );
    }

    #[tokio::test]
    async fn a_newer_link_supersedes_the_oldest_past_the_cap() {
        let gate = PeerGate::new(GateLimits {
            handshakes: 8,
            links_per_peer: 2,
        });
        let admit = |peer| gate.admit_link(gate.begin_handshake().expect("slot"), peer);
        let first = admit(1);
        let second = admit(1);
        let other = admit(2);
        assert_eq!(gate.links_of(1), 2);
        let third = admit(1);
        assert_eq!(gate.links_of(1), 2);
        first.superseded().await;
        let second_closed = second.superseded();
        tokio::pin!(second_closed);
        assert!(futures_util::FutureExt::now_or_never(&mut second_closed).is_none());
        drop(third);
        drop(second);
        assert_eq!(gate.links_of(1), 0);
        assert_eq!(gate.links_of(2), 1);
        drop(other);
        assert_eq!(gate.links_of(2), 0);
    }

    #[test]
    fn link_handshakes_do_not_count_once_admitted() {
        let gate = PeerGate::new(GateLimits {
            handshakes: 1,
            links_per_peer: 4,
        });
        let link = gate.admit_link(gate.begin_handshake().expect("slot"), 0);
        assert!(gate.begin_handshake().is_some());
        drop(link);
    }
}
