//! One TCP connection to a node. A single task owns the socket: it writes
//! the requests callers hand it through a channel and matches each response
//! to its request by (op, key), oldest first, as docs/protocol.md says,
//! keeping at most one acquire and one watch of a key in flight (see
//! [`crate::one_in_flight`]). It also watches the node's silence (see [`crate::liveness`]): the connection is
//! usable once the node answered its first probe, and given up when a
//! probe goes unanswered.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use baton_core::{Key, Token};
use baton_proto::{ClientCodec, Op, Request, Response, ResponseError};
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use tokio_util::codec::{FramedRead, FramedWrite};

use crate::lifecycle::Background;
use crate::liveness::{Liveness, Silence, Verdict};
use crate::one_in_flight::{is_waiting_op, OneInFlight};
use crate::turns::Turn;

/// A request on its way to a connection, with where to deliver its answer.
/// Dropping `reply` unanswered tells the caller the connection broke.
#[derive(Debug)]
pub(crate) struct Call {
    pub(crate) req: Request,
    pub(crate) reply: Reply,
}

/// What a call comes back with: the node's answer, or [`Unsent`].
pub(crate) type Outcome = Result<Response, Unsent>;

/// Where a call's outcome goes, with the call's turn of its key on the
/// connection, if it took one (see [`crate::turns`]): the turn ends when
/// the reply is used or dropped, once the node answered or the call ended
/// unsent or with its connection.
///
/// The turn ends before the caller learns its outcome, which may send it
/// again at once: `turn` is declared first, so a dropped reply drops it
/// first too (fields drop in order), and `send` ends it before sending.
#[derive(Debug)]
pub(crate) struct Reply {
    turn: Option<Turn>,
    sender: oneshot::Sender<Outcome>,
}

impl Reply {
    pub(crate) fn new(sender: oneshot::Sender<Outcome>) -> Reply {
        Reply::in_turn(sender, None)
    }

    pub(crate) fn in_turn(sender: oneshot::Sender<Outcome>, turn: Option<Turn>) -> Reply {
        Reply { turn, sender }
    }

    /// Delivers `outcome`; it comes back if the caller is gone.
    pub(crate) fn send(self, outcome: Outcome) -> Result<(), Outcome> {
        let Reply { turn, sender } = self;
        drop(turn);
        sender.send(outcome)
    }

    /// Whether the caller gave the call up.
    pub(crate) fn is_closed(&self) -> bool {
        self.sender.is_closed()
    }
}

/// An acquire or a watch whose wait ran out while it waited in the client
/// behind another of its key: it was never sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Unsent;

/// Why a connection task stopped.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum End {
    /// Every handle to the client is gone, or the client was closed: nobody
    /// will send requests again.
    ClientGone,
    /// The socket failed, closed, or the node sent a line that does not parse.
    Broken,
    /// The node stopped answering: requests were in flight and a probe
    /// went unanswered for [`Liveness::unresponsive_after`].
    Unresponsive,
    /// The TLS side failed, or the node said it wants TLS: reconnecting
    /// the same way will not help. The words for `Error::Tls`.
    Tls(String),
    /// The node answered the probe that it requires authentication, and
    /// the client has no credentials: it would refuse every request.
    AuthRequired,
}

/// Requests are written in batches of at most this many before a flush, so
/// a steady stream of calls cannot delay the first ones indefinitely.
const WRITE_BATCH: usize = 256;

pub(crate) type MatchKey = (Op, Vec<u8>);

pub(crate) fn match_key(op: Op, key: Option<&[u8]>) -> MatchKey {
    (op, key.map(<[u8]>::to_vec).unwrap_or_default())
}

/// How long the release of an orphaned grant is waited for (by `close`).
const ORPHAN_RELEASE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Resolves once the client is closed (or every handle to it is gone).
pub(crate) async fn closed(shutdown: &mut watch::Receiver<bool>) {
    // An error means the sender is gone: the client is gone too.
    let _ = shutdown.wait_for(|closed| *closed).await;
}

/// Pairs a request's match key with where its answer goes.
type Registration = (MatchKey, Reply);
type Reader<R> = FramedRead<R, ClientCodec>;
type Writer<W> = FramedWrite<W, ClientCodec>;

/// What one connection's task needs besides its socket.
pub(crate) struct Serving<'a> {
    pub(crate) calls: &'a mut mpsc::UnboundedReceiver<Call>,
    pub(crate) shutdown: &'a mut watch::Receiver<bool>,
    pub(crate) background: &'a Arc<Background>,
    pub(crate) liveness: Liveness,
    /// Set from each `S` answer: whether the node speaks protocol 1.2.
    pub(crate) speaks_12: &'a AtomicBool,
}

/// What the writer, the reader and the watchdog of one connection share.
struct Ends<'a> {
    silence: &'a Mutex<Silence>,
    /// The acquires and watches kept back behind one of their key.
    in_flight: &'a Mutex<OneInFlight>,
    speaks_12: &'a AtomicBool,
    /// Called once, when the first line comes from the node.
    on_alive: Mutex<Option<Box<dyn FnOnce() + Send + 'a>>>,
}

impl Ends<'_> {
    fn silence(&self) -> std::sync::MutexGuard<'_, Silence> {
        self.silence.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn in_flight(&self) -> std::sync::MutexGuard<'_, OneInFlight> {
        self.in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The node answered for the first time.
    fn alive(&self) {
        let first = self
            .on_alive
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(on_alive) = first {
            on_alive();
        }
    }
}

/// Runs the connection until it breaks, stops answering, the client goes
/// away or is closed. `on_alive` runs when the node answers for the first
/// time (an `S` probe goes out first, before any call).
///
/// Reading, writing and watching the silence are futures inside this one
/// task, so a large pipelined burst can never deadlock with a node that
/// blocks writing its answers while we block writing requests, and a node
/// that stopped reading is still noticed.
pub(crate) async fn serve<R, W>(
    read_half: R,
    write_half: W,
    serving: Serving<'_>,
    on_alive: impl FnOnce() + Send,
) -> End
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let Serving {
        calls,
        shutdown,
        background,
        liveness,
        speaks_12,
    } = serving;
    let reader = FramedRead::new(read_half, ClientCodec::default());
    let writer = FramedWrite::new(write_half, ClientCodec::default());
    // The writer registers a request before writing it, so its registration
    // is always queued before the node can possibly answer it.
    let (register_tx, register_rx) = mpsc::unbounded_channel::<Registration>();
    // The connection's own requests, written before the callers': probes,
    // and the release of grants nobody waits for any more, so the lock is
    // not held by nobody until its lease runs out (their answers are
    // awaited in the background, so that `close` can wait for them).
    let (own_tx, own_rx) = mpsc::unbounded_channel::<Call>();
    let silence = Mutex::new(Silence::new(Instant::now()));
    let in_flight = Mutex::new(OneInFlight::default());
    let ends = Ends {
        silence: &silence,
        in_flight: &in_flight,
        speaks_12,
        on_alive: Mutex::new(Some(Box::new(on_alive))),
    };
    // The node is usable once it answered this.
    probe(&own_tx);

    let write = write_calls(writer, calls, own_rx, register_tx, &ends);
    let read = read_answers(reader, register_rx, own_tx.clone(), background, &ends);
    let watch = watch_silence(&ends, liveness, own_tx);
    tokio::select! {
        end = write => end,
        end = read => end,
        end = watch => end,
        () = closed(shutdown) => End::ClientGone,
    }
}

/// Queues an `S` probe; its answer only shows the node alive.
fn probe(own: &mpsc::UnboundedSender<Call>) {
    let (reply, _) = oneshot::channel();
    let _ = own.send(Call {
        req: Request::Status,
        reply: Reply::new(reply),
    });
}

/// Probes a connection that has requests in flight and has been silent,
/// and ends it when the probe goes unanswered.
async fn watch_silence(
    ends: &Ends<'_>,
    liveness: Liveness,
    own: mpsc::UnboundedSender<Call>,
) -> End {
    let mut judged = false;
    loop {
        let verdict = ends.silence().verdict(Instant::now(), liveness);
        match verdict {
            Verdict::WaitUntil(at) => tokio::time::sleep_until(at).await,
            Verdict::Probe(at) => {
                probe(&own);
                tokio::time::sleep_until(at).await;
            }
            Verdict::Unresponsive if judged => return End::Unresponsive,
            // Once more after the reader had its turn: answers already
            // here (the task itself was held up, say) count first.
            Verdict::Unresponsive => {
                judged = true;
                tokio::task::yield_now().await;
                continue;
            }
        }
        judged = false;
    }
}

/// The writing half: writes calls (the connection's own first: probes,
/// orphan releases, calls let out of their key's line) in batches,
/// registering each before it is written. A caller's acquire or watch of
/// a key with one in flight is kept back instead; one whose wait runs out
/// there ends unsent.
async fn write_calls<W: AsyncWrite + Unpin>(
    mut writer: Writer<W>,
    calls: &mut mpsc::UnboundedReceiver<Call>,
    mut own: mpsc::UnboundedReceiver<Call>,
    register: mpsc::UnboundedSender<Registration>,
    ends: &Ends<'_>,
) -> End {
    loop {
        let next_deadline = ends.in_flight().next_deadline();
        let wait_runs_out = async {
            match next_deadline {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let first = tokio::select! {
            biased;
            Some(own) = own.recv() => own,
            call = calls.recv() => match call {
                Some(call) => match ends.in_flight().admit(call, Instant::now()) {
                    Some(call) => call,
                    None => continue,
                },
                None => return End::ClientGone,
            },
            () = wait_runs_out => {
                ends.in_flight().expire(Instant::now());
                continue;
            }
        };
        if let Err(end) = write_batch(&mut writer, first, calls, &register, ends).await {
            return end;
        }
    }
}

/// The next caller's call already queued that may be written now, keeping
/// back those that must wait for their key.
fn next_admitted(calls: &mut mpsc::UnboundedReceiver<Call>, ends: &Ends<'_>) -> Option<Call> {
    while let Ok(call) = calls.try_recv() {
        if let Some(call) = ends.in_flight().admit(call, Instant::now()) {
            return Some(call);
        }
    }
    None
}

/// Writes `first` and whatever calls are already queued behind it, up to
/// [`WRITE_BATCH`], then flushes.
async fn write_batch<W: AsyncWrite + Unpin>(
    writer: &mut Writer<W>,
    first: Call,
    calls: &mut mpsc::UnboundedReceiver<Call>,
    register: &mpsc::UnboundedSender<Registration>,
    ends: &Ends<'_>,
) -> Result<(), End> {
    let mut next = Some(first);
    let mut written = 0;
    while let Some(call) = next.take() {
        let key = match_key(call.req.op(), call.req.key().map(Key::as_bytes));
        if register.send((key, call.reply)).is_err() {
            return Err(End::Broken);
        }
        ends.silence().sent(Instant::now());
        if let Err(err) = SinkExt::<Request>::feed(writer, call.req).await {
            tracing::debug!(%err, "write failed");
            return Err(broken(&err));
        }
        written += 1;
        if written < WRITE_BATCH {
            next = next_admitted(calls, ends);
        }
    }
    if let Err(err) = SinkExt::<Request>::flush(writer).await {
        tracing::debug!(%err, "flush failed");
        return Err(broken(&err));
    }
    Ok(())
}

/// The reading half: hands each response to the oldest request it matches,
/// sends a grant whose caller is gone back to the node, and lets the next
/// acquire or watch of a key out once the one in flight is answered.
async fn read_answers<R: AsyncRead + Unpin>(
    mut reader: Reader<R>,
    mut registrations: mpsc::UnboundedReceiver<Registration>,
    orphans: mpsc::UnboundedSender<Call>,
    background: &Background,
    ends: &Ends<'_>,
) -> End {
    let mut pending = Pending::default();
    let mut alive = false;
    loop {
        let response = match reader.next().await {
            Some(Ok(response)) => response,
            Some(Err(ResponseError::Io(err))) => {
                tracing::debug!(%err, "read failed");
                return broken(&err);
            }
            Some(Err(err)) => {
                tracing::warn!(%err, "bad response line; dropping the connection");
                return End::Broken;
            }
            None => return End::Broken,
        };
        if let Response::Error(reply) = &response {
            if reply.op.is_none() && crate::tls::is_tls_required(&reply.reason) {
                return End::Tls(
                    "the node serves TLS only: give the client its CA (--tls-ca)".into(),
                );
            }
            if reply.op == Some(Op::Status) && crate::auth::is_auth_required(reply) {
                return End::AuthRequired;
            }
        }
        if let Response::Status(report) = &response {
            // Before the node counts as alive: a caller that finds the
            // connection usable finds its protocol known.
            ends.speaks_12
                .store(crate::protocol::speaks_12(report), Ordering::Release);
        }
        pending.take_registrations(&mut registrations);
        let reply = pending.reply_for(&response);
        ends.silence().heard(Instant::now(), reply.is_some());
        if !alive {
            alive = true;
            ends.alive();
        }
        let Some(reply) = reply else {
            continue;
        };
        let freed = response
            .op()
            .filter(|op| is_waiting_op(*op))
            .map(|op| match_key(op, response.key()));
        if let Err(Ok(Response::Granted { key, token })) = reply.send(Ok(response)) {
            release_orphan(key, token, &orphans, background);
        }
        // After the orphan's release, so that the key is released first.
        let next = freed.and_then(|key| ends.in_flight().answered(&key, Instant::now()));
        if let Some(next) = next {
            // Fails only once the writer is gone: the call's caller is
            // then told the connection broke.
            let _ = orphans.send(next);
        }
    }
}

/// How a connection whose I/O failed with `err` ends: a TLS failure (the
/// node refused the client's certificate, say) is not worth a reconnect.
fn broken(err: &std::io::Error) -> End {
    match crate::tls::tls_failure(err) {
        Some(why) => End::Tls(why),
        None => End::Broken,
    }
}

/// The requests written and not answered yet, by match key, oldest first.
#[derive(Default)]
struct Pending {
    queues: HashMap<MatchKey, VecDeque<Reply>>,
}

impl Pending {
    /// Moves in what the writer registered so far.
    fn take_registrations(&mut self, registrations: &mut mpsc::UnboundedReceiver<Registration>) {
        while let Ok((key, reply)) = registrations.try_recv() {
            self.queues.entry(key).or_default().push_back(reply);
        }
    }

    /// Takes out where `response` goes: the oldest request it matches.
    /// `None` (with a warning) when it matches none.
    fn reply_for(&mut self, response: &Response) -> Option<Reply> {
        let Some(op) = response.op() else {
            tracing::warn!("response without an op; ignored");
            return None;
        };
        let key = match_key(op, response.key());
        let Some(queue) = self.queues.get_mut(&key) else {
            tracing::warn!(?op, "response matches no pending request; ignored");
            return None;
        };
        let reply = queue.pop_front();
        if queue.is_empty() {
            self.queues.remove(&key);
        }
        reply
    }
}

/// Queues the release of a grant nobody waits for any more, and waits for
/// its answer in the background (for `close`).
fn release_orphan(
    key: Key,
    token: Token,
    orphans: &mpsc::UnboundedSender<Call>,
    background: &Background,
) {
    let (reply, answer) = oneshot::channel();
    let req = Request::Release { key, token };
    let reply = Reply::new(reply);
    if orphans.send(Call { req, reply }).is_ok() {
        background.spawn(async move {
            // Dropped unanswered when the connection breaks.
            let _ = tokio::time::timeout(ORPHAN_RELEASE_WAIT, answer).await;
        });
    }
}
