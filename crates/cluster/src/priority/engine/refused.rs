//! Peers that answer but refuse the link: a node started with another
//! cluster key or another peer list. Such a peer is alive and
//! incompatible, not dead: treating it as dead would let a misconfigured
//! node promote beside the real active (and grant keys it holds, from
//! token blocks another peer list shares out differently).
//!
//! The shell reports each refusal it meets when dialling a peer
//! ([`PriorityNode::handle_link_refused`], at every redial, some 100 ms
//! apart); a report counts for a failure timeout but at least
//! [`REFUSAL_HOLD_MIN_MS`], until a dial finds nobody listening there
//! ([`PriorityNode::handle_nobody_listening`]: the process is gone), and
//! a peer heard since counts as linked.
//! The rule, from what this node sees at `now`:
//! - *linked*: this node and the peers it hears; *refusing*: the peers
//!   that answered with a refusal within a failure timeout;
//! - with refusing peers and no linked peer, the node does not serve: it
//!   cannot tell whether it or they are misconfigured, and they may serve;
//! - otherwise the larger side serves, and of two equal sides the one
//!   with the peer of highest priority: two sides that see each other
//!   this way never both serve. A lone misconfigured node, wherever it is
//!   in the peer list, so never blocks the real nodes' failover.
//!
//! A node so barred does not promote, steps down if it was active, and
//! says why in one log line a minute and in `/health`.

use baton_core::{LogGate, Millis};

use super::super::messages::NodeIndex;
use super::roles::addr_in;
use super::sanity::REFUSAL_LOG_EVERY_MS;
use super::PriorityNode;

/// A refusal counts at least this long after it came (a failure timeout
/// if longer): a misconfigured node must not take a redial that came late
/// on a loaded host for a dead peer and promote. A peer that is gone
/// says so sooner, by refusing the connection.
pub const REFUSAL_HOLD_MIN_MS: Millis = 1_000;

/// Why a peer that answers does not link with this node, as the shell
/// found it when dialling the peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkRefused {
    /// The handshake failed for the key: one of the two does not hold
    /// the other's cluster key.
    Key,
    /// The peer took the handshake but not this node's peer list.
    PeerList,
    /// The peer answered the hello with something that is no handshake
    /// (not a baton peer of this version).
    Handshake,
}

impl std::fmt::Display for LinkRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LinkRefused::Key => {
                "another cluster key (every node needs the same --cluster-key-file)"
            }
            LinkRefused::PeerList => {
                "another peer list (every node needs the same --peers, in the same order)"
            }
            LinkRefused::Handshake => "no peer handshake (not a baton node of this version?)",
        })
    }
}

/// The last refusal a peer gave, as the engine keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Refusal {
    why: LinkRefused,
    at: Millis,
    /// When this refusal (this peer, this reason) was last logged.
    log: LogGate<Millis>,
}

/// Why a node does not serve although the roles' rules would let it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Barred {
    /// Peers answer, but none links with this node.
    Alone { peer: NodeIndex, why: LinkRefused },
    /// The refusing peers outnumber the linked nodes (this one
    /// included), or are as many and one of them comes first.
    Outnumbered {
        linked: usize,
        refusing: usize,
        peer: NodeIndex,
        why: LinkRefused,
    },
}

impl<H> PriorityNode<H> {
    /// The shell's dial of `peer` was answered with a refusal `why`. A
    /// peer out of range, or this node, is ignored.
    pub fn handle_link_refused(&mut self, peer: NodeIndex, why: LinkRefused, now: Millis) {
        if peer == self.config.me {
            return;
        }
        let Some(view) = self.peers.get_mut(peer) else {
            return;
        };
        let log = view
            .link_refused
            .filter(|r| r.why == why)
            .map(|r| r.log)
            .unwrap_or_default();
        view.link_refused = Some(Refusal { why, at: now, log });
        self.enforce_bar(now);
        self.checked();
    }

    /// The shell's dial of `peer` found nobody listening (connection
    /// refused): the process that refused the link is gone, and its
    /// refusal no longer counts. A peer out of range is ignored.
    pub fn handle_nobody_listening(&mut self, peer: NodeIndex) {
        if let Some(view) = self.peers.get_mut(peer) {
            view.link_refused = None;
        }
        self.checked();
    }

    /// Whether `peer` answered with a refusal that still counts (see
    /// [`REFUSAL_HOLD_MIN_MS`]) and is not heard (a peer heard is linked).
    pub fn refuses_link(&self, peer: NodeIndex, now: Millis) -> bool {
        let hold = self.config.failure_timeout_ms.max(REFUSAL_HOLD_MIN_MS);
        self.peers.get(peer).is_some_and(|view| {
            view.link_refused
                .is_some_and(|r| now.saturating_sub(r.at) <= hold)
        }) && !self.is_live(peer, now)
    }

    /// Why this node may not serve at `now`, if it may not (see the
    /// module doc).
    pub fn barred(&self, now: Millis) -> Option<Barred> {
        let mut refusing = self.others().filter(|&p| self.refuses_link(p, now));
        let peer = refusing.next()?;
        let refusing = 1 + refusing.count();
        let why = self.peers[peer].link_refused.map(|r| r.why)?;
        let me = self.config.me;
        let mut linked = (0..self.peers.len()).filter(|&p| p == me || self.is_live(p, now));
        let first_linked = linked.next().unwrap_or(me);
        let linked = 1 + linked.count();
        if linked == 1 {
            return Some(Barred::Alone { peer, why });
        }
        let wins = linked > refusing || (linked == refusing && first_linked < peer);
        (!wins).then_some(Barred::Outnumbered {
            linked,
            refusing,
            peer,
            why,
        })
    }

    /// [`Self::barred`] in words, naming the peer by its address (for
    /// `/health` and the log).
    pub fn barred_reason(&self, now: Millis) -> Option<String> {
        let peers = &self.config.peers;
        Some(match self.barred(now)? {
            Barred::Alone { peer, why } => format!(
                "not serving: peers answer but none links with this node; {} refuses the \
                 link: {why}",
                addr_in(peers, peer)
            ),
            Barred::Outnumbered {
                linked,
                refusing,
                peer,
                why,
            } => format!(
                "not serving: {refusing} peers that answer refuse the link, against {linked} \
                 linked nodes (this one included); {} refuses it: {why}",
                addr_in(peers, peer)
            ),
        })
    }

    /// A barred node steps down if it is active; the refusals are
    /// logged, each at most once a minute.
    pub(super) fn enforce_bar(&mut self, now: Millis) {
        if self.barred(now).is_some() {
            let reason = self.barred_reason(now);
            let due = reason.is_some() && self.barred_log.note(now, REFUSAL_LOG_EVERY_MS).is_some();
            if let Some(reason) = reason.filter(|_| due) {
                tracing::warn!(node = self.addr(self.config.me), "{reason}");
            }
            if self.role.is_active() {
                self.step_down(None, now, "peers that answer refuse the link");
            }
        } else {
            self.log_refusing_peers(now);
        }
    }

    /// One line per refusing peer and reason, at most once a minute,
    /// while the node is not barred (a barred node's line names them).
    fn log_refusing_peers(&mut self, now: Millis) {
        for p in 0..self.peers.len() {
            if !self.refuses_link(p, now) {
                continue;
            }
            let peers = &self.config.peers;
            let Some(refusal) = self.peers[p].link_refused.as_mut() else {
                continue;
            };
            if refusal.log.note(now, REFUSAL_LOG_EVERY_MS).is_some() {
                tracing::warn!(
                    peer = addr_in(peers, p),
                    "peer answers but refuses the link: {}",
                    refusal.why
                );
            }
        }
    }
}
