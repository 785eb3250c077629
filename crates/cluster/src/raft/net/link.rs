//! One multiplexed connection to a peer: RPCs go out tagged with an id,
//! replies come back in any order and wake their caller. The connection is
//! dialled on first use and again after it fails, over the authenticated
//! channel (the handshake proves both ends hold the cluster key), with a
//! growing wait between failed dials ([`Redial`]): a call meanwhile fails
//! at once. Every call is bounded by its timeout, dialling and handshake
//! included; a dial runs as a task of its own, so one that outlasts the
//! call that started it (a handshake on a loaded machine) is not cut, and
//! its connection serves the next call. The
//! writer's queue and the calls awaiting replies are bounded: a call past
//! either fails at once rather than letting them grow.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use baton_server::Tasks;
use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, oneshot};

use crate::peer::{self, ClusterKey};
use crate::raft::net::limits::{FrameCaps, MAX_CALLS_IN_FLIGHT, REQUEST_QUEUE};
use crate::raft::net::redial::Redial;
use crate::raft::net::rpc::{LinkHello, ReplyBody, RequestBody, RpcReply, RpcRequest, RAFT_HELLO};

/// A byte stream to a peer: TCP in a node, a simulated one in tests.
pub trait PeerStream: AsyncRead + AsyncWrite + Send + Unpin + 'static {}

impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> PeerStream for T {}

pub type BoxedStream = Box<dyn PeerStream>;
pub type DialFuture = Pin<Box<dyn Future<Output = io::Result<BoxedStream>> + Send>>;

/// Opens byte streams to peer addresses.
pub trait Dialer: Send + Sync + 'static {
    fn dial(&self, addr: &str) -> DialFuture;
}

/// Dials real TCP.
#[derive(Debug, Clone, Copy, Default)]
pub struct TcpDialer;

impl Dialer for TcpDialer {
    fn dial(&self, addr: &str) -> DialFuture {
        let addr = addr.to_string();
        Box::pin(async move {
            let stream = tokio::net::TcpStream::connect(addr).await?;
            stream.set_nodelay(true)?;
            Ok(Box::new(stream) as BoxedStream)
        })
    }
}

/// Why an RPC got no answer.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("peer unreachable: {0}")]
    Unreachable(String),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("connection to the peer broke")]
    Broken,
    #[error("peer refused the request: {0}")]
    Refused(String),
    #[error("too many calls queued to the peer")]
    Overloaded,
    /// The last dial failed and the next is not due yet.
    #[error("peer unreachable; next dial in {0:?}")]
    Waiting(Duration),
    /// A dial is under way (started by an earlier call).
    #[error("peer not connected yet; a dial is under way")]
    Dialling,
}

type Waiters = Arc<Mutex<HashMap<u64, oneshot::Sender<ReplyBody>>>>;

/// The live connection: a queue to its writer task and the calls awaiting
/// replies. Dropped (and redialled) once either half fails.
#[derive(Debug)]
struct Conn {
    tx: mpsc::Sender<Bytes>,
    waiters: Waiters,
    /// Whether the peer answered a call on it: until it does, the dial
    /// counts as failed (a peer that takes the handshake, then refuses
    /// the link, is redialled with the back-off too).
    answered: AtomicBool,
    /// Why the peer refused the link, if it said (a reply with id 0).
    refusal: Arc<Mutex<Option<String>>>,
}

impl Conn {
    /// How a call that found the connection gone fails: with the peer's
    /// refusal if it gave one.
    fn broken(&self) -> CallError {
        match self
            .refusal
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
        {
            Some(reason) => CallError::Refused(reason),
            None => CallError::Broken,
        }
    }
}

/// The live connection, if any, and when the next dial may start.
#[derive(Debug, Default)]
struct Slot {
    conn: Option<Arc<Conn>>,
    redial: Redial,
    /// A dial's task is under way: no second one starts meanwhile.
    dialling: bool,
}

impl Slot {
    /// Forgets the connection; the next dial is due at once if the peer
    /// answered on it.
    fn forget(&mut self) {
        if let Some(conn) = self.conn.take() {
            if conn.answered.load(Ordering::Relaxed) {
                self.redial.connected();
            }
        }
    }
}

/// The link to one peer, shared by every openraft client of that peer.
pub struct Link {
    addr: String,
    hello: LinkHello,
    key: ClusterKey,
    caps: FrameCaps,
    dialer: Arc<dyn Dialer>,
    slot: Arc<tokio::sync::Mutex<Slot>>,
    next_id: AtomicU64,
    /// The node's tasks: a connection's reader and writer stop with it.
    tasks: Tasks,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

fn waiters_of(
    waiters: &Waiters,
) -> std::sync::MutexGuard<'_, HashMap<u64, oneshot::Sender<ReplyBody>>> {
    waiters.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Link {
    /// The link to the peer at `addr`, greeting it with `hello` and
    /// proving to hold `key`; its connections' tasks run among `tasks`.
    /// The peer's address, as in `--peers`.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    pub fn new(
        addr: String,
        hello: LinkHello,
        key: ClusterKey,
        dialer: Arc<dyn Dialer>,
        tasks: Tasks,
    ) -> Link {
        let caps = FrameCaps::for_cluster();
        Link {
            addr,
            hello,
            key,
            caps,
            dialer,
            slot: Arc::new(tokio::sync::Mutex::new(Slot::default())),
            next_id: AtomicU64::new(1),
            tasks,
        }
    }

    /// Sends `body` and waits (at most `timeout`, dialling included) for
    /// the reply. A connection that lets a call time out is dropped: a
    /// stalled stream would stall every call after it. A dial that does
    /// not get through the handshake in time leaves the peer unreachable.
    pub async fn call(&self, body: RequestBody, timeout: Duration) -> Result<ReplyBody, CallError> {
        let deadline = tokio::time::Instant::now() + timeout;
        let conn = match tokio::time::timeout_at(deadline, self.connection()).await {
            Ok(conn) => conn?,
            Err(_) => {
                return Err(CallError::Unreachable(format!(
                    "no connection within {timeout:?}"
                )))
            }
        };
        match tokio::time::timeout_at(deadline, self.call_on(&conn, body)).await {
            Ok(result) => result,
            Err(_) => {
                self.drop_conn(&conn).await;
                Err(CallError::Timeout(timeout))
            }
        }
    }

    async fn call_on(&self, conn: &Arc<Conn>, body: RequestBody) -> Result<ReplyBody, CallError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let frame = peer::encode(&RpcRequest { id, body })
            .map_err(|e| CallError::Refused(e.to_string()))?;
        let (tx, rx) = oneshot::channel();
        {
            let mut waiters = waiters_of(&conn.waiters);
            if waiters.len() >= MAX_CALLS_IN_FLIGHT {
                return Err(CallError::Overloaded);
            }
            waiters.insert(id, tx);
        }
        // The guard takes the waiter out again if the caller gives up.
        let _forget = Forget {
            waiters: conn.waiters.clone(),
            id,
        };
        match conn.tx.try_send(frame) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => return Err(CallError::Overloaded),
            Err(mpsc::error::TrySendError::Closed(_)) => {
                self.drop_conn(conn).await;
                return Err(conn.broken());
            }
        }
        let reply = rx.await;
        if reply.is_ok() {
            conn.answered.store(true, Ordering::Relaxed);
        }
        match reply {
            Ok(ReplyBody::Failed(reason)) => Err(CallError::Refused(reason)),
            Ok(reply) => Ok(reply),
            Err(_) => {
                self.drop_conn(conn).await;
                Err(conn.broken())
            }
        }
    }

    async fn drop_conn(&self, dead: &Arc<Conn>) {
        let mut slot = self.slot.lock().await;
        if slot.conn.as_ref().is_some_and(|c| Arc::ptr_eq(c, dead)) {
            slot.forget();
        }
    }

    /// The live connection, or a new one if a dial is due.
    async fn connection(&self) -> Result<Arc<Conn>, CallError> {
        let dialled = {
            let mut slot = self.slot.lock().await;
            if let Some(conn) = slot.conn.as_ref() {
                if !conn.tx.is_closed() {
                    return Ok(conn.clone());
                }
            }
            if slot.dialling {
                return Err(CallError::Dialling);
            }
            slot.forget();
            let now = tokio::time::Instant::now();
            slot.redial.may_dial(now).map_err(CallError::Waiting)?;
            slot.redial.dialling(now);
            slot.dialling = true;
            self.dial()
        };
        dialled.await.unwrap_or(Err(CallError::Broken))
    }

    /// Dials in a task of its own, which keeps the connection in the slot
    /// when it gets through: a caller that gives up (an RPC's timeout is a
    /// few heartbeats) does not cut a handshake that a loaded machine takes
    /// longer to finish (the handshake has its own bound,
    /// [`peer::HANDSHAKE_TIMEOUT`]). Cut at every call, such a dial never
    /// got through while the load lasted, and the peer stayed unreachable.
    fn dial(&self) -> oneshot::Receiver<Result<Arc<Conn>, CallError>> {
        let (tx, rx) = oneshot::channel();
        let (dialer, addr) = (self.dialer.clone(), self.addr.clone());
        let (hello, key, caps) = (self.hello.clone(), self.key.clone(), self.caps);
        let (tasks, slot) = (self.tasks.clone(), self.slot.clone());
        self.tasks.spawn(async move {
            let made = async {
                let stream = dialer
                    .dial(&addr)
                    .await
                    .map_err(|e| CallError::Unreachable(e.to_string()))?;
                let conn = start(stream, &hello, &key, caps, &tasks)
                    .await
                    .map_err(|e| CallError::Unreachable(e.to_string()))?;
                Ok(Arc::new(conn))
            }
            .await;
            let mut slot = slot.lock().await;
            slot.dialling = false;
            if let Ok(conn) = &made {
                slot.conn = Some(conn.clone());
            }
            drop(slot);
            let _ = tx.send(made);
        });
        rx
    }
}

/// Removes a call's waiter when the call ends, however it ends.
struct Forget {
    waiters: Waiters,
    id: u64,
}

impl Drop for Forget {
    fn drop(&mut self) {
        waiters_of(&self.waiters).remove(&self.id);
    }
}

/// Runs the handshake, greets the peer and starts the connection's
/// writer and reader tasks.
async fn start(
    stream: BoxedStream,
    hello: &LinkHello,
    key: &ClusterKey,
    caps: FrameCaps,
    tasks: &Tasks,
) -> Result<Conn, peer::PeerError> {
    let first = peer::encode(hello)?;
    let framed = peer::connect(stream, RAFT_HELLO, key, first, caps.reply).await?;
    let (mut sink, mut frames) = framed.split();
    let (tx, mut rx) = mpsc::channel::<Bytes>(REQUEST_QUEUE);
    let waiters: Waiters = Arc::new(Mutex::new(HashMap::new()));
    let reading = waiters.clone();
    let refusal = Arc::new(Mutex::new(None));
    let refused = refusal.clone();
    let (stop_tx, mut stop_rx) = oneshot::channel::<()>();
    tasks.spawn(async move {
        let mut batch = Vec::with_capacity(REQUEST_QUEUE);
        loop {
            tokio::select! {
                n = rx.recv_many(&mut batch, REQUEST_QUEUE) => {
                    if n == 0 {
                        return;
                    }
                    for frame in batch.drain(..) {
                        if sink.feed(frame).await.is_err() {
                            return;
                        }
                    }
                    if sink.flush().await.is_err() {
                        return;
                    }
                }
                _ = &mut stop_rx => return,
            }
        }
    });
    tasks.spawn(async move {
        while let Some(Ok(frame)) = frames.next().await {
            let Ok(reply) = peer::decode::<RpcReply>(&frame) else {
                break;
            };
            if let (0, ReplyBody::Failed(reason)) = (reply.id, &reply.body) {
                // No call has id 0: the peer refuses the link, and says why.
                *refused.lock().unwrap_or_else(PoisonError::into_inner) = Some(reason.clone());
                break;
            }
            if let Some(waiter) = waiters_of(&reading).remove(&reply.id) {
                let _ = waiter.send(reply.body);
            }
        }
        // Every call still waiting learns the connection broke.
        waiters_of(&reading).clear();
        drop(stop_tx);
    });
    Ok(Conn {
        tx,
        waiters,
        answered: AtomicBool::new(false),
        refusal,
    })
}
