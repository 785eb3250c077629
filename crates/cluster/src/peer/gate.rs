//! What peer connections may take from a node, counted apart from client
//! connections: a few handshakes in progress per configured peer, by
//! source address ([`super::handshakes`]), a few authenticated links per
//! peer (a peer that dials again supersedes its oldest link), and the
//! refusal log.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use super::handshakes::{HandshakeBudget, Source};
use super::refusals::RefusalLog;

/// Handshakes in progress per configured peer, at most: from each peer's
/// address, this many per peer at it; from every other address together,
/// this many per peer (at least [`MIN_OTHER_HANDSHAKES`]).
pub const HANDSHAKES_PER_PEER: usize = 4;
/// Authenticated links one peer may hold open to this node at once. A
/// peer keeps one per mode; the rest lets a redial overlap a dying link.
pub const LINKS_PER_PEER: usize = 4;
/// Handshakes in progress from addresses no peer has, at least: room for
/// a peer whose address is not known yet (a name not resolved, a node
/// joining) beside a few strays.
pub const MIN_OTHER_HANDSHAKES: usize = 8;

/// Why a handshake was closed unfinished for a newer one (a refusal log's
/// reason).
pub const EVICTED: &str =
    "too many peer handshakes at once from this address: closed the oldest unfinished";

/// The gate's caps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GateLimits {
    /// Handshakes in progress from each peer's address, per peer at it.
    pub handshakes_per_peer: usize,
    /// Handshakes in progress from every other address together.
    pub handshakes: usize,
    pub links_per_peer: usize,
}

impl GateLimits {
    /// The caps for a cluster of `nodes` nodes.
    pub fn for_cluster(nodes: usize) -> GateLimits {
        GateLimits {
            handshakes_per_peer: HANDSHAKES_PER_PEER,
            handshakes: (HANDSHAKES_PER_PEER * nodes.saturating_sub(1)).max(MIN_OTHER_HANDSHAKES),
            links_per_peer: LINKS_PER_PEER,
        }
    }
}

#[derive(Debug)]
struct Counts {
    handshakes: HandshakeBudget,
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
        let counts = Counts {
            handshakes: HandshakeBudget::new(limits.handshakes_per_peer, limits.handshakes),
            links: HashMap::new(),
            next_id: 0,
        };
        PeerGate {
            limits,
            counts: Arc::new(Mutex::new(counts)),
            refusals: RefusalLog::default(),
        }
    }

    /// The configured peers' IP addresses, one entry per peer.
    pub fn set_peer_ips(&self, ips: impl IntoIterator<Item = IpAddr>) {
        counts(&self.counts).handshakes.set_peer_ips(ips);
    }

    /// A slot for one handshake from `from`. At its source's cap, the
    /// source's oldest handshake in progress is closed to make room
    /// ([`HandshakePermit::evicted`]).
    pub fn begin_handshake(&self, from: IpAddr) -> HandshakePermit {
        let admitted = counts(&self.counts).handshakes.begin(from);
        HandshakePermit {
            counts: Some(self.counts.clone()),
            source: admitted.source,
            id: admitted.id,
            evicted: admitted.evicted,
        }
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

    /// Handshakes in progress counted with those from `from` (for tests).
    pub fn handshakes_from(&self, from: IpAddr) -> usize {
        let counts = counts(&self.counts);
        counts
            .handshakes
            .in_progress(counts.handshakes.source_of(from))
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
    source: Source,
    id: u64,
    evicted: CancellationToken,
}

impl HandshakePermit {
    /// The dialler's opening showed the cluster key: this handshake is
    /// closed for a newer one last.
    pub fn key_shown(&self) {
        if let Some(shared) = &self.counts {
            counts(shared).handshakes.key_shown(self.source, self.id);
        }
    }

    /// Resolves once a newer handshake from the same source took this
    /// one's slot: the connection is then to be closed.
    pub fn evicted(&self) -> WaitForCancellationFutureOwned {
        self.evicted.clone().cancelled_owned()
    }
}

impl Drop for HandshakePermit {
    fn drop(&mut self) {
        if let Some(shared) = self.counts.take() {
            counts(&shared).handshakes.end(self.source, self.id);
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

    const STRANGER: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 9, 9, 9));
    const PEER: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 1));

    fn limits(handshakes: usize, links_per_peer: usize) -> GateLimits {
        GateLimits {
            handshakes_per_peer: 1,
            handshakes,
            links_per_peer,
        }
    }

    #[tokio::test]
    async fn a_flood_closes_its_own_oldest_handshakes_not_a_peers() {
        let gate = PeerGate::new(limits(2, 1));
        gate.set_peer_ips([PEER]);
        let peer = gate.begin_handshake(PEER);
        let first = gate.begin_handshake(STRANGER);
        let second = gate.begin_handshake(STRANGER);
        let third = gate.begin_handshake(STRANGER);
        first.evicted().await;
        let still = |permit: &HandshakePermit| {
            futures_util::FutureExt::now_or_never(permit.evicted()).is_none()
        };
        assert!(still(&second) && still(&third) && still(&peer));
        drop(second);
        let fourth = gate.begin_handshake(STRANGER);
        assert!(
            still(&third) && still(&fourth),
            "a finished one frees its slot"
        );
    }

    #[tokio::test]
    async fn a_newer_link_supersedes_the_oldest_past_the_cap() {
        let gate = PeerGate::new(limits(8, 2));
        let admit = |peer| gate.admit_link(gate.begin_handshake(STRANGER), peer);
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
        let gate = PeerGate::new(limits(1, 4));
        let link = gate.admit_link(gate.begin_handshake(STRANGER), 0);
        assert_eq!(gate.handshakes_from(STRANGER), 0);
        drop(link);
    }
}
