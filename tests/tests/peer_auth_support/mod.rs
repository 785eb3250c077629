//! Helpers of `peer_auth.rs`: a cluster whose nodes reach each other
//! through recording proxies (so a real link can be replayed), a
//! record of what the cluster looks like that every attack is checked
//! against, start-ups that must fail, and the node's log as plain text.

#![allow(dead_code)] // each test uses its own subset

pub mod attacks;

use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use baton_tests::cluster::field;
use baton_tests::proxy::FaultProxy;
use baton_tests::{free_addr, status_u64, Batond, LineClient, Status};

/// Cluster tests run one at a time: the machine is small, and a flood of
/// connections next to a cluster could starve its heartbeats.
pub static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Slower than the defaults, so that a loaded machine does not change
/// the leader under a test that checks nothing changed.
pub const TIMING: [&str; 4] = ["--heartbeat-interval", "0.1", "--failure-timeout", "2"];

/// How long a fresh cluster may take to agree on who serves.
pub const SETTLE: Duration = Duration::from_secs(20);
/// How long a grant may take to reach every node.
const CATCH_UP: Duration = Duration::from_secs(5);
/// The lease of the lock held across every attack.
const HELD_LEASE: u64 = 600;

/// How the cluster runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Priority,
    Raft,
}

impl Mode {
    pub fn flag(self) -> &'static str {
        match self {
            Mode::Priority => "priority",
            Mode::Raft => "raft",
        }
    }

    /// The hello of the mode's peer links, as this build speaks it.
    pub fn hello(self) -> &'static [u8] {
        match self {
            Mode::Priority => baton_cluster::peer::PEER_HELLO,
            Mode::Raft => baton_cluster::raft::net::rpc::RAFT_HELLO,
        }
    }

    /// The hello of version 1, which authenticated nothing.
    pub fn old_hello(self) -> &'static [u8] {
        match self {
            Mode::Priority => b"BATON-PEER/1\n",
            Mode::Raft => b"BATON-RAFT/1\n",
        }
    }

    pub fn serving_role(self) -> &'static str {
        match self {
            Mode::Priority => "active",
            Mode::Raft => "leader",
        }
    }
}

/// The cluster's key, as the harness gives it to every node it starts.
pub fn cluster_key() -> baton_cluster::peer::ClusterKey {
    baton_cluster::peer::ClusterKey::from_text(baton_tests::cluster_key_text())
        .expect("the harness key is long enough")
}

/// A key of another cluster.
pub fn other_key() -> baton_cluster::peer::ClusterKey {
    let text = baton_tests::key::random_key_text().expect("random");
    baton_cluster::peer::ClusterKey::from_text(&text).expect("64 hex digits")
}

/// `n` nodes of `mode`, each listed in `--peers` at the address of a
/// proxy of its own (it listens elsewhere and `--advertise`s the proxy),
/// so every link between them goes through a proxy, which records it.
/// Which links exist depends on the mode and on who leads (a Raft
/// follower dials no one), so every node gets one.
#[derive(Debug)]
pub struct ProxiedCluster {
    pub mode: Mode,
    pub nodes: Vec<Batond>,
    /// Where each node listens (clients and attackers go here).
    pub listen: Vec<SocketAddr>,
    /// Each node's address in `--peers`: its proxy's.
    pub listed: Vec<SocketAddr>,
    pub proxies: Vec<FaultProxy>,
    _dirs: Vec<tempfile::TempDir>,
}

impl ProxiedCluster {
    pub async fn start(mode: Mode, n: usize) -> ProxiedCluster {
        ProxiedCluster::start_with(mode, n, &[]).await
    }

    /// As [`ProxiedCluster::start`], with `extra` arguments for every node.
    pub async fn start_with(mode: Mode, n: usize, extra: &[&str]) -> ProxiedCluster {
        let mut listen: Vec<SocketAddr> = Vec::new();
        while listen.len() < n {
            let addr = free_addr();
            if !listen.contains(&addr) {
                listen.push(addr);
            }
        }
        let mut proxies = Vec::with_capacity(n);
        for addr in &listen {
            let proxy = FaultProxy::start(*addr).await;
            proxy.record(true);
            proxies.push(proxy);
        }
        let listed: Vec<SocketAddr> = proxies.iter().map(FaultProxy::addr).collect();
        let peers = listed
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(",");
        let dirs: Vec<tempfile::TempDir> = (0..n)
            .map(|_| tempfile::tempdir().expect("temp dir"))
            .collect();
        let nodes = (0..n)
            .map(|i| {
                let mut args: Vec<String> = vec![
                    "--peers".into(),
                    peers.clone(),
                    "--mode".into(),
                    mode.flag().into(),
                ];
                args.extend(TIMING.iter().map(|a| (*a).to_owned()));
                args.extend(extra.iter().map(|a| (*a).to_owned()));
                args.extend(["--advertise".into(), listed[i].to_string()]);
                if mode == Mode::Raft {
                    args.extend(["--data-dir".into(), dirs[i].path().display().to_string()]);
                }
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                Batond::start_at(listen[i], &args)
            })
            .collect();
        ProxiedCluster {
            mode,
            nodes,
            listen,
            listed,
            proxies,
            _dirs: dirs,
        }
    }

    /// Polls until one node serves and every node names it; its index.
    pub async fn wait_serving(&self) -> usize {
        let deadline = Instant::now() + SETTLE;
        loop {
            let mut statuses = Vec::new();
            for addr in &self.listen {
                statuses.push(probe(*addr).await);
            }
            let serving: Vec<usize> = statuses
                .iter()
                .enumerate()
                .filter(|(_, s)| {
                    s.as_ref()
                        .is_some_and(|s| field(s, "role") == self.mode.serving_role())
                })
                .map(|(i, _)| i)
                .collect();
            if let [one] = serving[..] {
                let named = self.listed[one].to_string();
                if statuses
                    .iter()
                    .all(|s| s.as_ref().is_some_and(|s| field(s, "active") == named))
                {
                    return one;
                }
            }
            assert!(
                Instant::now() < deadline,
                "no agreed serving node within {SETTLE:?}: {statuses:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The longest link one node opened to another that began with the
    /// mode's hello, once it holds the handshake and some frames.
    pub async fn recorded_link(&self) -> Vec<u8> {
        let hello = self.mode.hello();
        let enough = hello.len() + 2 + 48 + 200;
        let deadline = Instant::now() + SETTLE;
        loop {
            let best = self
                .proxies
                .iter()
                .flat_map(|proxy| proxy.recordings().into_values())
                .filter(|r| r.starts_with(hello))
                .max_by_key(Vec::len);
            if let Some(link) = best.filter(|r| r.len() >= enough) {
                return link;
            }
            assert!(
                Instant::now() < deadline,
                "no peer link of {enough} bytes through the proxy within {SETTLE:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// One `S` on a new connection; `None` if the node does not answer.
pub async fn probe(addr: SocketAddr) -> Option<Status> {
    baton_tests::cluster::probe_status(addr, Duration::from_millis(500)).await
}

/// What the cluster looked like before the attacks, and what only our own
/// requests may change: a lock held across all of them, and the token.
#[derive(Debug)]
pub struct Baseline {
    pub serving: usize,
    roles: Vec<String>,
    active: String,
    /// Raft's term on each node; an attack must not move it.
    terms: Vec<Option<String>>,
    held_token: u64,
    /// The token the nodes last showed: our last grant, or in priority
    /// mode a clock floor above it.
    token: u64,
}

impl Baseline {
    /// Takes the held lock on the serving node and waits until every node
    /// has it.
    pub async fn take(cluster: &ProxiedCluster) -> Baseline {
        let serving = cluster.wait_serving().await;
        let mut client = LineClient::connect(cluster.listen[serving]).await;
        let answer = client.request(&format!("A held 5 {HELD_LEASE}")).await;
        let held_token = grant_token(&answer, "held");
        let mut baseline = Baseline {
            serving,
            roles: Vec::new(),
            active: cluster.listed[serving].to_string(),
            terms: Vec::new(),
            held_token,
            token: held_token,
        };
        let statuses = baseline.caught_up(cluster, "before the attacks").await;
        baseline.roles = statuses
            .iter()
            .map(|s| field(s, "role").to_owned())
            .collect();
        baseline.terms = statuses.iter().map(|s| s.get("term").cloned()).collect();
        baseline
    }

    /// Panics, naming `attack`, unless nothing changed on any node but
    /// what our own requests did: roles, active, term, the held lock and
    /// the token as we left them, and every node still serving.
    pub async fn check(&mut self, cluster: &ProxiedCluster, attack: &str) {
        let statuses = self.caught_up(cluster, attack).await;
        for (i, status) in statuses.iter().enumerate() {
            assert_eq!(
                field(status, "role"),
                self.roles[i],
                "after {attack}: node {i} changed role: {status:?}"
            );
            assert_eq!(
                status.get("term"),
                self.terms[i].as_ref(),
                "after {attack}: node {i} changed term: {status:?}"
            );
        }
        let serving = cluster.listen[self.serving];
        let mut client = LineClient::connect(serving).await;
        let renewed = client
            .request(&format!("K held {} {HELD_LEASE}", self.held_token))
            .await;
        assert_eq!(
            renewed, "K held",
            "after {attack}: the held lock (token {}) is not held any more",
            self.held_token
        );
        let granted = client.request("A probe 5 10").await;
        let token = grant_token(&granted, "probe");
        match cluster.mode {
            // Raft counts grants one by one.
            Mode::Raft => assert_eq!(
                token,
                self.token + 1,
                "after {attack}: the token moved by more than our grant"
            ),
            // A priority active keeps its tokens above its wall clock
            // (docs/cluster.md), so they jump; they must still rise and
            // stay near that clock, not at a floor someone forged.
            Mode::Priority => {
                assert!(
                    token > self.token,
                    "after {attack}: token {token} after {}",
                    self.token
                );
                let bound = wall_clock_token_bound();
                assert!(
                    token < bound,
                    "after {attack}: token {token} is beyond any the clock gives ({bound})"
                );
            }
        }
        self.token = token;
        assert_eq!(client.request(&format!("R probe {token}")).await, "R probe");
        for (i, addr) in cluster.listen.iter().enumerate() {
            if i == self.serving {
                continue;
            }
            let mut other = LineClient::connect(*addr).await;
            assert_eq!(
                other.request("A probe 5 10").await,
                format!("M A probe {}", self.active),
                "after {attack}: node {i} does not redirect to the serving node"
            );
        }
    }

    /// Waits until every node reports the token our requests left and
    /// the held lock alone, naming the same serving node; their statuses.
    ///
    /// A Raft token moves only with grants. A priority active also lifts
    /// its token floor to keep up with its wall clock (docs/cluster.md),
    /// at any call that can grant, a tick included, and the standbys
    /// replay that: there every node must show the same token, no lower
    /// than ours and not beyond the clock, and that becomes the token the
    /// next grant must exceed.
    async fn caught_up(&mut self, cluster: &ProxiedCluster, when: &str) -> Vec<Status> {
        let deadline = Instant::now() + CATCH_UP;
        loop {
            let mut statuses = Vec::new();
            for addr in &cluster.listen {
                statuses.push(probe(*addr).await);
            }
            let tokens: Vec<Option<u64>> = statuses
                .iter()
                .map(|s| s.as_ref().map(|s| status_u64(s, "token")))
                .collect();
            let token = tokens[0].filter(|t| tokens.iter().all(|o| *o == Some(*t)));
            let token_ok = token.is_some_and(|t| match cluster.mode {
                Mode::Raft => t == self.token,
                Mode::Priority => t >= self.token && t < wall_clock_token_bound(),
            });
            let settled = token_ok
                && statuses.iter().all(|s| {
                    s.as_ref().is_some_and(|s| {
                        field(s, "locks") == "1" && field(s, "active") == self.active
                    })
                });
            if let (true, Some(token)) = (settled, token) {
                self.token = token;
                return statuses.into_iter().flatten().collect();
            }
            assert!(
                Instant::now() < deadline,
                "{when}: the nodes do not all show token {}{}, one lock and active {} within {CATCH_UP:?}: {statuses:?}",
                if cluster.mode == Mode::Priority { "or a later clock floor after " } else { "" },
                self.token,
                self.active
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Above every token a priority cluster can have reached now: its floors
/// follow the wall clock in milliseconds shifted left by 20 bits, plus
/// margins of a few blocks; an hour of clock is far more than those.
fn wall_clock_token_bound() -> u64 {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_millis() as u64;
    (ms + 3_600_000) << 20
}

/// The token of an `A <key> <token>` grant; panics on another answer.
pub fn grant_token(answer: &str, key: &str) -> u64 {
    answer
        .strip_prefix(&format!("A {key} "))
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("expected a grant of {key}, got {answer:?}"))
}

/// The node's stderr so far, without the colour codes of its log lines.
pub fn plain_log(node: &Batond) -> String {
    strip_ansi(&node.log_tail(usize::MAX))
}

fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI: ESC [ parameters, then a final byte in @..~.
            for c in chars.by_ref() {
                if ('@'..='~').contains(&c) && c != '[' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The log's refused-peer lines from `from`.
pub fn refusals_from(log: &str, from: &str) -> usize {
    log.lines()
        .filter(|line| line.contains("refused a peer connection"))
        .filter(|line| {
            line.split_whitespace()
                .any(|word| word.strip_prefix("from=") == Some(from))
        })
        .count()
}

/// Polls `node`'s log until it has a refused-peer line from `from`.
pub async fn wait_refusal_logged(node: &Batond, from: &str, attack: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while refusals_from(&plain_log(node), from) == 0 {
        assert!(
            Instant::now() < deadline,
            "{attack}: {} logged no refused peer connection from {from}",
            node.addr()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Runs `batond args` (no key added) and expects it to exit non-zero
/// without listening; returns its exit status and stderr.
pub fn start_refused(args: &[&str]) -> (ExitStatus, String) {
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    baton_tests::refused::start_refused(&args)
}

/// The arguments of a one-node cluster of `mode` on a fresh address,
/// with a data directory under `dir` for Raft.
pub fn alone(mode: Mode, dir: &Path) -> Vec<String> {
    let addr = free_addr().to_string();
    let mut args: Vec<String> = vec![
        "--listen".into(),
        addr.clone(),
        "--peers".into(),
        addr,
        "--mode".into(),
        mode.flag().into(),
    ];
    if mode == Mode::Raft {
        args.extend(["--data-dir".into(), dir.display().to_string()]);
    }
    args
}

/// A cluster of `mode` that serves, and which node serves: a priority
/// node alone, or three Raft nodes (a one-node Raft cluster does not stay
/// leader for long: it turns candidate within a second of its election).
pub async fn serving_cluster(mode: Mode, extra: &[&str]) -> (ProxiedCluster, usize) {
    let n = match mode {
        Mode::Priority => 1,
        Mode::Raft => 3,
    };
    let cluster = ProxiedCluster::start_with(mode, n, extra).await;
    let serving = cluster.wait_serving().await;
    (cluster, serving)
}

/// Starts `args` (a one-node cluster of `mode`) and waits until it serves:
/// before, its peer channel may not be listening yet.
pub async fn start_serving(mode: Mode, args: &[String]) -> Batond {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let node = Batond::start(&args);
    let mut probe = node.connect().await;
    let role = mode.serving_role();
    probe
        .wait_status(role, SETTLE, |s| field(s, "role") == role)
        .await;
    node
}
