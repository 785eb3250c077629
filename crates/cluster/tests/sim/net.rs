//! The simulated network between the nodes: per-message delay, loss, link
//! resets and partitions. Each link delivers in order, as the TCP link the
//! shell uses does, so a delay never reorders two messages of one link.

use std::collections::BTreeMap;

use baton_cluster::priority::{NodeIndex, PriorityMessage};
use baton_core::Millis;

use super::rng::Rng;

#[derive(Debug)]
pub struct Envelope {
    pub from: NodeIndex,
    pub to: NodeIndex,
    pub message: PriorityMessage,
}

/// What became of a message handed to the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sent {
    OnItsWay,
    /// Dropped alone, the link staying up (a partition's black hole, loss).
    Lost,
    /// The link broke: this message and everything in flight on it are
    /// gone, and the sender learns it (the shell's `on_link_down`).
    Reset,
}

#[derive(Debug)]
pub struct Network {
    in_flight: BTreeMap<(Millis, u64), Envelope>,
    /// When the last message sent on each link arrives: later ones queue
    /// behind it.
    link_busy_until: Vec<Vec<Millis>>,
    next_id: u64,
    pub max_delay: u64,
    /// Chance that a message is lost, while a lossy episode lasts.
    pub loss: f64,
    /// While a partition lasts, `cut[a][b]`: nothing sent by `a` reaches `b`.
    cut: Option<Vec<Vec<bool>>>,
}

impl Network {
    pub fn new(nodes: usize, max_delay: u64) -> Network {
        Network {
            in_flight: BTreeMap::new(),
            link_busy_until: vec![vec![0; nodes]; nodes],
            next_id: 0,
            max_delay,
            loss: 0.0,
            cut: None,
        }
    }

    pub fn can_reach(&self, a: NodeIndex, b: NodeIndex) -> bool {
        self.cut.as_ref().is_none_or(|cut| !cut[a][b])
    }

    pub fn partitioned(&self) -> bool {
        self.cut.is_some()
    }

    /// A clean split: the nodes on one side reach each other only.
    pub fn partition(&mut self, sides: Vec<bool>) {
        let n = sides.len();
        let cut = (0..n)
            .map(|a| (0..n).map(|b| sides[a] != sides[b]).collect())
            .collect();
        self.cut = Some(cut);
    }

    /// A partial partition: only `a` and `b` lose each other, and every
    /// other node still reaches both (a bridge between the two).
    pub fn cut_pair(&mut self, a: NodeIndex, b: NodeIndex) {
        let n = self.link_busy_until.len();
        let mut cut = vec![vec![false; n]; n];
        cut[a][b] = true;
        cut[b][a] = true;
        self.cut = Some(cut);
    }

    /// Ends the partition; returns the links that were cut.
    pub fn heal(&mut self) -> Vec<(NodeIndex, NodeIndex)> {
        let Some(cut) = self.cut.take() else {
            return Vec::new();
        };
        let mut links = Vec::new();
        for (a, row) in cut.iter().enumerate() {
            for (b, &is_cut) in row.iter().enumerate() {
                if is_cut {
                    links.push((a, b));
                }
            }
        }
        links
    }

    pub fn send(&mut self, envelope: Envelope, now: Millis, rng: &mut Rng) -> Sent {
        let (from, to) = (envelope.from, envelope.to);
        if !self.can_reach(from, to) {
            return Sent::Lost;
        }
        if self.loss > 0.0 && rng.chance(self.loss) {
            if rng.chance(0.5) {
                self.drop_link(from, to);
                return Sent::Reset;
            }
            return Sent::Lost;
        }
        let at = now
            .saturating_add(rng.range(0, self.max_delay))
            .max(self.link_busy_until[from][to]);
        self.link_busy_until[from][to] = at;
        self.in_flight.insert((at, self.next_id), envelope);
        self.next_id += 1;
        Sent::OnItsWay
    }

    /// The messages due by `now`, in arrival order. A message that meets a
    /// partition on arrival is lost.
    pub fn due(&mut self, now: Millis) -> Vec<Envelope> {
        let later = self.in_flight.split_off(&(now + 1, 0));
        let due = std::mem::replace(&mut self.in_flight, later);
        due.into_values()
            .filter(|e| self.can_reach(e.from, e.to))
            .collect()
    }

    /// A crash: nothing to or from `node` arrives any more.
    pub fn drop_node(&mut self, node: NodeIndex) {
        self.in_flight.retain(|_, e| e.from != node && e.to != node);
    }

    pub fn drop_link(&mut self, from: NodeIndex, to: NodeIndex) {
        self.in_flight.retain(|_, e| e.from != from || e.to != to);
    }
}
