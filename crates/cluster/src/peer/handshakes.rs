//! The budget of peer handshakes in progress, by source address: each IP
//! address a configured peer has gets its own few slots, and every other
//! source shares the rest, so that a flood from elsewhere never takes a
//! genuine peer's slots. A source over its budget closes its own oldest
//! unfinished handshake to take the new one, sparing those whose opening
//! showed the cluster key while any other is left: a flood without the
//! key then cannot push out a genuine peer that shares its address once
//! its opening arrived, and has to open connections faster than that to
//! keep it out, instead of a handful per handshake timeout.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;

use tokio_util::sync::CancellationToken;

/// Which budget a handshake counts against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Source {
    /// An address one or more configured peers have.
    Peer(IpAddr),
    /// Any other address.
    Other,
}

/// One handshake in the budget: the token that closes it early.
#[derive(Debug)]
pub struct Admitted {
    pub source: Source,
    pub id: u64,
    pub evicted: CancellationToken,
}

/// One handshake in progress.
#[derive(Debug)]
struct Open {
    id: u64,
    evicted: CancellationToken,
    /// Its opening showed the cluster key.
    key_shown: bool,
}

/// Handshakes in progress, per source, oldest first.
#[derive(Debug)]
pub struct HandshakeBudget {
    per_peer: usize,
    others_cap: usize,
    /// Each configured peer's IP address, with how many peers have it.
    peer_ips: HashMap<IpAddr, usize>,
    open: HashMap<Source, VecDeque<Open>>,
    next_id: u64,
}

/// The address a connection comes from, as peers are listed: an IPv4
/// peer reached through an IPv6 socket shows as an IPv4-mapped address.
fn canonical(ip: IpAddr) -> IpAddr {
    ip.to_canonical()
}

impl HandshakeBudget {
    /// `per_peer` slots for each configured peer at its address,
    /// `others_cap` for every other source together.
    pub fn new(per_peer: usize, others_cap: usize) -> HandshakeBudget {
        assert!(per_peer > 0 && others_cap > 0, "a budget of no slots");
        HandshakeBudget {
            per_peer,
            others_cap,
            peer_ips: HashMap::new(),
            open: HashMap::new(),
            next_id: 0,
        }
    }

    /// The configured peers' addresses now, one entry per peer. A source
    /// that stops being a peer's keeps its handshakes in progress until
    /// they end; new ones count as [`Source::Other`].
    pub fn set_peer_ips(&mut self, ips: impl IntoIterator<Item = IpAddr>) {
        self.peer_ips.clear();
        for ip in ips {
            *self.peer_ips.entry(canonical(ip)).or_default() += 1;
        }
    }

    pub fn source_of(&self, from: IpAddr) -> Source {
        let from = canonical(from);
        if self.peer_ips.contains_key(&from) {
            Source::Peer(from)
        } else {
            Source::Other
        }
    }

    fn cap_of(&self, source: Source) -> usize {
        match source {
            Source::Peer(ip) => self.per_peer * self.peer_ips.get(&ip).copied().unwrap_or(1),
            Source::Other => self.others_cap,
        }
    }

    /// Takes a slot for a handshake from `from`. At its source's cap, the
    /// source's oldest handshakes are told to close (their slots are
    /// free at once).
    pub fn begin(&mut self, from: IpAddr) -> Admitted {
        let source = self.source_of(from);
        let cap = self.cap_of(source);
        let id = self.next_id;
        self.next_id += 1;
        let evicted = CancellationToken::new();
        let open = self.open.entry(source).or_default();
        while open.len() >= cap {
            let at = open.iter().position(|o| !o.key_shown).unwrap_or(0);
            if let Some(oldest) = open.remove(at) {
                oldest.evicted.cancel();
            }
        }
        open.push_back(Open {
            id,
            evicted: evicted.clone(),
            key_shown: false,
        });
        debug_assert!(open.len() <= cap);
        Admitted {
            source,
            id,
            evicted,
        }
    }

    /// Handshake `id`'s opening showed the cluster key: it is closed for a
    /// newer one only when every other one of its source showed it too.
    pub fn key_shown(&mut self, source: Source, id: u64) {
        if let Some(open) = self.open.get_mut(&source) {
            open.iter_mut()
                .filter(|o| o.id == id)
                .for_each(|o| o.key_shown = true);
        }
    }

    /// Frees handshake `id`'s slot (a no-op for one already evicted).
    pub fn end(&mut self, source: Source, id: u64) {
        if let Some(open) = self.open.get_mut(&source) {
            open.retain(|o| o.id != id);
            if open.is_empty() {
                self.open.remove(&source);
            }
        }
    }

    /// Handshakes in progress from `source`.
    pub fn in_progress(&self, source: Source) -> usize {
        self.open.get(&source).map_or(0, VecDeque::len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().expect("ip")
    }

    fn budget() -> HandshakeBudget {
        let mut budget = HandshakeBudget::new(2, 3);
        budget.set_peer_ips([ip("10.0.0.1"), ip("10.0.0.2"), ip("10.0.0.2")]);
        budget
    }

    #[test]
    fn a_flood_from_other_addresses_never_takes_a_peers_slots() {
        let mut budget = budget();
        let flood: Vec<Admitted> = (0..100).map(|_| budget.begin(ip("10.9.9.9"))).collect();
        assert_eq!(budget.in_progress(Source::Other), 3, "others share 3");
        let peer = budget.begin(ip("10.0.0.1"));
        assert_eq!(peer.source, Source::Peer(ip("10.0.0.1")));
        let (evicted, alive) = flood.split_at(97);
        assert!(evicted.iter().all(|a| a.evicted.is_cancelled()));
        assert!(alive.iter().all(|a| !a.evicted.is_cancelled()));
        assert!(!peer.evicted.is_cancelled());
    }

    #[test]
    fn each_peer_address_has_its_own_slots_per_peer_at_it() {
        let mut budget = budget();
        let one: Vec<Admitted> = (0..2).map(|_| budget.begin(ip("10.0.0.1"))).collect();
        let two: Vec<Admitted> = (0..4).map(|_| budget.begin(ip("10.0.0.2"))).collect();
        assert!(one.iter().chain(&two).all(|a| !a.evicted.is_cancelled()));
        let third = budget.begin(ip("10.0.0.1"));
        assert!(one[0].evicted.is_cancelled(), "its own oldest makes room");
        assert!(!one[1].evicted.is_cancelled() && !third.evicted.is_cancelled());
        assert!(two.iter().all(|a| !a.evicted.is_cancelled()));
        assert_eq!(budget.in_progress(Source::Peer(ip("10.0.0.1"))), 2);
    }

    #[test]
    fn ended_handshakes_free_their_slots_and_mapped_addresses_count_as_peers() {
        let mut budget = budget();
        let a = budget.begin(ip("::ffff:10.0.0.1"));
        assert_eq!(a.source, Source::Peer(ip("10.0.0.1")));
        let b = budget.begin(ip("10.0.0.1"));
        budget.end(a.source, a.id);
        let c = budget.begin(ip("10.0.0.1"));
        assert!(!b.evicted.is_cancelled() && !c.evicted.is_cancelled());
        budget.end(b.source, b.id);
        budget.end(c.source, c.id);
        budget.end(c.source, c.id);
        assert_eq!(budget.in_progress(Source::Peer(ip("10.0.0.1"))), 0);
    }

    #[test]
    fn handshakes_that_showed_the_key_are_closed_last() {
        let mut budget = budget();
        let peer = budget.begin(ip("10.0.0.1"));
        budget.key_shown(peer.source, peer.id);
        let flood: Vec<Admitted> = (0..50).map(|_| budget.begin(ip("10.0.0.1"))).collect();
        assert!(!peer.evicted.is_cancelled(), "the flood closes its own");
        assert!(!flood[49].evicted.is_cancelled() && flood[48].evicted.is_cancelled());
        let other = budget.begin(ip("10.0.0.1"));
        budget.key_shown(other.source, other.id);
        let last = budget.begin(ip("10.0.0.1"));
        assert!(
            peer.evicted.is_cancelled(),
            "all showed it: the oldest goes"
        );
        assert!(!other.evicted.is_cancelled() && !last.evicted.is_cancelled());
    }

    #[test]
    fn an_address_no_peer_has_any_more_counts_with_the_others() {
        let mut budget = budget();
        budget.set_peer_ips([ip("10.0.0.2")]);
        assert_eq!(budget.begin(ip("10.0.0.1")).source, Source::Other);
    }
}
