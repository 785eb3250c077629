//! Playing a scenario's steps in order, and the verdict.

use std::time::Duration;

use tokio::net::TcpListener;
use tokio::time::Instant;

use crate::net;
use crate::pattern::{expand, matches};
use crate::player::{Heard, Place, Player, StandingRule};
use crate::script::{Step, Timing, Where, SCENARIO_LIMIT_MS};

/// How a scenario ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    Fail(String),
    /// The adapter said its client has no such call (`unsupported`).
    Skip(String),
}

/// What a step tells the loop.
enum Flow {
    Next,
    Skip(String),
}

/// How long `up` keeps trying to bind its old port again.
const REBIND_FOR: Duration = Duration::from_secs(3);

impl Player {
    /// Plays every step; the first one that fails ends the scenario.
    pub async fn play(&mut self) -> Verdict {
        let steps = self.scenario.steps.clone();
        for line in &steps {
            self.log(&format!("step {}: {}", line.line, line.text));
            let outcome = match self.run(&line.step).await {
                Ok(flow) => self.failure.take().map_or(Ok(flow), Err),
                Err(why) => Err(why),
            };
            match outcome {
                Ok(Flow::Next) => {}
                Ok(Flow::Skip(why)) => return Verdict::Skip(why),
                Err(why) => {
                    return Verdict::Fail(format!("line {} `{}`: {why}", line.line, line.text))
                }
            }
        }
        Verdict::Pass
    }

    async fn run(&mut self, step: &Step) -> Result<Flow, String> {
        let start = Instant::now();
        match step {
            Step::Do { id, action } => {
                let action = self.expand(action)?;
                self.marks.insert(format!("do-{id}"), start);
                self.tell_adapter(&format!("do {id} {action}"));
            }
            Step::Cancel { id } => self.tell_adapter(&format!("cancel {id}")),
            Step::Outcome {
                timing,
                id,
                expected,
            } => return self.outcome(start, timing, id, expected).await,
            Step::Expect {
                timing,
                from,
                bind,
                pattern,
            } => {
                self.expect(start, timing, from, bind.as_deref(), pattern)
                    .await?
            }
            Step::ExpectConnect { timing, at, bind } => {
                self.expect_connect(start, timing, at.as_deref(), bind.as_deref())
                    .await?
            }
            Step::ExpectClose { timing, conn } => self.expect_close(start, timing, conn).await?,
            Step::Absent {
                within_ms,
                from,
                pattern,
            } => self.absent(start, *within_ms, from, pattern).await?,
            Step::Up { node } => self.up(node).await?,
            Step::Sleep { ms } => {
                self.wait_for(start + Duration::from_millis(*ms), |_| None::<()>)
                    .await?;
            }
            other => self.control(other, start)?,
        }
        Ok(Flow::Next)
    }

    /// The steps that act at once on the nodes, the connections or the marks.
    fn control(&mut self, step: &Step, start: Instant) -> Result<(), String> {
        match step {
            Step::Reply { line } => {
                let conn = self.last.ok_or("no `expect` before this reply")?;
                let line = self.expand(line)?;
                self.write(conn, &line);
            }
            Step::Send { conn, line } => {
                let conn = self.conn(conn)?;
                let line = self.expand(line)?;
                self.write(conn, &line);
            }
            Step::Close { target } => {
                for conn in self.targets(target)? {
                    self.close(conn);
                }
            }
            Step::Stall { target } => self.stall(target, true)?,
            Step::Resume { target } => self.stall(target, false)?,
            Step::Refuse { node } => {
                let node = self.node(node)?;
                self.nodes[node].refusing = true;
            }
            Step::Accept { node } => {
                let node = self.node(node)?;
                self.nodes[node].refusing = false;
            }
            Step::Down { node } => self.down(node)?,
            Step::Mark { name } => {
                self.marks.insert(name.clone(), start);
            }
            Step::Check {
                node,
                counter,
                lo,
                hi,
            } => self.check(node, counter, *lo..=*hi)?,
            Step::Always { rule } => {
                let standing = StandingRule {
                    place: self.place(&rule.from)?,
                    pattern: self.expand(&rule.pattern)?,
                    reply: rule.reply.as_deref().map(|r| self.expand(r)).transpose()?,
                };
                self.rules.push(standing);
            }
            // The steps that wait are played by `run`.
            _ => {}
        }
        Ok(())
    }

    pub(crate) fn expand(&self, text: &str) -> Result<String, String> {
        let lookup = |name: &str| {
            if name == "ca" {
                return self.tls.as_ref().map(|t| t.ca_file.display().to_string());
            }
            self.nodes
                .iter()
                .find(|n| n.decl.name == name)
                .map(|n| n.addr.to_string())
        };
        expand(text, &lookup)
    }

    fn node(&self, name: &str) -> Result<usize, String> {
        self.nodes
            .iter()
            .position(|n| n.decl.name == name)
            .ok_or_else(|| format!("no node named {name}"))
    }

    fn conn(&self, name: &str) -> Result<usize, String> {
        self.names
            .get(name)
            .copied()
            .ok_or_else(|| format!("no connection was bound to the name {name} (as=)"))
    }

    /// The open connections a target names: one connection, or a node's.
    fn targets(&self, target: &str) -> Result<Vec<usize>, String> {
        if let Ok(conn) = self.conn(target) {
            return Ok(vec![conn]);
        }
        let node = self
            .node(target)
            .map_err(|_| format!("{target} names no connection and no node"))?;
        Ok((0..self.conns.len())
            .filter(|&c| self.conns[c].node == node && self.conns[c].open)
            .collect())
    }

    /// When a timed step's clock starts: its `since=` mark, or `start`.
    fn base(&self, timing: &Timing, start: Instant) -> Result<Instant, String> {
        match &timing.since {
            None => Ok(start),
            Some(mark) => self
                .marks
                .get(mark)
                .copied()
                .ok_or_else(|| format!("no mark named {mark} yet")),
        }
    }

    /// Fails when `at` came before the step's `after=`.
    fn not_too_early(&self, timing: &Timing, base: Instant, at: Instant) -> Result<(), String> {
        let came = at.saturating_duration_since(base).as_millis();
        let Some(after) = timing.after_ms else {
            self.log(&format!("  ({came} ms)"));
            return Ok(());
        };
        if at < base + Duration::from_millis(after) {
            let early = base.saturating_duration_since(at).as_millis();
            let when = if early > 0 {
                format!("{early} ms before")
            } else {
                format!("{came} ms after")
            };
            return Err(format!(
                "it came {when} {}, earlier than after={after}",
                timing.since.as_deref().unwrap_or("the step began"),
            ));
        }
        self.log(&format!("  ({came} ms)"));
        Ok(())
    }

    fn deadline(&self, timing: &Timing, base: Instant) -> Instant {
        let whole = self.start + Duration::from_millis(SCENARIO_LIMIT_MS);
        (base + Duration::from_millis(timing.within_ms)).min(whole)
    }

    /// `from`'s names resolved, before waiting.
    fn place(&self, from: &Where) -> Result<Place, String> {
        Ok(Place {
            node: from.at.as_deref().map(|n| self.node(n)).transpose()?,
            on: from.on.as_deref().map(|c| self.conn(c)).transpose()?,
            not_on: from
                .not_on
                .iter()
                .map(|c| self.conn(c))
                .collect::<Result<_, _>>()?,
        })
    }

    /// Takes the oldest kept line that matches, if any.
    fn take_line(&mut self, pattern: &str, place: &Place) -> Option<Heard> {
        let index = self
            .inbox
            .iter()
            .position(|heard| matches(pattern, &heard.line) && self.allows(place, heard.conn))?;
        self.inbox.remove(index)
    }

    async fn expect(
        &mut self,
        start: Instant,
        timing: &Timing,
        from: &Where,
        bind: Option<&str>,
        pattern: &str,
    ) -> Result<(), String> {
        let pattern = self.expand(pattern)?;
        let place = self.place(from)?;
        let base = self.base(timing, start)?;
        let deadline = self.deadline(timing, base);
        let found = self
            .wait_for(deadline, |p| p.take_line(&pattern, &place))
            .await?;
        let Some(heard) = found else {
            let kept: Vec<String> = self
                .inbox
                .iter()
                .map(|h| format!("{}: {}", self.conn_label(h.conn), h.line))
                .collect();
            return Err(format!(
                "no line matching `{pattern}` came within {} ms; lines not taken: {kept:?}",
                timing.within_ms
            ));
        };
        self.not_too_early(timing, base, heard.at)?;
        if let Some(name) = bind {
            self.names.insert(name.to_owned(), heard.conn);
            // The moment the line came, for `since=`: the client sent it
            // no later, whatever the node's own delays.
            self.marks.insert(name.to_owned(), heard.at);
        }
        self.last = Some(heard.conn);
        Ok(())
    }

    async fn expect_connect(
        &mut self,
        start: Instant,
        timing: &Timing,
        at: Option<&str>,
        bind: Option<&str>,
    ) -> Result<(), String> {
        let node = at.map(|n| self.node(n)).transpose()?;
        let base = self.base(timing, start)?;
        let deadline = self.deadline(timing, base);
        let found = self
            .wait_for(deadline, |p| {
                let index = p
                    .connects
                    .iter()
                    .position(|(c, _)| node.is_none_or(|n| p.conns[*c].node == n))?;
                p.connects.remove(index)
            })
            .await?;
        let (conn, when) = found
            .ok_or_else(|| format!("no new connection came within {} ms", timing.within_ms))?;
        self.not_too_early(timing, base, when)?;
        if let Some(name) = bind {
            self.names.insert(name.to_owned(), conn);
            self.marks.insert(name.to_owned(), when);
        }
        self.last = Some(conn);
        Ok(())
    }

    async fn expect_close(
        &mut self,
        start: Instant,
        timing: &Timing,
        name: &str,
    ) -> Result<(), String> {
        let conn = self.conn(name)?;
        let base = self.base(timing, start)?;
        let deadline = self.deadline(timing, base);
        let found = self
            .wait_for(deadline, |p| p.closes.get(&conn).copied())
            .await?;
        let when = found.ok_or_else(|| {
            format!(
                "the client did not close {name} within {} ms",
                timing.within_ms
            )
        })?;
        self.not_too_early(timing, base, when)
    }

    async fn absent(
        &mut self,
        start: Instant,
        within_ms: u64,
        from: &Where,
        pattern: &str,
    ) -> Result<(), String> {
        let pattern = self.expand(pattern)?;
        let place = self.place(from)?;
        let deadline = start + Duration::from_millis(within_ms);
        let found = self
            .wait_for(deadline, |p| p.take_line(&pattern, &place))
            .await?;
        match found {
            Some(heard) => Err(format!(
                "{} sent `{}`, which should not come",
                self.conn_label(heard.conn),
                heard.line
            )),
            None => Ok(()),
        }
    }

    async fn outcome(
        &mut self,
        start: Instant,
        timing: &Timing,
        id: &str,
        expected: &str,
    ) -> Result<Flow, String> {
        let expected = self.expand(expected)?;
        let base = self.base(timing, start)?;
        let deadline = self.deadline(timing, base);
        let found = self.wait_for(deadline, |p| p.outcomes.remove(id)).await?;
        let (when, outcome) = found.ok_or_else(|| {
            format!(
                "the adapter did not report action {id} within {} ms",
                timing.within_ms
            )
        })?;
        if outcome.starts_with("unsupported") {
            return Ok(Flow::Skip(format!("action {id}: {outcome}")));
        }
        if !matches(&expected, &outcome) {
            return Err(format!(
                "action {id} ended `{outcome}`, expected `{expected}`"
            ));
        }
        self.not_too_early(timing, base, when)?;
        Ok(Flow::Next)
    }

    /// Stalls (or resumes) a connection or every connection of a node; a
    /// resumed connection answers the `S` it kept meanwhile.
    fn stall(&mut self, target: &str, stalled: bool) -> Result<(), String> {
        if let Ok(node) = self.node(target) {
            self.nodes[node].stalled = stalled;
        }
        let conns = self.targets(target)?;
        for &conn in &conns {
            self.conns[conn].stalled = stalled;
        }
        if stalled {
            return Ok(());
        }
        let mut kept = std::collections::VecDeque::new();
        for heard in std::mem::take(&mut self.inbox) {
            if conns.contains(&heard.conn) && heard.line == "S" {
                let status = self.status_line(self.conns[heard.conn].node);
                self.write(heard.conn, &status);
            } else {
                kept.push_back(heard);
            }
        }
        self.inbox = kept;
        Ok(())
    }

    /// Stops listening and closes the node's connections, like a killed process.
    fn down(&mut self, name: &str) -> Result<(), String> {
        let node = self.node(name)?;
        if let Some(task) = self.nodes[node].listener.take() {
            task.abort();
        }
        for conn in self.targets(name)? {
            self.close(conn);
        }
        Ok(())
    }

    /// Listens again on the node's port.
    async fn up(&mut self, name: &str) -> Result<(), String> {
        let node = self.node(name)?;
        let addr = self.nodes[node].addr;
        let until = Instant::now() + REBIND_FOR;
        let listener = loop {
            match TcpListener::bind(addr).await {
                Ok(listener) => break listener,
                Err(e) if Instant::now() > until => return Err(format!("rebinding {addr}: {e}")),
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        };
        let task = tokio::spawn(net::listen(node, listener, self.events_tx.clone()));
        self.nodes[node].listener = Some(task);
        Ok(())
    }

    fn check(
        &self,
        name: &str,
        counter: &str,
        want: std::ops::RangeInclusive<usize>,
    ) -> Result<(), String> {
        let node = self.node(name)?;
        let state = &self.nodes[node];
        let got = match counter {
            "accepted" => state.accepted,
            "refused" => state.refused,
            "authenticated" => state.authenticated,
            "unauthenticated" => state.unauthenticated,
            "requests" => state.requests,
            _ => self
                .conns
                .iter()
                .filter(|c| c.node == node && c.open)
                .count(),
        };
        if want.contains(&got) {
            Ok(())
        } else {
            Err(format!("{name} {counter}: {got}, expected {want:?}"))
        }
    }
}
