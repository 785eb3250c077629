//! A priority cluster of real `batond` processes on loopback, and a client
//! that follows `M` redirects to whichever node is active.
//!
//! Ports are chosen before any node starts because every node needs the whole
//! peer list on its command line. Status polling skips nodes that are down or
//! paused (a SIGSTOPped node accepts connections but never answers), and every
//! wait is bounded so a cluster that never settles fails the test instead of
//! hanging it.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::process::ExitStatus;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::time::{timeout, timeout_at, Instant};

use crate::daemon::Batond;
use crate::port::{distinct_free_addrs, start_cluster_nodes};
use crate::status::{parse_status, Status};

/// How long one `S` probe may take before the node counts as not answering.
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);

/// Pause between two rounds of status polling.
const POLL_INTERVAL: Duration = Duration::from_millis(10);

/// How many recent events a [`ClusterClient`] keeps for its panic messages.
const TRACE_LEN: usize = 24;

/// N `batond` nodes started with `--mode priority` and one shared peer list,
/// in priority order: node 0 has the highest priority.
#[derive(Debug)]
pub struct Cluster {
    nodes: Vec<Batond>,
    peers: Vec<SocketAddr>,
    paused: Vec<bool>,
}

impl Cluster {
    /// Starts `n` nodes on fresh loopback ports, node 0 first, each with
    /// `--peers <all> --mode priority` followed by `extra`.
    pub fn start(n: usize, extra: &[&str]) -> Cluster {
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        Cluster::start_each(n, |_| extra.clone())
    }

    /// As [`Cluster::start`], with arguments of its own for node `i`
    /// (a data directory each, say).
    pub fn start_each(n: usize, extra: impl Fn(usize) -> Vec<String>) -> Cluster {
        let peers = distinct_free_addrs(n);
        let nodes = start_cluster_nodes(&peers, "priority", extra);
        Cluster {
            nodes,
            paused: vec![false; n],
            peers,
        }
    }

    /// Number of nodes, up or not.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the cluster has no node at all.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Client address of node `i`, as written in the peer list.
    pub fn addr(&self, i: usize) -> SocketAddr {
        self.peers[i]
    }

    /// The peer list, in priority order.
    pub fn peers(&self) -> &[SocketAddr] {
        &self.peers
    }

    /// Node `i`'s process, for signals and logs.
    pub fn node_mut(&mut self, i: usize) -> &mut Batond {
        &mut self.nodes[i]
    }

    /// Whether node `i` runs and is not paused.
    pub fn is_up(&mut self, i: usize) -> bool {
        !self.paused[i] && self.nodes[i].is_running()
    }

    /// SIGKILL node `i` and reap it.
    pub fn kill(&mut self, i: usize) {
        self.nodes[i].kill();
        self.paused[i] = false;
    }

    /// Starts node `i` again on its address with its arguments (killing it
    /// first if it still runs).
    pub fn restart(&mut self, i: usize) {
        self.nodes[i].restart();
        self.paused[i] = false;
    }

    /// SIGTERM node `i` and wait (bounded) for its exit status.
    pub fn terminate(&mut self, i: usize) -> ExitStatus {
        self.nodes[i].terminate()
    }

    /// SIGINT node `i` and wait (bounded) for its exit status.
    pub fn interrupt(&mut self, i: usize) -> ExitStatus {
        self.nodes[i].interrupt()
    }

    /// SIGSTOP node `i`; it is left out of status polling until resumed.
    pub fn pause(&mut self, i: usize) {
        self.nodes[i].stop_signal();
        self.paused[i] = true;
    }

    /// SIGCONT node `i`.
    pub fn resume(&mut self, i: usize) {
        self.nodes[i].cont();
        self.paused[i] = false;
    }

    /// One `S` probe of every node that is up; `None` for nodes down,
    /// paused, or not answering within the probe timeout.
    pub async fn statuses(&mut self) -> Vec<Option<Status>> {
        let mut out = Vec::with_capacity(self.len());
        for i in 0..self.len() {
            let status = if self.is_up(i) {
                probe_status(self.peers[i], PROBE_TIMEOUT).await
            } else {
                None
            };
            if let Some(status) = &status {
                self.check_identity(i, status);
            }
            out.push(status);
        }
        out
    }

    /// Polls `S` until every node that is up (running and not paused)
    /// has token `at_least` (its `token=` is at least that): the grant is
    /// replicated there. Panics with the last statuses after `within`.
    pub async fn wait_replicated(&mut self, at_least: u64, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let statuses = self.statuses().await;
            let up: Vec<bool> = (0..self.len()).map(|i| self.is_up(i)).collect();
            if tokens_reached(&statuses, |i| up[i], at_least) {
                return;
            }
            if Instant::now() >= deadline {
                panic!(
                    "token {at_least} not on every node that is up within {within:?}: {statuses:?}"
                );
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Polls until exactly one node that is up reports `role=active`, every
    /// other up node reports `role=standby`, and all of them name it in
    /// `active=`. Returns its index; panics with the last statuses after
    /// `within`.
    pub async fn wait_single_active(&mut self, within: Duration) -> usize {
        self.wait_agreement("exactly one active", within, |_| true)
            .await
    }

    /// As [`Cluster::wait_single_active`], but the agreed active must be
    /// node `i`. Returns how long it took.
    pub async fn wait_active(&mut self, i: usize, within: Duration) -> Duration {
        let started = Instant::now();
        let what = format!("node {i} ({}) active", self.peers[i]);
        self.wait_agreement(&what, within, |active| active == i)
            .await;
        started.elapsed()
    }

    async fn wait_agreement(
        &mut self,
        what: &str,
        within: Duration,
        accept: impl Fn(usize) -> bool,
    ) -> usize {
        let deadline = Instant::now() + within;
        loop {
            let statuses = self.statuses().await;
            if let Some(active) = self.agreed_active(&statuses).filter(|a| accept(*a)) {
                return active;
            }
            if Instant::now() >= deadline {
                panic!(
                    "cluster: still not {what} after {within:?}; last statuses:\n{}",
                    self.describe(&statuses)
                );
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    /// The index every up node agrees is active, if they all answered and
    /// agree, and it is the only one saying `role=active`.
    fn agreed_active(&mut self, statuses: &[Option<Status>]) -> Option<usize> {
        let mut actives = Vec::new();
        let mut claims = Vec::new();
        for (i, status) in statuses.iter().enumerate() {
            if !self.is_up(i) {
                continue;
            }
            let status = status.as_ref()?;
            if field(status, "role") == "active" {
                actives.push(i);
            }
            claims.push(field(status, "active").to_owned());
        }
        let [active] = actives[..] else {
            return None;
        };
        let want = self.peers[active].to_string();
        claims.iter().all(|c| *c == want).then_some(active)
    }

    /// Panics unless the fields that never change (mode, self) and the role
    /// and active fields are as the contract says.
    fn check_identity(&self, i: usize, status: &Status) {
        let me = self.peers[i].to_string();
        let problem = if field(status, "mode") != "priority" {
            Some("mode is not priority")
        } else if field(status, "self") != me {
            Some("self is not the node's address from the peer list")
        } else if !matches!(field(status, "role"), "active" | "standby") {
            Some("role is neither active nor standby")
        } else if !self.is_known_or_dash(field(status, "active")) {
            Some("active= is neither `-` nor an address of the peer list")
        } else if field(status, "role") == "active" && field(status, "active") != me {
            Some("an active node names another node in active=")
        } else {
            None
        };
        if let Some(problem) = problem {
            panic!("node {i} ({me}): {problem}: {status:?}");
        }
    }

    fn is_known_or_dash(&self, addr: &str) -> bool {
        addr == "-" || self.peers.iter().any(|p| p.to_string() == addr)
    }

    fn describe(&mut self, statuses: &[Option<Status>]) -> String {
        let mut text = String::new();
        for (i, status) in statuses.iter().enumerate() {
            let state = if self.paused[i] {
                "paused"
            } else if self.nodes[i].is_running() {
                "running"
            } else {
                "down"
            };
            text.push_str(&format!(
                "  node {i} {} ({state}): {status:?}\n",
                self.peers[i]
            ));
        }
        text
    }

    /// A redirect-following client whose first request goes to node `first`.
    pub fn client(&self, first: usize) -> ClusterClient {
        ClusterClient::new(self.peers.clone(), first)
    }
}

/// A status field, or the empty string when the node did not send it.
pub fn field<'a>(status: &'a Status, name: &str) -> &'a str {
    status.get(name).map(String::as_str).unwrap_or("")
}

/// Sends `S` to `addr` on a new connection; `None` if the node cannot be
/// reached or does not answer within `within`. Panics on a malformed answer.
pub async fn probe_status(addr: SocketAddr, within: Duration) -> Option<Status> {
    let deadline = Instant::now() + within;
    let stream = timeout_at(deadline, TcpStream::connect(addr))
        .await
        .ok()?
        .ok()?;
    let (read, mut write) = stream.into_split();
    timeout_at(deadline, write.write_all(b"S\n"))
        .await
        .ok()?
        .ok()?;
    let mut reader = BufReader::new(read);
    let mut line = Vec::new();
    let n = timeout_at(deadline, reader.read_until(b'\n', &mut line))
        .await
        .ok()?
        .ok()?;
    if n == 0 || line.last() != Some(&b'\n') {
        return None;
    }
    line.pop();
    Some(parse_status(&String::from_utf8_lossy(&line)))
}

/// Whether every node that is `up` answered `S` with `token=` at least
/// `at_least`: it holds or has seen that grant (it is replicated there).
pub fn tokens_reached(
    statuses: &[Option<Status>],
    up: impl Fn(usize) -> bool,
    at_least: u64,
) -> bool {
    statuses
        .iter()
        .enumerate()
        .filter(|(i, _)| up(*i))
        .all(|(_, s)| {
            s.as_ref()
                .is_some_and(|s| crate::status_u64(s, "token") >= at_least)
        })
}

/// The final answer to one request sent through a [`ClusterClient`].
#[derive(Debug, Clone)]
pub struct Reply {
    /// The response line, without its LF: never an `M`.
    pub line: String,
    /// Index of the node that sent it.
    pub node: usize,
    /// Whether an earlier attempt of this request was sent and then lost
    /// (connection closed, reset or silent), so the cluster may have applied
    /// it already.
    pub ambiguous: bool,
    /// When the line arrived.
    pub at: Instant,
}

/// A one-request-at-a-time client of a cluster: sends each request to the
/// node it believes active and follows `M` redirects, moving on to the next
/// node when a connection fails or a node stays silent.
#[derive(Debug)]
pub struct ClusterClient {
    peers: Vec<SocketAddr>,
    conn: Option<Conn>,
    target: usize,
    reply_timeout: Duration,
    redirects: usize,
    unknown_active: usize,
    lost: usize,
    trace: VecDeque<String>,
}

#[derive(Debug)]
struct Conn {
    node: usize,
    reader: BufReader<OwnedReadHalf>,
    writer: OwnedWriteHalf,
}

/// What one attempt on one connection produced.
enum Attempt {
    Line(String),
    /// Sent (maybe), then the connection closed, failed or went silent.
    Lost(&'static str),
    /// Could not connect: nothing was sent.
    Unreachable,
}

impl ClusterClient {
    /// A client of the nodes `peers` (priority order) starting at `first`.
    pub fn new(peers: Vec<SocketAddr>, first: usize) -> ClusterClient {
        assert!(first < peers.len(), "no node {first} in {peers:?}");
        ClusterClient {
            peers,
            conn: None,
            target: first,
            reply_timeout: Duration::from_secs(2),
            redirects: 0,
            unknown_active: 0,
            lost: 0,
            trace: VecDeque::new(),
        }
    }

    /// How long to wait for one answer before trying another node.
    pub fn set_reply_timeout(&mut self, wait: Duration) {
        self.reply_timeout = wait;
    }

    /// `M` responses naming an address that were followed.
    pub fn redirects(&self) -> usize {
        self.redirects
    }

    /// `M ... -` responses seen (no active known yet).
    pub fn unknown_active(&self) -> usize {
        self.unknown_active
    }

    /// Attempts lost to a closed, failed or silent connection.
    pub fn lost(&self) -> usize {
        self.lost
    }

    /// Sends `request` (one A, R or K line) until a node other than a
    /// redirecting one answers, within `within`; panics after that with the
    /// recent events. Every `M` is checked to name the request's op and key
    /// and `-` or an address of the peer list.
    pub async fn request(&mut self, request: &str, within: Duration) -> Reply {
        let (op, key) = op_and_key(request);
        let deadline = Instant::now() + within;
        let mut ambiguous = false;
        loop {
            if Instant::now() >= deadline {
                panic!(
                    "cluster client: no answer to {request:?} within {within:?}; recent events:\n  {}",
                    self.trace.iter().cloned().collect::<Vec<_>>().join("\n  ")
                );
            }
            let node = self.target;
            match self.attempt(request, deadline).await {
                Attempt::Line(line) if line.starts_with("M ") => {
                    self.note(format!("node {node} answered {line:?}"));
                    match self.redirect_target(&line, op, key) {
                        Some(next) => {
                            self.redirects += 1;
                            self.switch_to(next);
                        }
                        None => {
                            self.unknown_active += 1;
                            // No active known there yet: ask around.
                            self.switch_to((node + 1) % self.peers.len());
                            tokio::time::sleep(Duration::from_millis(2)).await;
                        }
                    }
                }
                Attempt::Line(line) => {
                    self.note(format!("node {node} answered {line:?}"));
                    return Reply {
                        line,
                        node,
                        ambiguous,
                        at: Instant::now(),
                    };
                }
                Attempt::Lost(why) => {
                    self.note(format!("node {node}: {request:?} lost: {why}"));
                    self.lost += 1;
                    ambiguous = true;
                    self.switch_to((node + 1) % self.peers.len());
                }
                Attempt::Unreachable => {
                    self.note(format!("node {node}: cannot connect"));
                    self.switch_to((node + 1) % self.peers.len());
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            }
        }
    }

    /// The node an `M` line sends us to, or `None` for `-`; panics if the
    /// line is not `M <op> <key> <addr>` for this request.
    fn redirect_target(&self, line: &str, op: &str, key: &str) -> Option<usize> {
        let fields: Vec<&str> = line.split(' ').collect();
        if fields.len() != 4 || fields[1] != op || fields[2] != key {
            panic!("expected `M {op} {key} <addr>`, got {line:?}");
        }
        if fields[3] == "-" {
            return None;
        }
        match self.peers.iter().position(|p| p.to_string() == fields[3]) {
            Some(i) => Some(i),
            None => panic!(
                "redirect {line:?} names an address not in the peer list {:?}",
                self.peers
            ),
        }
    }

    fn switch_to(&mut self, node: usize) {
        if self.conn.as_ref().is_some_and(|c| c.node != node) {
            self.conn = None;
        }
        self.target = node;
    }

    async fn attempt(&mut self, request: &str, deadline: Instant) -> Attempt {
        if self.conn.is_none() {
            let addr = self.peers[self.target];
            let connect = timeout_at(deadline, TcpStream::connect(addr)).await;
            let Ok(Ok(stream)) = connect else {
                return Attempt::Unreachable;
            };
            let _ = stream.set_nodelay(true);
            let (read, writer) = stream.into_split();
            self.conn = Some(Conn {
                node: self.target,
                reader: BufReader::new(read),
                writer,
            });
        }
        let reply_timeout = self.reply_timeout;
        let Some(conn) = self.conn.as_mut() else {
            return Attempt::Unreachable;
        };
        let mut bytes = request.as_bytes().to_vec();
        bytes.push(b'\n');
        let outcome = match timeout(reply_timeout, conn.writer.write_all(&bytes)).await {
            Ok(Ok(())) => read_line(&mut conn.reader, reply_timeout).await,
            Ok(Err(_)) => Attempt::Lost("write failed"),
            Err(_) => Attempt::Lost("write timed out"),
        };
        if !matches!(outcome, Attempt::Line(_)) {
            // The connection is in an unknown state: never reuse it, or a
            // late answer would be taken for the next request's.
            self.conn = None;
        }
        outcome
    }

    fn note(&mut self, event: String) {
        if self.trace.len() == TRACE_LEN {
            self.trace.pop_front();
        }
        self.trace.push_back(event);
    }
}

async fn read_line(reader: &mut BufReader<OwnedReadHalf>, wait: Duration) -> Attempt {
    let mut line = Vec::new();
    match timeout(wait, reader.read_until(b'\n', &mut line)).await {
        Err(_) => Attempt::Lost("no answer in time"),
        Ok(Err(_)) => Attempt::Lost("read failed"),
        Ok(Ok(_)) if line.last() == Some(&b'\n') => {
            line.pop();
            Attempt::Line(String::from_utf8_lossy(&line).into_owned())
        }
        Ok(Ok(_)) => Attempt::Lost("connection closed"),
    }
}

/// The op and key of an A, R or K request line.
fn op_and_key(request: &str) -> (&str, &str) {
    let mut fields = request.split(' ');
    match (fields.next(), fields.next()) {
        (Some(op @ ("A" | "R" | "K")), Some(key)) => (op, key),
        _ => panic!("ClusterClient sends A, R or K requests, not {request:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::free_addr;

    #[test]
    fn op_and_key_reads_the_first_two_fields() {
        assert_eq!(op_and_key("A k 1 10"), ("A", "k"));
        assert_eq!(op_and_key("R k 7"), ("R", "k"));
    }

    #[test]
    #[should_panic(expected = "A, R or K")]
    fn op_and_key_refuses_status() {
        op_and_key("S");
    }

    #[test]
    fn redirect_target_finds_the_peer() {
        let peers: Vec<SocketAddr> = vec![
            "127.0.0.1:1001".parse().unwrap_or_else(|e| panic!("{e}")),
            "127.0.0.1:1002".parse().unwrap_or_else(|e| panic!("{e}")),
        ];
        let client = ClusterClient::new(peers, 0);
        assert_eq!(
            client.redirect_target("M A k 127.0.0.1:1002", "A", "k"),
            Some(1)
        );
        assert_eq!(client.redirect_target("M A k -", "A", "k"), None);
    }

    #[test]
    #[should_panic(expected = "not in the peer list")]
    fn redirect_target_refuses_strangers() {
        let peers = vec![free_addr()];
        let client = ClusterClient::new(peers, 0);
        client.redirect_target("M R k 10.0.0.1:1", "R", "k");
    }

    #[test]
    #[should_panic(expected = "expected `M A k <addr>`")]
    fn redirect_target_checks_op_and_key() {
        let peers = vec![free_addr()];
        let client = ClusterClient::new(peers, 0);
        client.redirect_target("M A other -", "A", "k");
    }
}
