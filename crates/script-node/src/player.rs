//! The player's state and what it does with every event, whatever step it
//! is on: it answers `S` and `U` by itself on a connection that is not
//! stalled, checks every line against the protocol, and keeps the lines,
//! connections, closes and outcomes the steps wait for.

use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::net::SocketAddr;

use baton_proto::{parse_request, Limits, MAX_REQUEST_LINE};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::net::{self, Command, Event, TlsMaterial};
use crate::pattern::matches;
use crate::script::{NodeDecl, Scenario};

/// One scripted node.
#[derive(Debug)]
pub(crate) struct NodeState {
    pub(crate) decl: NodeDecl,
    pub(crate) addr: SocketAddr,
    /// `None` while the node is down.
    pub(crate) listener: Option<JoinHandle<()>>,
    pub(crate) refusing: bool,
    pub(crate) stalled: bool,
    pub(crate) accepted: usize,
    pub(crate) refused: usize,
    pub(crate) authenticated: usize,
    pub(crate) unauthenticated: usize,
    /// Lines received other than `S` and `U`.
    pub(crate) requests: usize,
}

/// One accepted connection.
#[derive(Debug)]
pub(crate) struct ConnState {
    pub(crate) node: usize,
    pub(crate) commands: mpsc::UnboundedSender<Command>,
    pub(crate) open: bool,
    pub(crate) closed_by_node: bool,
    pub(crate) stalled: bool,
    pub(crate) authenticated: bool,
}

/// A line a client sent, waiting for a step to take it.
#[derive(Debug)]
pub(crate) struct Heard {
    pub(crate) conn: usize,
    pub(crate) at: Instant,
    pub(crate) line: String,
}

/// Where a step's line may come from, names resolved.
#[derive(Debug, Clone)]
pub(crate) struct Place {
    pub(crate) node: Option<usize>,
    pub(crate) on: Option<usize>,
    pub(crate) not_on: Vec<usize>,
}

/// An `always` step in force: lines matching are answered at once.
#[derive(Debug, Clone)]
pub(crate) struct StandingRule {
    pub(crate) place: Place,
    pub(crate) pattern: String,
    /// `None`: close the connection.
    pub(crate) reply: Option<String>,
}

/// Everything the steps see.
#[derive(Debug)]
pub struct Player {
    pub(crate) scenario: Scenario,
    pub(crate) start: Instant,
    pub(crate) events_tx: mpsc::UnboundedSender<Event>,
    events: mpsc::UnboundedReceiver<Event>,
    pub(crate) nodes: Vec<NodeState>,
    pub(crate) conns: Vec<ConnState>,
    /// Connection names bound by `as=`.
    pub(crate) names: HashMap<String, usize>,
    /// The connection the last `expect` or `expect-connect` took.
    pub(crate) last: Option<usize>,
    pub(crate) inbox: VecDeque<Heard>,
    /// Connections accepted and not yet taken by `expect-connect`.
    pub(crate) connects: VecDeque<(usize, Instant)>,
    /// Connections the client closed, and when.
    pub(crate) closes: HashMap<usize, Instant>,
    pub(crate) outcomes: HashMap<String, (Instant, String)>,
    pub(crate) marks: HashMap<String, Instant>,
    /// A rule broken outside any step (a malformed line, the adapter gone).
    pub(crate) failure: Option<String>,
    pub(crate) tls: Option<TlsMaterial>,
    pub(crate) rules: Vec<StandingRule>,
}

impl Player {
    /// Binds every node of `scenario` on a free loopback port.
    pub async fn start(scenario: Scenario, tls: Option<TlsMaterial>) -> Result<Player, String> {
        let (events_tx, events) = mpsc::unbounded_channel();
        let mut nodes = Vec::new();
        for (index, decl) in scenario.nodes.iter().enumerate() {
            let listener = TcpListener::bind("127.0.0.1:0")
                .await
                .map_err(|e| format!("node {}: bind: {e}", decl.name))?;
            let addr = listener.local_addr().map_err(|e| e.to_string())?;
            let task = tokio::spawn(net::listen(index, listener, events_tx.clone()));
            nodes.push(NodeState {
                decl: decl.clone(),
                addr,
                listener: Some(task),
                refusing: false,
                stalled: decl.stalled,
                accepted: 0,
                refused: 0,
                authenticated: 0,
                unauthenticated: 0,
                requests: 0,
            });
        }
        Ok(Player {
            scenario,
            start: Instant::now(),
            events_tx,
            events,
            nodes,
            conns: Vec::new(),
            names: HashMap::new(),
            last: None,
            inbox: VecDeque::new(),
            connects: VecDeque::new(),
            closes: HashMap::new(),
            outcomes: HashMap::new(),
            marks: HashMap::new(),
            failure: None,
            tls,
            rules: Vec::new(),
        })
    }

    /// Starts forwarding the adapter's lines (this process's stdin).
    pub fn read_adapter(&self) {
        let events = self.events_tx.clone();
        std::thread::spawn(move || {
            for line in std::io::stdin().lines() {
                let Ok(line) = line else { break };
                if events.send(Event::Adapter(line)).is_err() {
                    return;
                }
            }
            let _ = events.send(Event::AdapterGone);
        });
    }

    /// Writes one line to the adapter (this process's stdout).
    pub(crate) fn tell_adapter(&self, line: &str) {
        self.log(&format!("adapter << {line}"));
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    }

    /// The transcript, on stderr: milliseconds since the start, then what.
    pub(crate) fn log(&self, what: &str) {
        let ms = self.start.elapsed().as_millis();
        let shown: String = what.chars().take(300).collect();
        eprintln!("{ms:>7} ms  {shown}");
    }

    pub(crate) fn conn_label(&self, conn: usize) -> String {
        let node = &self.nodes[self.conns[conn].node].decl.name;
        let name = self
            .names
            .iter()
            .find(|(_, &c)| c == conn)
            .map(|(name, _)| format!(" ({name})"))
            .unwrap_or_default();
        format!("{node}#{conn}{name}")
    }

    /// Pumps events until `ready` gives something or `deadline` passes.
    pub(crate) async fn wait_for<T>(
        &mut self,
        deadline: Instant,
        mut ready: impl FnMut(&mut Player) -> Option<T>,
    ) -> Result<Option<T>, String> {
        loop {
            if let Some(failure) = self.failure.take() {
                return Err(failure);
            }
            if let Some(found) = ready(self) {
                return Ok(Some(found));
            }
            match tokio::time::timeout_at(deadline, self.events.recv()).await {
                Ok(Some(event)) => self.absorb(event),
                Ok(None) => return Err("the event channel closed".into()),
                Err(_) => return Ok(None),
            }
        }
    }

    fn absorb(&mut self, event: Event) {
        match event {
            Event::Accepted { node, stream } => self.accepted(node, stream),
            Event::Line { conn, line, at } => self.heard(conn, &line, at),
            Event::Closed { conn, at } => {
                let state = &mut self.conns[conn];
                state.open = false;
                if !state.closed_by_node {
                    self.log(&format!("{} closed by the client", self.conn_label(conn)));
                    self.closes.insert(conn, at);
                }
            }
            Event::TlsFailed { conn, why } => {
                self.log(&format!("{} TLS failed: {why}", self.conn_label(conn)));
            }
            Event::Adapter(line) => self.reported(&line),
            Event::AdapterGone => self.fail("the adapter closed its end of the pipe".into()),
        }
    }

    pub(crate) fn fail(&mut self, why: String) {
        self.log(&format!("FAIL {why}"));
        self.failure.get_or_insert(why);
    }

    fn accepted(&mut self, node: usize, stream: tokio::net::TcpStream) {
        let open = self
            .conns
            .iter()
            .filter(|c| c.node == node && c.open)
            .count();
        let state = &mut self.nodes[node];
        let over_limit = state.decl.limit.is_some_and(|limit| open >= limit);
        if state.refusing || state.listener.is_none() || over_limit {
            state.refused += 1;
            let name = state.decl.name.clone();
            drop(stream);
            self.log(&format!("{name} refused a connection (closed at once)"));
            return;
        }
        state.accepted += 1;
        let stalled = state.stalled;
        let conn = self.conns.len();
        let (commands, rx) = mpsc::unbounded_channel();
        let tls = state
            .decl
            .tls
            .then(|| self.tls.as_ref().map(|t| t.acceptor.clone()))
            .flatten();
        tokio::spawn(net::serve(conn, stream, tls, self.events_tx.clone(), rx));
        self.conns.push(ConnState {
            node,
            commands,
            open: true,
            closed_by_node: false,
            stalled,
            authenticated: false,
        });
        self.connects.push_back((conn, Instant::now()));
        self.log(&format!("{} accepted", self.conn_label(conn)));
    }

    /// A line from a client: checked, then dropped when the node had closed
    /// its connection already, else answered by the node itself (`S`, `U`,
    /// or anything before authentication) or kept for the steps.
    fn heard(&mut self, conn: usize, raw: &[u8], at: Instant) {
        let line = String::from_utf8_lossy(raw).into_owned();
        self.log(&format!("{} >> {line}", self.conn_label(conn)));
        if raw.len() + 1 > MAX_REQUEST_LINE {
            let why = format!(
                "{} sent a line of {} bytes with its LF, over the protocol's {MAX_REQUEST_LINE}",
                self.conn_label(conn),
                raw.len() + 1
            );
            return self.fail(why);
        }
        if let Err(e) = parse_request(raw, &Limits::default()) {
            let why = format!(
                "{} sent a malformed request `{line}`: {}",
                self.conn_label(conn),
                e.to_reply().reason
            );
            return self.fail(why);
        }
        if self.conns[conn].closed_by_node {
            // Read by the connection's task before it took the close, or
            // after it: a node that closed the connection (or was killed)
            // never reads it, so no step may take it or count it.
            self.log("  (came after the node closed the connection: never read)");
            return;
        }
        if !matches!(op_and_key(&line).0, "S" | "U") {
            self.nodes[self.conns[conn].node].requests += 1;
        }
        let state = &self.conns[conn];
        if state.stalled {
            self.inbox.push_back(Heard { conn, at, line });
            return;
        }
        let node = &self.nodes[state.node];
        let (op, key) = op_and_key(&line);
        if op == "U" {
            let answer = self.authenticate(conn, &line);
            return self.write(conn, &answer);
        }
        if !node.decl.users.is_empty() && !state.authenticated {
            self.nodes[state.node].unauthenticated += 1;
            let key = if op == "S" { "?" } else { key };
            let answer = format!("{op} {key} authentication required");
            return self.write(conn, &format!("E {answer}"));
        }
        if op == "S" {
            let answer = self.status_line(state.node);
            return self.write(conn, &answer);
        }
        let rule = self
            .rules
            .iter()
            .find(|r| matches(&r.pattern, &line) && self.allows(&r.place, conn));
        match rule.map(|r| r.reply.clone()) {
            Some(Some(reply)) => self.write(conn, &reply),
            Some(None) => self.close(conn),
            None => self.inbox.push_back(Heard { conn, at, line }),
        }
    }

    /// Whether a line from `conn` may come from `place`.
    pub(crate) fn allows(&self, place: &Place, conn: usize) -> bool {
        place.node.is_none_or(|n| self.conns[conn].node == n)
            && place.on.is_none_or(|c| c == conn)
            && !place.not_on.contains(&conn)
    }

    /// The node closes `conn`.
    pub(crate) fn close(&mut self, conn: usize) {
        self.log(&format!("{} closed by the node", self.conn_label(conn)));
        let state = &mut self.conns[conn];
        state.closed_by_node = true;
        let _ = state.commands.send(Command::Close);
    }

    /// The node's answer to `U <user> <secret>`.
    fn authenticate(&mut self, conn: usize, line: &str) -> String {
        let fields: Vec<&str> = line.split(' ').collect();
        let (user, secret) = (fields.get(1).copied(), fields.get(2).copied());
        let node = &mut self.nodes[self.conns[conn].node];
        let user = user.unwrap_or("?");
        if node.decl.users.is_empty() {
            return format!("E U {user} authentication is not enabled");
        }
        let known = node
            .decl
            .users
            .iter()
            .any(|(u, s)| u == user && Some(s.as_str()) == secret);
        if !known {
            return format!("E U {user} authentication failed");
        }
        if !self.conns[conn].authenticated {
            node.authenticated += 1;
        }
        self.conns[conn].authenticated = true;
        format!("U {user}")
    }

    /// What a scripted node says about itself.
    pub(crate) fn status_line(&self, node: usize) -> String {
        let addr = self.nodes[node].addr;
        format!(
            "S role=single mode=single self={addr} active={addr} token=1 locks=0 waiters=0 version=0.0.0-script"
        )
    }

    /// Sends `line` (and its LF) on `conn`, if it is still open.
    pub(crate) fn write(&mut self, conn: usize, line: &str) {
        self.log(&format!("{} << {line}", self.conn_label(conn)));
        let state = &self.conns[conn];
        if !state.open {
            self.log("  (the connection is closed: not sent)");
            return;
        }
        let _ = state
            .commands
            .send(Command::Write(format!("{line}\n").into_bytes()));
    }

    fn reported(&mut self, line: &str) {
        self.log(&format!("adapter >> {line}"));
        let mut words = line.splitn(3, ' ');
        match (words.next(), words.next(), words.next()) {
            (Some("done"), Some(id), Some(outcome)) => {
                let first = self
                    .outcomes
                    .insert(id.to_owned(), (Instant::now(), outcome.to_owned()));
                if first.is_some() {
                    self.fail(format!("the adapter reported action {id} twice"));
                }
            }
            _ => self.fail(format!(
                "the adapter said something else than `done <id> <outcome>`: {line}"
            )),
        }
    }
}

/// The op and key words of a request line, `?` where missing.
fn op_and_key(line: &str) -> (&str, &str) {
    let mut words = line.split(' ');
    let op = words.next().filter(|w| !w.is_empty()).unwrap_or("?");
    (op, words.next().unwrap_or("?"))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn line(conn: usize, text: &str) -> Event {
        Event::Line {
            conn,
            line: text.as_bytes().to_vec(),
            at: Instant::now(),
        }
    }

    /// Pumps events for a while, taking nothing.
    async fn pump(player: &mut Player) {
        let until = Instant::now() + Duration::from_millis(100);
        let taken = player.wait_for(until, |_| None::<()>).await;
        assert_eq!(taken, Ok(None));
    }

    /// A client can write a line just as the node closes the connection
    /// (a node going `down` while the client starts a release): the
    /// connection's task may read it before it takes the close, and tells
    /// the player after. A killed node never read it, so no step may take
    /// it: taken, it was "answered" on a closed connection and the client's
    /// retry on its redialled one was left unanswered.
    #[tokio::test]
    async fn a_line_heard_after_the_node_closed_the_connection_is_not_kept() {
        let scenario = Scenario::parse("t", "checks t\nnode a\nsleep 1\n").expect("scenario");
        let mut player = Player::start(scenario, None).await.expect("player");
        let _client = tokio::net::TcpStream::connect(player.nodes[0].addr)
            .await
            .expect("connect");
        let until = Instant::now() + Duration::from_secs(10);
        let accepted = player.wait_for(until, |p| p.connects.pop_front()).await;
        let (conn, _) = accepted.expect("events").expect("accepted");

        player.events_tx.send(line(conn, "Q q")).expect("send");
        pump(&mut player).await;
        assert_eq!(
            player.inbox.len(),
            1,
            "a line heard before the close is kept"
        );

        player.events_tx.send(line(conn, "R k 1001")).expect("send");
        player.close(conn);
        pump(&mut player).await;
        let kept: Vec<&str> = player.inbox.iter().map(|h| h.line.as_str()).collect();
        assert_eq!(kept, ["Q q"]);
        assert_eq!(player.nodes[0].requests, 1);
    }
}
