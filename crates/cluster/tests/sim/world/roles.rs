//! The world's view of each node's role: who is active, promotions and
//! the grants a node must hold when it takes over.

use super::*;

impl World {
    pub(super) fn observe_role(&mut self, i: NodeIndex, handoff_from: Option<NodeIndex>) {
        let Some(engine) = self.driver.engine(i) else {
            return;
        };
        let (role, following, term) = (engine.role(), engine.following(), engine.term());
        let before = self.nodes[i].role;
        let term_before = std::mem::replace(&mut self.nodes[i].term, term);
        // An active that takes a handoff merges the table and starts a new
        // term: an activation of its own, as if it had promoted.
        let merged = handoff_from.is_some()
            && before == NodeRole::Active
            && role == NodeRole::Active
            && term != term_before;
        if role == before && !merged {
            return;
        }
        self.nodes[i].role = role;
        self.nodes[i].role_since = self.now;
        if matches!(before, NodeRole::HandingOff { .. }) && role == NodeRole::Active {
            // The successor refused: the same activation serves on.
            self.log(format!(
                "node {i}: handoff refused, serving on (term {term})"
            ));
            return;
        }
        self.log(format!(
            "node {i}: {before:?} -> {role:?} (following {following:?}, term {term})"
        ));
        if role == NodeRole::Active {
            self.nodes[i].activation += 1;
            self.summary.promotions += 1;
            if handoff_from.is_some() {
                self.summary.handoffs += 1;
                self.calm_handoffs += 1;
                self.summary.merges += u64::from(merged);
            } else {
                self.check_promotion(i);
            }
            self.nodes[i].active_since = self.now;
            self.on_promotion(i, handoff_from, merged);
        }
    }

    /// A node promoted itself: nothing may have kept it from hearing an
    /// active that has been running steadily all along.
    fn check_promotion(&mut self, i: NodeIndex) {
        let since = self.now.saturating_sub(TIMEOUT);
        if self.net_quiet_since > since {
            return;
        }
        let steady = (0..self.nodes.len()).find(|&j| {
            let n = &self.nodes[j];
            j != i
                && self.running(j)
                && n.role == NodeRole::Active
                && n.steady_since <= since
                && n.active_since <= since
        });
        if let Some(j) = steady {
            self.fail(format!(
                "node {i} promoted itself while node {j} has been active and steadily \
                 heard for a failure timeout"
            ));
        }
    }

    /// A node became active: it answers from now on for every held grant
    /// its table has. Taking over by handoff, it must have every grant the
    /// node handing over answered for.
    /// `merged`: it was active already and merged the table handed over.
    fn on_promotion(&mut self, i: NodeIndex, handoff_from: Option<NodeIndex>, merged: bool) {
        let offset = self.driver.local(i) - self.now;
        let activation = self.nodes[i].activation;
        let mut lost = Vec::new();
        let Some(engine) = self.driver.engine(i) else {
            return;
        };
        for (c, client) in self.clients.iter_mut().enumerate() {
            let key = client.key.clone();
            let Some(held) = client.held_mut() else {
                continue;
            };
            match engine.table().grant_of(&key, held.token) {
                Some(h) => {
                    held.custodians.push((i, activation));
                    held.cap = held.cap.min(h.expires_at.saturating_sub(offset));
                }
                // Both actives of a split granted the key; the merge keeps
                // the receiver's own grants.
                None if merged && engine.table().holder(&key).is_some() => {}
                _ => {
                    let from_custodian = handoff_from.is_some_and(|from| {
                        held.custodians
                            .iter()
                            .any(|&c| c.0 == from && custodian_valid(&self.driver, &self.nodes, c))
                    });
                    if from_custodian && self.now < held.valid_until() {
                        lost.push((c, key, held.token));
                    }
                }
            }
        }
        for (c, key, token) in lost {
            self.fail(format!(
                "node {i} took over by handoff from {handoff_from:?} without client {c}'s \
                 grant of {key} (token {token})"
            ));
        }
    }
}
