//! The checks run after every step: each node's own invariants, custody
//! of grants, no redirect loops, no refused messages, exclusion where the
//! faults allow it, and one settled active long after the last fault.

use baton_cluster::priority::{NodeIndex, NodeRole};
use baton_core::Token;

use super::{custodian_valid, World, KEYS, SETTLE, TIMEOUT};

impl World {
    pub(super) fn check(&mut self) {
        let disturbed = self.net.partitioned()
            || self.net.loss > 0.0
            || self
                .nodes
                .iter()
                .any(|n| n.paused_until.is_some() || n.stopping_until.is_some());
        if disturbed {
            self.last_disturbance = self.now;
        }
        // Faults (crashes, restarts, resets) mark `last_disturbance` too.
        if self.last_disturbance == self.now {
            self.calm_handoffs = 0;
        }
        if self.net.partitioned() || self.net.loss > 0.0 {
            self.net_quiet_since = self.now;
        }
        self.check_invariants();
        self.check_custody();
        self.check_redirects();
        self.check_no_refusals();
        if !self.profile.pauses && !self.profile.partitions {
            self.check_exclusion();
        }
        if self.now >= self.last_disturbance + SETTLE {
            self.check_settled();
        }
    }

    /// Every node's own invariants hold after every step.
    fn check_invariants(&mut self) {
        if let Err((i, broken)) = self.driver.validate() {
            self.fail(format!("node {i}: {broken}"));
        }
    }

    /// The sanity bounds never refuse what sound nodes send, however
    /// quick the failovers.
    fn check_no_refusals(&mut self) {
        let n = self.nodes.len();
        let refused = (0..n).find_map(|i| {
            let engine = self.driver.engine(i)?;
            (0..n).find(|&p| engine.refused_from(p) > 0).map(|p| (i, p))
        });
        if let Some((i, p)) = refused {
            self.fail(format!(
                "node {i} refused a message of node {p} (sanity bound)"
            ));
        }
    }

    /// No two nodes that answer clients send them to each other, at any
    /// moment.
    fn check_redirects(&mut self) {
        let target = |i: NodeIndex| {
            self.driver
                .engine(i)
                .filter(|_| self.running(i))
                .and_then(|e| e.redirect_target())
        };
        let targets: Vec<Option<NodeIndex>> = (0..self.nodes.len()).map(target).collect();
        let n = targets.len();
        for i in 0..n {
            for j in i + 1..n {
                if targets[i] == Some(j) && targets[j] == Some(i) {
                    self.fail(format!("nodes {i} and {j} redirect clients to each other"));
                }
            }
        }
    }

    /// While a node that granted (or took over) a grant stays active, the
    /// grant is in its table until released or run out.
    fn check_custody(&mut self) {
        let mut dropped = Vec::new();
        for (c, client) in self.clients.iter().enumerate() {
            let Some(held) = client.held() else {
                continue;
            };
            if self.now >= held.valid_until() {
                continue;
            }
            for &(node, activation) in &held.custodians {
                if !custodian_valid(&self.driver, &self.nodes, (node, activation)) {
                    continue;
                }
                let Some(engine) = self.driver.engine(node) else {
                    continue;
                };
                if engine.table().grant_of(&client.key, held.token).is_none() {
                    let found = engine.table().holder(&client.key).map(|h| h.token);
                    dropped.push((c, node, client.key.clone(), held.token, found, held.end));
                }
            }
        }
        for (c, node, key, token, found, end) in dropped {
            self.fail(format!(
                "node {node} is still active but dropped client {c}'s grant of {key} \
                 (token {token}, lease to t={end}); its table has {found:?}"
            ));
        }
    }

    /// Never more clients hold a key than its kind allows (one for a plain
    /// key, its permits for a semaphore, any number of shared grants or a
    /// single exclusive one for a readers-writer key) while the grants are
    /// still answered for.
    fn check_exclusion(&mut self) {
        for (key, kind) in KEYS {
            let holders: Vec<(usize, Token, bool)> = self
                .clients
                .iter()
                .enumerate()
                .filter(|(_, client)| client.key.as_bytes() == key.as_bytes())
                .filter_map(|(c, client)| client.held().map(|held| (c, held)))
                .filter(|(_, held)| {
                    self.now < held.valid_until()
                        && held
                            .custodians
                            .iter()
                            .any(|&c| custodian_valid(&self.driver, &self.nodes, c))
                })
                .map(|(c, held)| (c, held.token, held.shared))
                .collect();
            let shared = holders.iter().filter(|h| h.2).count();
            if !kind.allows(holders.len(), shared) {
                self.fail(format!(
                    "{key} ({kind:?}) is held beyond its kind: (client, token, shared) {holders:?}"
                ));
            }
        }
    }

    /// Long after the last fault: one active, and every other live node
    /// follows it.
    fn check_settled(&mut self) {
        self.summary.settled_steps += 1;
        let live: Vec<NodeIndex> = (0..self.nodes.len()).filter(|&i| self.up(i)).collect();
        if self.calm_handoffs > self.nodes.len() {
            self.fail(format!(
                "{} handoffs since the last fault, {} ms ago: the role goes back and forth",
                self.calm_handoffs,
                self.now - self.last_disturbance
            ));
            return;
        }
        // A planned handoff (the role going back to a node earlier in the
        // list) can start at any time. Until the successor's "taken"
        // arrives, the sender is handing off, and the successor may not
        // serve yet: a message's trip, never longer than a failure timeout.
        let handing_off = live.iter().any(|&i| {
            matches!(self.nodes[i].role, NodeRole::HandingOff { .. })
                && self.now - self.nodes[i].role_since <= TIMEOUT
        });
        if handing_off {
            return;
        }
        let actives: Vec<NodeIndex> = live
            .iter()
            .copied()
            .filter(|&i| self.nodes[i].role == NodeRole::Active)
            .collect();
        if actives.len() != 1 {
            self.fail(format!(
                "settled for {} ms, yet the active nodes are {actives:?} (live: {live:?})",
                self.now - self.last_disturbance
            ));
            return;
        }
        let active = actives[0];
        for &i in &live {
            let Some(engine) = self.driver.engine(i) else {
                continue;
            };
            // After a planned handoff, the others hear of the new active
            // from its heartbeats. `calm_handoffs` bounds how often the
            // role may move.
            let just_handed = self.now - self.nodes[active].active_since <= TIMEOUT;
            if i != active && engine.following() != Some(active) && !just_handed {
                let (role, following) = (engine.role(), engine.following());
                self.fail(format!(
                    "settled with node {active} active, but node {i} is {role:?} following \
                     {following:?}"
                ));
            }
        }
    }
}
