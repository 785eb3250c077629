//! One simulated Raft node: the real engine, storage, network code, the
//! shell's pump, role and stuck-replication watchers, and
//! openraft, on a turmoil host, with a few clients of its own that acquire
//! and release while it leads.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use baton_cluster::raft::engine::{EngineEvent, RaftEngine};
use baton_cluster::raft::inbound::RaftAcceptor;
use baton_cluster::raft::link::{BoxedStream, DialFuture, Dialer};
use baton_cluster::raft::observe;
use baton_cluster::raft::rpc::RAFT_HELLO;
use baton_cluster::raft::shell::{self, ProposalSource, RaftOf};
use baton_cluster::raft::state_machine::TableHost;
use baton_cluster::raft::types::Entry;
use baton_cluster::raft::types::{NodeId, Proposal};
use baton_cluster::raft::{build_raft, RaftSettings};
use baton_core::{Key, NotServing, TableSnapshot};
use bytes::BytesMut;
use tokio::io::AsyncReadExt;
use tokio::sync::{mpsc, Notify};

use super::history::{Held, History};
use super::rng::Rng;

pub const PORT: u16 = 9000;
const KEYS: [&str; 3] = ["alpha", "beta", "gamma"];
const LEASE_MS: u64 = 400;
const WAIT_MS: u64 = 300;

/// Simulated milliseconds since the simulation began, the same on every host.
pub fn sim_ms() -> u64 {
    turmoil::sim_elapsed().map_or(0, |d| d.as_millis() as u64)
}

/// How a client's request ended.
#[derive(Debug)]
pub enum Answer {
    Granted { token: u64, at: u64 },
    Other,
}

type Handle = mpsc::UnboundedSender<Answer>;

/// A grant as a node's table made it: (token, key).
pub type AppliedGrant = (u64, Vec<u8>);

/// The engine of one run of a node, and what it applied.
#[derive(Debug)]
pub struct SimNode {
    engine: Mutex<RaftEngine<Handle>>,
    started: tokio::time::Instant,
    output: Notify,
    /// Grants this node's table made at apply (token, key), and the token
    /// floor of the last snapshot it installed (grants below it came in
    /// the snapshot).
    applied: Mutex<(Vec<AppliedGrant>, u64)>,
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl SimNode {
    fn new(me: u64, peers: Vec<String>, origin: u64) -> SimNode {
        SimNode {
            engine: Mutex::new(RaftEngine::new(me, peers, origin)),
            started: tokio::time::Instant::now(),
            output: Notify::new(),
            applied: Mutex::new((Vec::new(), 0)),
        }
    }

    fn now(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// Runs `f` on the engine, then answers the clients its events concern.
    fn with<R>(
        &self,
        f: impl FnOnce(&mut RaftEngine<Handle>, u64, &mut Vec<EngineEvent<Handle>>) -> R,
    ) -> R {
        let mut events = Vec::new();
        let (result, has_output) = {
            let mut engine = locked(&self.engine);
            let result = f(&mut engine, self.now(), &mut events);
            (result, engine.has_output())
        };
        if has_output {
            self.output.notify_one();
        }
        let at = sim_ms();
        for event in events {
            let (handle, answer) = match event {
                EngineEvent::Granted { handle, token, .. } => {
                    (handle, Answer::Granted { token, at })
                }
                EngineEvent::TimedOut { handle, .. }
                | EngineEvent::Moved { handle, .. }
                | EngineEvent::Answered { handle, .. } => (handle, Answer::Other),
            };
            // A client whose host crashed is gone; the lease ends its grant.
            let _ = handle.send(answer);
        }
        result
    }

    /// The engine's state in a few words, for a failure report.
    pub fn describe(&self) -> String {
        let engine = locked(&self.engine);
        format!(
            "role {:?} serving {} outbox {} waiters {}",
            engine.role(),
            engine.serving(),
            engine.has_output(),
            engine.waiter_count()
        )
    }

    pub fn serving(&self) -> bool {
        locked(&self.engine).serving()
    }

    /// The table's grants as (key, token), sorted, and its last token.
    pub fn table(&self) -> (Vec<(Vec<u8>, u64)>, u64) {
        let engine = locked(&self.engine);
        let mut locks: Vec<_> = engine
            .table()
            .iter()
            .map(|(k, h)| (k.as_bytes().to_vec(), h.token))
            .collect();
        locks.sort();
        (locks, engine.table().last_token())
    }

    /// Whether this node's table went through the grant of `token`.
    pub fn has_applied(&self, token: u64) -> bool {
        let applied = locked(&self.applied);
        token <= applied.1 || applied.0.iter().any(|(t, _)| *t == token)
    }

    /// Every grant this run of the node applied, as (token, key).
    pub fn applied_grants(&self) -> Vec<AppliedGrant> {
        locked(&self.applied).0.clone()
    }

    fn acquire(&self, key: Key, wait_ms: u64, handle: Handle) -> Result<(), NotServing> {
        self.with(|e, now, ev| e.acquire(key, wait_ms, LEASE_MS, now, handle, ev))
            .map(|_| ())
    }

    /// Sends a release, and the next waiter's grant behind it as the
    /// server does. Returns whether to wait for an answer (`false`:
    /// answered at once) and whether a waiter's grant rode behind it.
    fn release(&self, key: &Key, token: u64, handle: Handle) -> (bool, bool) {
        self.with(|e, now, ev| {
            let waiting = e.waiting_on(key) > 0;
            let proposed = e.release(key, token, Some(handle));
            if matches!(proposed, Ok(None)) {
                e.grant_behind_release(key, now, ev);
                (true, waiting)
            } else {
                (false, false)
            }
        })
    }
}

impl TableHost for SimNode {
    fn apply(&self, entries: &[Entry]) {
        let mut granted = Vec::new();
        self.with(|engine, now, ev| {
            for entry in entries {
                let before = engine.table().last_token();
                engine.apply_entry(entry.into(), now, ev);
                // Each grant takes the next token; find the key holding it.
                for token in before + 1..=engine.table().last_token() {
                    let key = engine
                        .table()
                        .iter()
                        .find(|(_, h)| h.token == token)
                        .map(|(k, _)| k.as_bytes().to_vec());
                    granted.push((token, key.unwrap_or_default()));
                }
            }
        });
        locked(&self.applied).0.extend(granted);
    }

    fn snapshot(&self) -> TableSnapshot {
        let now = self.now();
        locked(&self.engine).snapshot(now)
    }

    fn restore(&self, snapshot: &TableSnapshot) {
        let now = self.now();
        locked(&self.engine).restore(snapshot, now);
        let mut applied = locked(&self.applied);
        applied.1 = applied.1.max(snapshot.last_token);
    }
}

impl ProposalSource for SimNode {
    fn output_ready(&self) -> impl std::future::Future<Output = ()> + Send {
        self.output.notified()
    }

    fn take_proposal(&self) -> Option<(Proposal, Vec<u64>)> {
        self.with(|e, _, _| e.take_proposal())
    }

    fn proposal_failed(&self, tags: &[u64], leader: Option<NodeId>) {
        self.with(|e, _, ev| e.proposal_failed(tags, leader, ev));
    }
}

/// The cluster key of every simulated node: links run the real handshake
/// and encrypted frames.
const SIM_CLUSTER_KEY: &str = "simulated cluster key, the same on every node";

/// Dials turmoil's simulated TCP.
struct SimDialer;

impl Dialer for SimDialer {
    fn dial(&self, addr: &str) -> DialFuture {
        let addr = addr.to_string();
        Box::pin(async move {
            let stream = turmoil::net::TcpStream::connect(addr).await?;
            Ok(Box::new(stream) as BoxedStream)
        })
    }
}

/// What the test shares with every run of every node.
#[derive(Debug, Clone)]
pub struct World {
    pub peers: Vec<String>,
    pub dirs: Vec<PathBuf>,
    pub history: History,
    pub nodes: Arc<Mutex<HashMap<u64, Arc<SimNode>>>>,
    /// Once set, clients start nothing new.
    pub quiet: Arc<AtomicBool>,
    pub seed: u64,
    /// Breaches of the answer-time rule, as they happen.
    pub breaches: Arc<Mutex<Vec<String>>>,
    /// Set while a follower of the serving leader is cut off.
    pub follower_cut: Arc<AtomicBool>,
    /// Releases sent with a waiter queued behind them (its grant rides in
    /// the same entry), and how many of those while a follower was cut off.
    pub handovers: Arc<AtomicU64>,
    pub handovers_while_cut: Arc<AtomicU64>,
}

impl World {
    fn breach(&self, what: String) {
        locked(&self.breaches).push(what);
    }
}

/// The software of host `me`: runs until the host crashes.
pub async fn run(world: World, me: u64, incarnation: u64) -> turmoil::Result {
    let origin = world.seed ^ (me << 48) ^ (incarnation << 32);
    let mut settings = RaftSettings::new(
        me,
        world.peers.clone(),
        world.dirs[me as usize].clone(),
        baton_cluster::peer::ClusterKeys::from_text(SIM_CLUSTER_KEY).expect("key"),
    );
    settings.snapshot_every = 40;
    settings.segment_bytes = 16 * 1024;
    let node = Arc::new(SimNode::new(me, world.peers.clone(), origin));
    locked(&node.engine).set_orphan_wait(settings.orphan_wait_ms());
    locked(&world.nodes).insert(me, node.clone());
    let raft: RaftOf<SimNode> = build_raft(&settings, node.clone(), Arc::new(SimDialer)).await?;
    let listener = turmoil::net::TcpListener::bind(("0.0.0.0", PORT)).await?;
    {
        // The node's own acceptor, gate and handshake included; the hello
        // line is read first, as the server does to tell peers from
        // clients.
        let acceptor =
            RaftAcceptor::new(raft.clone(), me, world.peers.clone(), settings.keys.clone());
        tokio::spawn(async move {
            while let Ok((mut stream, addr)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let mut hello = vec![0; RAFT_HELLO.len()];
                    if stream.read_exact(&mut hello).await.is_err() || hello != RAFT_HELLO {
                        return;
                    }
                    acceptor.take(stream, BytesMut::from(&hello[..]), addr.ip());
                });
            }
        });
    }
    tokio::spawn(follow_role(raft.clone(), node.clone(), settings.clone()));
    tokio::spawn(shell::pump(raft.clone(), node.clone()));
    tokio::spawn(shell::unstick_replication(raft.clone(), &settings));
    {
        let node = node.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(5)).await;
                node.with(|e, now, ev| e.tick(now, ev));
            }
        });
    }
    for client in 0..2u64 {
        let rng = Rng::new(world.seed ^ (me * 1_000 + client + incarnation * 7_919));
        tokio::spawn(client_loop(node.clone(), world.clone(), me, rng));
    }
    std::future::pending::<()>().await;
    Ok(())
}

async fn follow_role(raft: RaftOf<SimNode>, node: Arc<SimNode>, settings: RaftSettings) {
    let (after, tick) = (settings.step_down_after(), settings.quorum_check_every());
    observe::follow_role(raft, after, tick, |role, _| {
        node.with(|e, now, ev| e.set_role(role, now, ev));
    })
    .await;
}

/// The protocol's answer-time rule: an acquire is answered by the end of
/// its wait plus this, anything else within this.
pub const ANSWER_SLACK_MS: u64 = 3_000;

/// Waits for the answer to a request sent at `sent_at`, and records a
/// breach of the answer-time rule (no answer within `limit_ms`, or the
/// request dropped unanswered). A client whose host crashes dies with its
/// request, which is no breach.
async fn answer_within(
    rx: &mut mpsc::UnboundedReceiver<Answer>,
    limit_ms: u64,
    what: String,
    world: &World,
) -> Option<Answer> {
    let sent_at = sim_ms();
    match tokio::time::timeout(Duration::from_millis(limit_ms), rx.recv()).await {
        Ok(Some(answer)) => Some(answer),
        Ok(None) => {
            world.breach(format!("{what} sent at {sent_at} was dropped unanswered"));
            None
        }
        Err(_) => {
            world.breach(format!(
                "{what} sent at {sent_at} had no answer after {limit_ms} ms"
            ));
            None
        }
    }
}

/// Acquires a random key while this node serves, holds it a while (less
/// than the lease, as a well-behaved client), releases it. Every request
/// must be answered within the answer-time rule.
async fn client_loop(node: Arc<SimNode>, world: World, me: u64, mut rng: Rng) {
    loop {
        tokio::time::sleep(Duration::from_millis(rng.below(30) + 1)).await;
        if world.quiet.load(Ordering::Relaxed) || !node.serving() {
            continue;
        }
        let name = KEYS[rng.below(KEYS.len() as u64) as usize];
        let Ok(key) = Key::new(name.as_bytes()) else {
            continue;
        };
        let (tx, mut rx) = mpsc::unbounded_channel();
        if node.acquire(key.clone(), WAIT_MS, tx.clone()).is_err() {
            continue;
        }
        let what = format!("node {me}: A {name}");
        let answer = answer_within(&mut rx, WAIT_MS + ANSWER_SLACK_MS, what, &world).await;
        let Some(Answer::Granted { token, at }) = answer else {
            continue;
        };
        let index = world.history.record(Held {
            key: name.to_string(),
            token,
            node: me,
            granted_at: at,
            lease_end: at + LEASE_MS,
            released_at: None,
        });
        tokio::time::sleep(Duration::from_millis(rng.below(200))).await;
        world.history.released(index, sim_ms());
        let (proposed, handed_over) = node.release(&key, token, tx);
        if handed_over {
            world.handovers.fetch_add(1, Ordering::Relaxed);
            if world.follower_cut.load(Ordering::Relaxed) {
                world.handovers_while_cut.fetch_add(1, Ordering::Relaxed);
            }
        }
        if proposed {
            let what = format!("node {me}: R {name} {token}");
            answer_within(&mut rx, ANSWER_SLACK_MS, what, &world).await;
        }
    }
}
