//! An in-process fake node speaking protocol 1.2's lines, for client tests
//! that must not wait for the node side: a lock table with permits, shared
//! grants and values, `Q`, `V`, and `W` watches answered oldest first.
//! Several fakes can share one table, one serving and the others
//! redirecting to it, to play a failover. It is deliberately simple: no
//! lease expiry, no wait queue (an acquire that cannot be granted is
//! answered `T` after at most 50 ms), no limits.
//!
//! Requests are read with baton_proto's parser and answers written with its
//! encoder, so every line is the protocol's.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use baton_core::{
    HolderState, HolderValue, Key, KeyDetail, KeyState, LiveGrant, LockMode, StateTag, Token,
    MAX_LISTED_HOLDERS,
};
use baton_proto::{parse_request, AcquireOptions, Limits, Op, Request, Response};
use bytes::BytesMut;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::AbortHandle;

/// The longest a refused acquire waits before its `T`.
const REFUSED_PAUSE: Duration = Duration::from_millis(50);

const SINGLE_STATUS: &str =
    "S role=single mode=single self=127.0.0.1:1 active=- token=0 locks=0 waiters=0 protocol=1.2 version=fake\n";
const STANDBY_STATUS: &str =
    "S role=standby mode=priority self=127.0.0.1:1 active=- token=0 locks=0 waiters=0 protocol=1.2 version=fake\n";

struct Holding {
    token: Token,
    mode: LockMode,
    value: Option<HolderValue>,
    lease_ms: u64,
}

/// A key's grants, oldest first.
struct Entry {
    permits: u32,
    holders: Vec<Holding>,
}

/// A `W` not answered yet.
struct PendingWatch {
    id: u64,
    key: Key,
    seen: StateTag,
    /// The fake and the connection it came on.
    node: u64,
    conn: u64,
    out: mpsc::UnboundedSender<String>,
}

#[derive(Default)]
struct Table {
    entries: HashMap<Key, Entry>,
    last_token: Token,
    watches: Vec<PendingWatch>,
    next_id: u64,
}

fn encode(response: &Response) -> String {
    let mut buf = BytesMut::new();
    response.encode(&mut buf);
    String::from_utf8_lossy(&buf).into_owned()
}

impl Table {
    fn state(&self, key: &Key) -> KeyState {
        let Some(entry) = self.entries.get(key).filter(|e| !e.holders.is_empty()) else {
            return KeyState::plain(None, 0);
        };
        let newest = entry.holders.iter().map(|h| h.token).max().unwrap_or(0);
        let lease = |h: &Holding| h.lease_ms;
        let grant = entry
            .holders
            .iter()
            .find(|h| h.token == newest)
            .map(|h| LiveGrant {
                token: newest,
                lease_left_ms: lease(h),
            });
        let tag = StateTag::of(
            entry.permits,
            entry
                .holders
                .iter()
                .map(|h| (h.token, h.mode, h.value.as_ref())),
        );
        if matches!(tag, StateTag::Plain(_)) {
            return KeyState::plain(grant, 0);
        }
        let holders = entry.holders.iter().take(MAX_LISTED_HOLDERS);
        let detail = KeyDetail {
            permits: entry.permits,
            mode: entry.holders[0].mode,
            holder_count: entry.holders.len() as u64,
            holders: holders
                .map(|h| HolderState {
                    token: h.token,
                    lease_left_ms: lease(h),
                    value: h.value.clone(),
                })
                .collect(),
            tag,
        };
        KeyState {
            grant,
            waiters: 0,
            detail: Some(Box::new(detail)),
        }
    }

    /// Answers the watches of `key` whose tag is no longer the key's,
    /// oldest first.
    fn changed(&mut self, key: &Key) {
        let state = self.state(key);
        let tag = state.tag();
        let answer = encode(&Response::Watched {
            key: key.clone(),
            state,
        });
        self.watches.retain(|w| {
            if w.key != *key || w.seen == tag {
                return true;
            }
            let _ = w.out.send(answer.clone());
            false
        });
    }

    fn acquire(
        &mut self,
        key: &Key,
        lease_ms: u64,
        options: AcquireOptions,
    ) -> Result<Response, String> {
        let entry = self.entries.entry(key.clone()).or_insert(Entry {
            permits: options.permits,
            holders: Vec::new(),
        });
        if entry.holders.is_empty() {
            entry.permits = options.permits;
        }
        if entry.permits != options.permits
            || (options.mode == LockMode::Shared && entry.permits > 1)
        {
            let reason = format!("the key has {} permits", entry.permits);
            return Ok(Response::Error(error_reply(Op::Acquire, key, &reason)));
        }
        let free = match options.mode {
            LockMode::Shared => entry.holders.iter().all(|h| h.mode == LockMode::Shared),
            LockMode::Exclusive => {
                entry.holders.len() < entry.permits as usize
                    && entry.holders.iter().all(|h| h.mode == LockMode::Exclusive)
            }
        };
        if !free {
            return Err("busy".into());
        }
        self.last_token += 1;
        let token = self.last_token;
        entry.holders.push(Holding {
            token,
            mode: options.mode,
            value: options.value,
            lease_ms,
        });
        self.changed(key);
        Ok(Response::Granted {
            key: key.clone(),
            token,
        })
    }

    /// Takes out the grant of `key` with `token`; whether there was one.
    fn remove(&mut self, key: &Key, token: Token) -> bool {
        let Some(entry) = self.entries.get_mut(key) else {
            return false;
        };
        let before = entry.holders.len();
        entry.holders.retain(|h| h.token != token);
        let removed = entry.holders.len() < before;
        if removed {
            self.changed(key);
        }
        removed
    }

    fn holding(&mut self, key: &Key, token: Token) -> Option<&mut Holding> {
        self.entries
            .get_mut(key)?
            .holders
            .iter_mut()
            .find(|h| h.token == token)
    }
}

fn error_reply(op: Op, key: &Key, reason: &str) -> baton_proto::ErrorReply {
    baton_proto::ErrorReply {
        op: Some(op),
        key: Some(key.as_bytes().to_vec()),
        reason: reason.into(),
    }
}

/// What a fake does with requests other than `S`.
#[derive(Clone, Copy, Debug)]
enum Role {
    Serving,
    /// `M <op> <key> <addr|->`.
    Redirecting(Option<SocketAddr>),
}

struct NodeState {
    id: u64,
    table: Arc<Mutex<Table>>,
    role: Mutex<Role>,
    lines: Mutex<Vec<String>>,
    connections: Mutex<Vec<AbortHandle>>,
    next_conn: AtomicU64,
    /// `--max-wait`: a longer wait is refused with `E`.
    max_wait_ms: AtomicU64,
}

fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

static NODE_IDS: AtomicU64 = AtomicU64::new(1);

/// A fake 1.2 node on a loopback port; it stops with the test's runtime.
#[derive(Clone)]
pub struct FakeNode {
    pub addr: SocketAddr,
    state: Arc<NodeState>,
}

impl std::fmt::Debug for FakeNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeNode")
            .field("addr", &self.addr)
            .finish()
    }
}

impl FakeNode {
    /// A serving fake with a table of its own.
    pub async fn start() -> FakeNode {
        FakeNode::with_table(Arc::default(), Role::Serving).await
    }

    /// A fake sharing `other`'s table that redirects to it (a standby).
    pub async fn standby_of(other: &FakeNode) -> FakeNode {
        let role = Role::Redirecting(Some(other.addr));
        FakeNode::with_table(Arc::clone(&other.state.table), role).await
    }

    async fn with_table(table: Arc<Mutex<Table>>, role: Role) -> FakeNode {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a fake node");
        let addr = listener.local_addr().expect("its address");
        let state = Arc::new(NodeState {
            id: NODE_IDS.fetch_add(1, Ordering::Relaxed),
            table,
            role: Mutex::new(role),
            lines: Mutex::new(Vec::new()),
            connections: Mutex::new(Vec::new()),
            next_conn: AtomicU64::new(1),
            max_wait_ms: AtomicU64::new(Limits::default().max_wait_ms),
        });
        let accepting = Arc::clone(&state);
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let conn = accepting.next_conn.fetch_add(1, Ordering::Relaxed);
                let task = tokio::spawn(serve(socket, Arc::clone(&accepting), conn));
                locked(&accepting.connections).push(task.abort_handle());
            }
        });
        FakeNode { addr, state }
    }

    /// Refuses waits longer than `max` from now on, as `--max-wait` does.
    pub fn set_max_wait(&self, max: Duration) {
        let ms = u64::try_from(max.as_millis()).unwrap_or(u64::MAX);
        self.state.max_wait_ms.store(ms, Ordering::Relaxed);
    }

    /// Serves from now on.
    pub fn serve(&self) {
        *locked(&self.state.role) = Role::Serving;
    }

    /// Stops serving: redirects to `to` (`-` for `None`) from now on, and
    /// answers its pending watches so, as a node that stops serving does.
    pub fn redirect_to(&self, to: Option<SocketAddr>) {
        *locked(&self.state.role) = Role::Redirecting(to);
        let addr = to.map_or("-".to_owned(), |a| a.to_string());
        let mut table = locked(&self.state.table);
        table.watches.retain(|w| {
            if w.node != self.state.id {
                return true;
            }
            let _ = w.out.send(format!("M W {} {addr}\n", w.key));
            false
        });
    }

    /// Cuts every connection (the sockets close); their watches leave.
    pub fn drop_connections(&self) {
        for task in locked(&self.state.connections).drain(..) {
            task.abort();
        }
        locked(&self.state.table)
            .watches
            .retain(|w| w.node != self.state.id);
    }

    /// Every line read so far, in order.
    pub fn lines(&self) -> Vec<String> {
        locked(&self.state.lines).clone()
    }

    /// Watches pending on this fake.
    pub fn pending_watches(&self) -> usize {
        let table = locked(&self.state.table);
        table
            .watches
            .iter()
            .filter(|w| w.node == self.state.id)
            .count()
    }

    /// Ends the grant of `key` with `token` as a lease expiry would.
    pub fn expire(&self, key: &str, token: Token) -> bool {
        let key = Key::try_from(key).expect("a valid key");
        locked(&self.state.table).remove(&key, token)
    }
}

async fn serve(socket: TcpStream, node: Arc<NodeState>, conn: u64) {
    let (read, mut write) = socket.into_split();
    let (out, mut outgoing) = mpsc::unbounded_channel::<String>();
    let writer = tokio::spawn(async move {
        while let Some(line) = outgoing.recv().await {
            if write.write_all(line.as_bytes()).await.is_err() {
                return;
            }
        }
    });
    let mut lines = BufReader::new(read).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        locked(&node.lines).push(line.clone());
        answer(&line, &node, conn, &out);
    }
    writer.abort();
    locked(&node.table)
        .watches
        .retain(|w| w.node != node.id || w.conn != conn);
}

fn answer(line: &str, node: &NodeState, conn: u64, out: &mpsc::UnboundedSender<String>) {
    let role = *locked(&node.role);
    let limits = Limits {
        max_wait_ms: node.max_wait_ms.load(Ordering::Relaxed),
        ..Limits::default()
    };
    let request = match parse_request(line.as_bytes(), &limits) {
        Ok(request) => request,
        Err(err) => {
            let _ = out.send(encode(&Response::Error(err.to_reply())));
            return;
        }
    };
    let key = request.key().cloned();
    match (role, request, key) {
        (Role::Serving, Request::Status, _) => {
            let _ = out.send(SINGLE_STATUS.into());
        }
        (Role::Redirecting(_), Request::Status, _) => {
            let _ = out.send(STANDBY_STATUS.into());
        }
        (Role::Redirecting(to), request, Some(key)) => {
            let to = to.map(|a| a.to_string());
            let moved = Response::Moved {
                op: request.op(),
                key,
                addr: to,
            };
            let _ = out.send(encode(&moved));
        }
        (Role::Serving, request, _) => serve_request(request, node, conn, out),
        (_, _, None) => {}
    }
}

fn serve_request(
    request: Request,
    node: &NodeState,
    conn: u64,
    out: &mpsc::UnboundedSender<String>,
) {
    let mut table = locked(&node.table);
    let response = match request {
        Request::Acquire {
            key,
            wait_ms,
            lease_ms,
            options,
        } => match table.acquire(&key, lease_ms, options) {
            Ok(response) => response,
            Err(_) => {
                let out = out.clone();
                let pause = REFUSED_PAUSE.min(Duration::from_millis(wait_ms.max(1)));
                tokio::spawn(async move {
                    tokio::time::sleep(pause).await;
                    let _ = out.send(encode(&Response::TimedOut { key }));
                });
                return;
            }
        },
        Request::Release { key, token } => {
            if table.remove(&key, token) {
                Response::Released { key }
            } else {
                Response::NotHeld {
                    op: Op::Release,
                    key,
                }
            }
        }
        Request::Renew { key, token, .. } => match table.holding(&key, token) {
            Some(_) => Response::Renewed { key },
            None => Response::NotHeld { op: Op::Renew, key },
        },
        Request::SetValue { key, token, value } => match table.holding(&key, token) {
            Some(holding) => {
                holding.value = value;
                table.changed(&key);
                Response::ValueSet { key }
            }
            None => Response::NotHeld {
                op: Op::SetValue,
                key,
            },
        },
        Request::Query { key } => Response::Queried {
            state: table.state(&key),
            key,
        },
        Request::Watch { key, wait_ms, seen } => {
            let state = table.state(&key);
            if state.tag() != seen {
                Response::Watched { key, state }
            } else {
                let wait_ms = match wait_ms {
                    0 => node.max_wait_ms.load(Ordering::Relaxed),
                    ms => ms,
                };
                watch_later(&mut table, node, conn, out, key, wait_ms, seen);
                return;
            }
        }
        Request::Auth { .. } | Request::Status => return,
    };
    let _ = out.send(encode(&response));
}

/// Registers a watch, answered when the key changes or after `wait_ms`.
fn watch_later(
    table: &mut Table,
    node: &NodeState,
    conn: u64,
    out: &mpsc::UnboundedSender<String>,
    key: Key,
    wait_ms: u64,
    seen: StateTag,
) {
    table.next_id += 1;
    let id = table.next_id;
    table.watches.push(PendingWatch {
        id,
        key,
        seen,
        node: node.id,
        conn,
        out: out.clone(),
    });
    let table = Arc::clone(&node.table);
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(wait_ms)).await;
        let mut table = locked(&table);
        if let Some(at) = table.watches.iter().position(|w| w.id == id) {
            let watch = table.watches.remove(at);
            let state = table.state(&watch.key);
            let _ = watch.out.send(encode(&Response::Watched {
                key: watch.key,
                state,
            }));
        }
    });
}
