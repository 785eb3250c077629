//! The software of one simulated host: the production Raft node (server,
//! connections, timer, `RaftLockNode`, the shell's pump, role and
//! stuck-replication watchers, peer links and handlers, openraft over the
//! real log store) started with `raft::start_on` on turmoil's network,
//! and a few clients on the same host that speak the real protocol to it.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use baton_cluster::peer::ClusterKeys;
use baton_cluster::raft::storage::log_store::LogWrites;
use baton_cluster::raft::{self, NodeIo, RaftLockNode, RaftSettings};
use baton_core::{HolderValue, Key, KeyState, LockMode, StateTag};
use baton_proto::{AcquireOptions, ClientCodec, Request, Response};
use baton_server::{Clock, ServerConfig, SharedLocks};
use futures_util::{SinkExt, StreamExt};
use tokio_util::codec::Framed;

use super::history::{Held, History};
use super::net::{SimDialer, SimListener, SimStream};
use super::replace::Replacements;
use super::rng::Rng;

pub const PORT: u16 = 9000;
/// Plain locks, a semaphore of [`SEMAPHORE_PERMITS`] and a readers-writer
/// key (see [`Client::options`]).
const KEYS: [&str; 5] = ["alpha", "beta", "gamma", "sem", "rw"];
const SEMAPHORE_PERMITS: u32 = 3;
const LEASE_MS: u64 = 400;
const WAIT_MS: u64 = 300;
const CLIENTS_PER_NODE: u64 = 2;

/// The cluster key of every simulated node: links run the real handshake
/// and encrypted frames.
const SIM_CLUSTER_KEY: &str = "simulated cluster key, the same on every node";

/// Simulated milliseconds since the simulation began, the same on every host.
pub fn sim_ms() -> u64 {
    turmoil::sim_elapsed().map_or(0, |d| d.as_millis() as u64)
}

/// A node's lock state as its server holds it.
pub type Locks = Arc<SharedLocks<RaftLockNode>>;

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What the test shares with every run of every node.
#[derive(Debug, Clone)]
pub struct World {
    pub peers: Vec<String>,
    pub dirs: Vec<PathBuf>,
    pub history: History,
    /// The lock state of each node's current run.
    pub nodes: Arc<Mutex<HashMap<u64, Locks>>>,
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
    /// Requests answered `M` (sent to a node that does not serve).
    pub redirects: Arc<AtomicU64>,
    /// `Q` answered with the key's state (after a release).
    pub queries: Arc<AtomicU64>,
    /// Watches answered with a state.
    pub watches: Arc<AtomicU64>,
    /// A node whose disk was lost, being replaced (see `replace`).
    pub replacements: Replacements,
}

impl World {
    fn breach(&self, what: String) {
        locked(&self.breaches).push(what);
    }

    /// The lock state of every node that ran, by index.
    pub fn nodes(&self) -> Vec<(u64, Locks)> {
        let mut nodes: Vec<_> = locked(&self.nodes)
            .iter()
            .map(|(i, l)| (*i, l.clone()))
            .collect();
        nodes.sort_by_key(|(i, _)| *i);
        nodes
    }
}

/// The software of host `me`: runs until the host crashes.
pub async fn run(world: World, me: u64, incarnation: u64) -> turmoil::Result {
    // A replaced host runs as a node that joined: under its address's id.
    let join = world.replacements.joins(me);
    let id = if join {
        raft::members::joined_id(&world.peers[me as usize])
    } else {
        me
    };
    let mut settings = RaftSettings::new(
        id,
        world.peers.clone(),
        world.dirs[me as usize].clone(),
        ClusterKeys::from_text(SIM_CLUSTER_KEY).expect("key"),
    );
    settings.snapshot_every = 40;
    settings.join = join;
    settings.segment_bytes = 16 * 1024;
    // The writer thread's time, real, must not pass on the simulated
    // clock: under a loaded machine it showed as a slow disk, and seeds
    // that pass alone barely served in a soak.
    settings.log_writes = LogWrites::Awaited;
    let io = NodeIo {
        dialer: Arc::new(SimDialer),
        clock: Clock::new(),
        // The run's name, from the seed: a replay names its runs alike.
        origin: world.seed ^ (me << 48) ^ (incarnation << 32),
        // Simulated time: tokio's timer, which the simulation drives.
        hold_clock: raft::shell::hold_timer::HoldClock::Runtime,
    };
    let config = ServerConfig {
        listen: SocketAddr::from(([0, 0, 0, 0], PORT)),
        advertise: Some(world.peers[me as usize].clone()),
        ..ServerConfig::default()
    };
    let listener = SimListener(turmoil::net::TcpListener::bind(("0.0.0.0", PORT)).await?);
    let cluster = raft::start_on(listener, io, config, settings).await?;
    locked(&world.nodes).insert(me, cluster.server.locks().clone());
    tokio::spawn(super::replace::admin(
        world.replacements.clone(),
        cluster.handle.membership().clone(),
        cluster.server.locks().clone(),
        world.peers.clone(),
    ));
    for client in 0..CLIENTS_PER_NODE {
        let rng = Rng::new(world.seed ^ (me * 1_000 + client + incarnation * 7_919));
        let client = Client {
            locks: cluster.server.locks().clone(),
            world: world.clone(),
            me,
            rng,
        };
        tokio::spawn(client.run());
    }
    cluster.server.run(std::future::pending()).await;
    Ok(())
}

/// The protocol's answer-time rule: an acquire is answered by the end of
/// its wait plus this, anything else within this.
pub const ANSWER_SLACK_MS: u64 = 3_000;

type Conn = Framed<SimStream, ClientCodec>;

/// One client: a connection to its own host's node.
struct Client {
    locks: Locks,
    world: World,
    me: u64,
    rng: Rng,
}

impl Client {
    /// Acquires a random key, holds it a while (less than the lease, as a
    /// well-behaved client), releases it; again and again. A node that does
    /// not serve answers `M`, and the client tries again later. Every
    /// request must be answered within the answer-time rule.
    async fn run(mut self) {
        let addr = SocketAddr::from(([127, 0, 0, 1], PORT));
        let Ok(stream) = turmoil::net::TcpStream::connect(addr).await else {
            self.world
                .breach(format!("node {}: a client could not connect", self.me));
            return;
        };
        let mut conn = Framed::new(SimStream(stream), ClientCodec::default());
        loop {
            tokio::time::sleep(Duration::from_millis(self.rng.below(30) as u64 + 1)).await;
            if self.world.quiet.load(Ordering::Relaxed) {
                continue;
            }
            if !self.cycle(&mut conn).await {
                return;
            }
        }
    }

    /// One acquire, hold and release; `false` once the connection is gone.
    async fn cycle(&mut self, conn: &mut Conn) -> bool {
        let name = KEYS[self.rng.below(KEYS.len())];
        let key = Key::new(name.as_bytes()).expect("key");
        let options = self.options(name);
        let (permits, shared) = (options.permits, options.mode == LockMode::Shared);
        let acquire = Request::Acquire {
            key: key.clone(),
            wait_ms: WAIT_MS,
            lease_ms: LEASE_MS,
            options,
        };
        let what = format!("node {}: A {name}", self.me);
        let token = match self
            .ask(conn, acquire, WAIT_MS + ANSWER_SLACK_MS, what)
            .await
        {
            Some(Response::Granted { token, .. }) => token,
            Some(_) => return true,
            None => return false,
        };
        let at = sim_ms();
        let index = self.world.history.record(Held {
            key: name.to_string(),
            token,
            node: self.me,
            granted_at: at,
            lease_end: at + LEASE_MS,
            released_at: None,
            permits,
            shared,
        });
        if self.rng.below(4) == 0 && !self.set_value(conn, &key, token).await {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(self.rng.below(200) as u64)).await;
        self.world.history.released(index, sim_ms());
        // Only to count them: whether a waiter's grant rides behind.
        let waiting = self
            .locks
            .inspect(|node| node.engine().serving() && node.engine().waiting_on(&key) > 0);
        if waiting {
            self.world.handovers.fetch_add(1, Ordering::Relaxed);
            if self.world.follower_cut.load(Ordering::Relaxed) {
                self.world
                    .handovers_while_cut
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
        let what = format!("node {}: R {name} {token}", self.me);
        let release = Request::Release {
            key: key.clone(),
            token,
        };
        match self.ask(conn, release, ANSWER_SLACK_MS, what).await {
            Some(Response::Released { .. }) if self.rng.below(3) == 0 => {
                self.query_after_release(conn, key, token).await
            }
            Some(Response::Released { .. }) if self.rng.below(2) == 0 => {
                self.watch_after_release(conn, key, token).await
            }
            Some(_) => true,
            None => false,
        }
    }

    /// What an acquire of `name` asks for: a permit of the semaphore, a
    /// shared grant of the readers-writer key two times in three, and now
    /// and then a value.
    fn options(&mut self, name: &str) -> AcquireOptions {
        let value = (self.rng.below(3) == 0).then(|| value_of(self.me));
        let (permits, mode) = match name {
            "sem" => (SEMAPHORE_PERMITS, LockMode::Exclusive),
            "rw" if self.rng.below(3) > 0 => (1, LockMode::Shared),
            _ => (1, LockMode::Exclusive),
        };
        AcquireOptions {
            permits,
            mode,
            value,
        }
    }

    /// `V` on a grant held: set (or, if the lease ran out meanwhile, not
    /// held), in time.
    async fn set_value(&mut self, conn: &mut Conn, key: &Key, token: u64) -> bool {
        let what = format!("node {}: V {key} {token}", self.me);
        let set = Request::SetValue {
            key: key.clone(),
            token,
            value: Some(value_of(self.me)),
        };
        match self.ask(conn, set, ANSWER_SLACK_MS, what.clone()).await {
            Some(Response::ValueSet { .. } | Response::NotHeld { .. } | Response::Moved { .. }) => {
                true
            }
            Some(other) => {
                self.world.breach(format!("{what}: answered {other:?}"));
                true
            }
            None => false,
        }
    }

    /// A `W` sent after a release was acknowledged, whichever way it is
    /// answered (after a read round, on a committed change, at the end of
    /// its wait), never shows the released grant.
    async fn watch_after_release(&mut self, conn: &mut Conn, key: Key, released: u64) -> bool {
        let what = format!("node {}: W {key} after R {released}", self.me);
        let wait_ms = 50 + self.rng.below(150) as u64;
        let watch = Request::Watch {
            key,
            wait_ms,
            seen: StateTag::Free,
        };
        let limit = wait_ms + ANSWER_SLACK_MS;
        match self.ask(conn, watch, limit, what.clone()).await {
            Some(Response::Watched { state, .. }) => {
                self.world.watches.fetch_add(1, Ordering::Relaxed);
                if holds(&state, released) {
                    self.world
                        .breach(format!("{what}: a stale watch shows the released grant"));
                }
                true
            }
            Some(_) => true,
            None => false,
        }
    }

    /// A linearizable `Q` sent after a release was acknowledged never
    /// shows the released grant (a stale table would).
    async fn query_after_release(&mut self, conn: &mut Conn, key: Key, released: u64) -> bool {
        let what = format!("node {}: Q {key} after R {released}", self.me);
        let query = Request::Query { key };
        match self.ask(conn, query, ANSWER_SLACK_MS, what.clone()).await {
            Some(Response::Queried { state, .. }) => {
                self.world.queries.fetch_add(1, Ordering::Relaxed);
                if holds(&state, released) {
                    self.world
                        .breach(format!("{what}: a stale read shows the released grant"));
                }
                true
            }
            Some(_) => true,
            None => false,
        }
    }

    /// Sends `request` and waits for its answer; records a breach of the
    /// answer-time rule (no answer within `limit_ms`, or the connection
    /// closed on it), and any `E`. A client whose host crashes dies with its request,
    /// which is no breach.
    async fn ask(
        &self,
        conn: &mut Conn,
        request: Request,
        limit_ms: u64,
        what: String,
    ) -> Option<Response> {
        let sent_at = sim_ms();
        if conn.send(request).await.is_err() {
            self.world.breach(format!("{what}: the connection broke"));
            return None;
        }
        match tokio::time::timeout(Duration::from_millis(limit_ms), conn.next()).await {
            Ok(Some(Ok(answer))) => {
                if matches!(answer, Response::Moved { .. }) {
                    self.world.redirects.fetch_add(1, Ordering::Relaxed);
                }
                // Every request the clients send is valid and within the
                // node's limits: an `E` is a node that does not serve it.
                if let Response::Error(error) = &answer {
                    self.world.breach(format!("{what}: refused: {error:?}"));
                }
                Some(answer)
            }
            Ok(Some(Err(error))) => {
                self.world.breach(format!(
                    "{what} sent at {sent_at}: unreadable answer: {error}"
                ));
                None
            }
            Ok(None) => {
                self.world.breach(format!(
                    "{what} sent at {sent_at}: connection closed unanswered"
                ));
                None
            }
            Err(_) => {
                self.world.breach(format!(
                    "{what} sent at {sent_at} had no answer after {limit_ms} ms"
                ));
                None
            }
        }
    }
}

/// The value a client on node `me` attaches to its grants.
fn value_of(me: u64) -> HolderValue {
    HolderValue::try_from(format!("node-{me}").as_str()).expect("value")
}

/// Whether `state` shows a grant with `token` among its holders.
fn holds(state: &KeyState, token: u64) -> bool {
    state.grant.as_ref().is_some_and(|g| g.token == token)
        || state
            .detail
            .as_ref()
            .is_some_and(|d| d.holders.iter().any(|h| h.token == token))
}
