//! The faults of a run: crashes and restarts, graceful stops, pauses,
//! partitions and loss, started at random and ended on time.

use baton_cluster::priority::{NodeIndex, NodeRole};

use super::{engine, Answer, World, CALM_END, SETTLE, TIMEOUT};

impl World {
    pub(super) fn end_faults(&mut self) {
        let now = self.now;
        for i in 0..self.nodes.len() {
            if self.nodes[i].paused_until.is_some_and(|t| t <= now) {
                self.resume(i);
            }
            if self.nodes[i].restart_at.is_some_and(|t| t <= now) && self.may_restart(i) {
                self.restart(i);
            }
            if let Some(until) = self.nodes[i].stopping_until {
                let confirmed = self
                    .driver
                    .engine(i)
                    .is_some_and(|e| e.handed_off_to().is_some());
                if confirmed || now >= until {
                    self.log(format!(
                        "node {i} exits after its handoff (confirmed: {confirmed})"
                    ));
                    self.crash(i);
                } else if self.running(i) && self.nodes[i].role == NodeRole::Active {
                    // The successor refused: the shell offers the role again.
                    self.call(i, None, |engine, now| engine.handle_begin_handoff(now));
                }
            }
        }
        if self.heal_at.is_some_and(|t| t <= now) {
            self.heal_at = None;
            self.last_disturbance = now;
            self.tokens_free_until = now + SETTLE;
            for (a, b) in self.net.heal() {
                // Some links broke during the split, some outlived it.
                if self.rng.chance(0.5) && self.running(a) {
                    self.call(a, None, |engine, _| engine.handle_link_down(b));
                }
            }
            self.log("partition healed".into());
        }
        if self.loss_until.is_some_and(|t| t <= now) {
            self.loss_until = None;
            self.net.loss = 0.0;
            self.last_disturbance = now;
        }
    }

    pub(super) fn start_fault(&mut self) {
        if self.now < self.next_fault || self.now + CALM_END >= self.duration {
            return;
        }
        self.next_fault = self.now + self.rng.range(30, 500);
        let n = self.nodes.len();
        match self.rng.below(6) {
            0 => {
                let i = self.rng.below(n);
                if self.running(i)
                    && self.nodes[i].stopping_until.is_none()
                    && self.others_carry_on(i)
                {
                    self.log(format!("node {i} crashes"));
                    self.crash(i);
                }
            }
            1 => self.stop_an_active(n),
            2 if self.profile.pauses => {
                let i = self.rng.below(n);
                if self.running(i) && self.others_carry_on(i) {
                    let length = self.rng.range(5, 3 * TIMEOUT);
                    self.log(format!("node {i} pauses for {length} ms"));
                    self.nodes[i].paused_until = Some(self.now + length);
                    self.summary.pauses += 1;
                }
            }
            3 if self.profile.partitions && !self.net.partitioned() && self.all_informed() => {
                self.partition(n);
            }
            _ => {
                let loss = self.rng.range(1, 8) as f64 / 100.0;
                let length = self.rng.range(50, 500);
                self.log(format!("loss {loss} for {length} ms"));
                self.net.loss = loss;
                self.loss_until = Some(self.now + length);
            }
        }
    }

    /// A graceful stop of a random active.
    fn stop_an_active(&mut self, n: usize) {
        let actives: Vec<NodeIndex> = (0..n)
            .filter(|&i| {
                self.running(i)
                    && self.nodes[i].role == NodeRole::Active
                    && self.nodes[i].stopping_until.is_none()
            })
            .collect();
        if actives.is_empty() {
            return;
        }
        let i = actives[self.rng.below(actives.len())];
        // In a partition a graceful stop hands its table to a node
        // it reaches (which then knows its tokens); with none, the
        // stop is not tried (it would be a crash inside a split).
        let split = self.net.partitioned();
        if !split && !self.others_carry_on(i) || split && !self.may_restart(i) {
            return;
        }
        self.log(format!("node {i} stops gracefully"));
        self.last_disturbance = self.now;
        let begun = self.call(i, None, |engine, now| engine.handle_begin_handoff(now));
        if begun == Some(true) {
            self.nodes[i].stopping_until = Some(self.now + 200);
        } else if split {
            self.log(format!("node {i} finds no successor; stays"));
        } else {
            self.crash(i);
        }
    }

    /// A partition: two nodes cut from each other, or the nodes in two sides.
    fn partition(&mut self, n: usize) {
        let length = self.rng.range(30, 600);
        if n > 2 && self.rng.chance(0.3) {
            // Two nodes lose each other while the rest reach both.
            let a = self.rng.below(n);
            let b = (a + 1 + self.rng.below(n - 1)) % n;
            self.log(format!(
                "partition between {a} and {b} only for {length} ms"
            ));
            self.net.cut_pair(a, b);
        } else {
            let mut sides: Vec<bool> = (0..n).map(|_| self.rng.chance(0.5)).collect();
            if sides.iter().all(|&s| s == sides[0]) {
                sides[self.rng.below(n)] = !sides[0];
            }
            self.log(format!("partition {sides:?} for {length} ms"));
            self.net.partition(sides);
        }
        self.heal_at = Some(self.now + length);
        self.summary.partitions += 1;
    }

    /// Whether the cluster keeps a node that has run long enough to know
    /// its state if `i` goes away. Without one, the survivors know nothing
    /// and fall back on the wall clock, which the docs only promise for a
    /// restart slower than the token margin (several seconds).
    /// During a partition nothing goes away, for the same reason: the node
    /// that knew might be on the other side.
    fn others_carry_on(&self, i: NodeIndex) -> bool {
        !self.net.partitioned()
            && (0..self.nodes.len()).any(|j| {
                j != i
                    && self.running(j)
                    && self.nodes[j].stopping_until.is_none()
                    && self.nodes[j].up_since + 2 * TIMEOUT <= self.now
            })
    }

    /// A node that restarts knows nothing: it must reach a node that knows
    /// the cluster's tokens, or it would fall back on the wall clock alone,
    /// which covers only restarts slower than the token margin (seconds,
    /// docs/cluster.md); the simulated ones take under one.
    fn may_restart(&self, i: NodeIndex) -> bool {
        (0..self.nodes.len()).any(|j| {
            j != i && self.informed(j) && self.net.can_reach(i, j) && self.net.can_reach(j, i)
        })
    }

    /// Running long enough to have heard the cluster's tokens.
    fn informed(&self, j: NodeIndex) -> bool {
        self.running(j) && self.nodes[j].up_since + 2 * TIMEOUT <= self.now
    }

    /// No partition cuts off a node that just restarted, for the same reason.
    fn all_informed(&self) -> bool {
        (0..self.nodes.len())
            .all(|j| !self.up(j) || self.nodes[j].up_since + 2 * TIMEOUT <= self.now)
    }

    fn crash(&mut self, i: NodeIndex) {
        self.summary.crashes += 1;
        self.last_disturbance = self.now;
        self.driver.crash(i);
        let node = &mut self.nodes[i];
        node.paused_until = None;
        node.stopping_until = None;
        node.held.clear();
        node.role = NodeRole::Standby;
        node.restart_at = Some(self.now + self.rng.range(50, 800));
        let requests = std::mem::take(&mut node.held_requests);
        self.net.drop_node(i);
        for (c, _) in requests {
            self.answer(c, i, Answer::Gone);
        }
        for c in 0..self.clients.len() {
            let serial = self.clients[c].serial;
            let now = self.now;
            self.clients[c].wait_ended(i, serial, Some(None), now, &mut self.rng);
        }
        for j in 0..self.nodes.len() {
            if j != i && self.running(j) {
                self.call(j, None, |engine, _| engine.handle_link_down(i));
            }
        }
    }

    fn restart(&mut self, i: NodeIndex) {
        let n = self.nodes.len();
        let offset = self.rng.range(0, 1_000_000);
        let engine = engine(i, n, offset, self.now + offset, self.profile);
        self.driver.start(i, engine, offset);
        let node = &mut self.nodes[i];
        node.up_since = self.now;
        node.steady_since = self.now;
        node.restart_at = None;
        node.role = NodeRole::Standby;
        self.last_disturbance = self.now;
        self.log(format!("node {i} restarts"));
    }

    /// After a pause the node finds its timer due, the peers' messages and
    /// the clients' requests of the pause, and takes them in any order.
    fn resume(&mut self, i: NodeIndex) {
        self.nodes[i].paused_until = None;
        self.nodes[i].steady_since = self.now;
        self.last_disturbance = self.now;
        let order = self.rng.below(3);
        self.log(format!("node {i} resumes (order {order})"));
        let messages = std::mem::take(&mut self.nodes[i].held);
        let requests = std::mem::take(&mut self.nodes[i].held_requests);
        if order == 0 {
            self.call(i, None, |engine, now| engine.handle_tick(now));
        }
        for envelope in messages {
            self.receive(envelope);
        }
        if order == 1 {
            self.call(i, None, |engine, now| engine.handle_tick(now));
        }
        for (c, request) in requests {
            self.serve(i, c, request);
        }
        if order == 2 {
            self.call(i, None, |engine, now| engine.handle_tick(now));
        }
    }
}
