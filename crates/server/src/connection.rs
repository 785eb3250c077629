//! One client connection: reads pipelined requests, answers them, and
//! writes whatever other tasks deliver for its queued acquires.
//!
//! A single task owns the socket, its input and output buffers. Answers are
//! encoded straight into the output buffer, so a burst of requests becomes
//! one write. Grants stay tracked until their bytes are written: a grant
//! that never reaches the socket is released (the ghost-grant rule).

use std::collections::VecDeque;
use std::sync::Arc;

use baton_core::{AcquireOutcome, FastSet, Key, Millis, Token, WaiterId, WatchId};
use baton_proto::{ErrorReply, Op, Request, Response, ServerCodec};
use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::codec::{Decoder, Encoder};
use tokio_util::sync::CancellationToken;

use crate::accept::ServerStream;
use crate::auth::session::{self as auth, Gated, Session};
use crate::deadline::Deadlines;
use crate::delivery::{Delivery, Mailbox};
use crate::evict::Registered;
use crate::listener::NodeInfo;
use crate::locks::SharedLocks;
use crate::metrics::ErrorReason;
use crate::node::Events;
use crate::node::{LockNode, Served};
use crate::request::{change_response, AcquireRef, Answer, LockRequest};
use crate::watching::TOO_MANY_WATCHES;

mod in_order;
mod input_end;
mod opening;
use in_order::InOrder;
use opening::Opened;

/// Output past which the connection stops reading until the client takes
/// its answers: a client that never reads cannot make the node buffer
/// without bound.
const OUTPUT_HIGH_WATER: usize = 256 * 1024;
const READ_CHUNK: usize = 16 * 1024;
const DELIVERY_BATCH: usize = 256;
/// Requests a connection handles before it lets the runtime's other tasks
/// run: about a millisecond of work. A pipelining client always has more
/// to read, and tokio's budget counts socket polls, not requests: left to
/// it, one turn of a flooded connection could take a whole burst, and the
/// tasks queued behind a few such turns (a cluster node's peer links, its
/// heartbeats, the timer) waited longer than a failure timeout.
const REQUESTS_PER_TURN: usize = 1024;
/// A connection whose first bytes are part of a peer hello must finish it
/// within this.
pub(crate) const HELLO_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
/// How long a closing connection may take to write the answers it has
/// already encoded.
const CLOSE_FLUSH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

/// What one step of output did.
enum Out {
    Wrote(usize),
    Flushed,
}

/// Writes some of `output`, or with nothing left to write flushes what a
/// TLS session still holds. Either is cancel-safe, as a `select!` branch
/// must be.
#[inline]
async fn write_or_flush<W: AsyncWrite + Unpin>(
    writer: &mut W,
    output: &[u8],
) -> std::io::Result<Out> {
    if output.is_empty() {
        writer.flush().await.map(|()| Out::Flushed)
    } else {
        writer.write(output).await.map(Out::Wrote)
    }
}

pub(crate) struct Connection<N, S> {
    locks: Arc<SharedLocks<N>>,
    node: Arc<NodeInfo<S>>,
    codec: ServerCodec,
    input: BytesMut,
    output: BytesMut,
    mailbox: Mailbox,
    /// Queued acquires of this connection, cancelled when it closes.
    waiting: FastSet<WaiterId>,
    /// Pending watches of this connection, cancelled when it closes.
    watching: FastSet<WatchId>,
    /// Requests the node answers later (`Served::Later`).
    deferred: usize,
    /// Answers of one op and key that must wait for an earlier one of the
    /// same op and key that the node answers later.
    in_order: InOrder,
    /// Grants encoded into `output` but not yet written, with the stream
    /// position their line ends at.
    unwritten_grants: VecDeque<(u64, Key, Token)>,
    encoded_total: u64,
    written_total: u64,
    events: Events,
    /// With `--auth-file`: who the client is, and the gate on its requests.
    auth: Option<Box<Session>>,
    /// A failed `U` holds the input until its answer goes out.
    held: bool,
    /// The line and idle timeouts.
    deadlines: Deadlines,
    /// Its entry among the node's connections (for eviction), left on drop.
    registered: Registered,
    /// Written bytes may sit in the TLS session until flushed (never set
    /// on plain TCP, where a write is a send).
    unflushed: bool,
    /// Set for TLS: every write is followed by a flush.
    flush_writes: bool,
    /// Requests handled since the task last yielded on purpose
    /// (`REQUESTS_PER_TURN`).
    handled_this_turn: usize,
    /// The client closed its side: acquires and watches still to be read
    /// are not served (see `input_end`).
    input_ended: bool,
}

impl<N: LockNode, S: ServerStream> Connection<N, S> {
    pub(crate) fn new(
        locks: Arc<SharedLocks<N>>,
        node: Arc<NodeInfo<S>>,
        registered: Registered,
    ) -> (Connection<N, S>, mpsc::UnboundedReceiver<Delivery>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let codec = ServerCodec::new(node.config.limits);
        let auth = node.config.auth.clone().map(|a| Box::new(Session::new(a)));
        let deadlines = Deadlines::new(
            node.config.line_timeout,
            node.config.idle_timeout,
            registered.watch.clone(),
            tokio::time::Instant::now(),
        );
        let connection = Connection {
            locks,
            node,
            codec,
            input: BytesMut::with_capacity(READ_CHUNK),
            output: BytesMut::with_capacity(READ_CHUNK),
            mailbox: Mailbox(tx),
            waiting: FastSet::default(),
            watching: FastSet::default(),
            deferred: 0,
            in_order: InOrder::default(),
            unwritten_grants: VecDeque::new(),
            encoded_total: 0,
            written_total: 0,
            events: Vec::new(),
            auth,
            held: false,
            deadlines,
            registered,
            unflushed: false,
            flush_writes: false,
            handled_this_turn: 0,
            input_ended: false,
        };
        (connection, rx)
    }

    /// Serves the connection until the client leaves, the socket fails,
    /// a deadline passes or the node shuts down (or evicts it: `shutdown`
    /// is the connection's own token); then cleans up after it.
    pub(crate) async fn serve(
        mut self,
        stream: S,
        mut deliveries: mpsc::UnboundedReceiver<Delivery>,
        shutdown: CancellationToken,
    ) {
        if let Some(session) = &mut self.auth {
            session.set_peer(stream.peer_addr().ok().map(|a| a.ip()));
        }
        match self.open(stream, &shutdown).await {
            None => return,
            Some(Opened::Plain(stream)) => {
                let (reader, writer) = stream.into_split();
                self.run(reader, writer, &mut deliveries, &shutdown).await;
            }
            Some(Opened::Tls(stream)) => {
                // Split by a lock: TLS reads and writes share one session.
                let (reader, writer) = tokio::io::split(stream);
                self.run(reader, writer, &mut deliveries, &shutdown).await;
            }
        }
        self.close(deliveries);
    }

    async fn run<R, W>(
        &mut self,
        reader: R,
        mut writer: W,
        deliveries: &mut mpsc::UnboundedReceiver<Delivery>,
        shutdown: &CancellationToken,
    ) where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
    {
        self.pump(reader, &mut writer, deliveries, shutdown).await;
        if self.registered.watch.evicted() {
            self.output.extend_from_slice(opening::EVICTED);
        }
        self.flush_before_close(&mut writer).await;
        let _ = writer.shutdown().await;
    }

    /// Reads requests, writes answers and takes deliveries until the client
    /// has closed its side and has every answer it is due, the socket fails
    /// or the node shuts down.
    async fn pump<R, W>(
        &mut self,
        mut reader: R,
        writer: &mut W,
        deliveries: &mut mpsc::UnboundedReceiver<Delivery>,
        shutdown: &CancellationToken,
    ) where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
    {
        let mut batch = Vec::with_capacity(DELIVERY_BATCH);
        let mut reading = true;
        // Made once: a fresh `cancelled()` per turn would register and
        // unregister a waiter on the token's mutex for every burst.
        let stopping = shutdown.cancelled();
        tokio::pin!(stopping);
        // One sleep for every deadline, reset only when it fires.
        let check = tokio::time::sleep_until(self.deadlines.next_check(Instant::now()));
        tokio::pin!(check);
        // The first bytes were read while telling what the connection is.
        self.keep_room_to_read();
        loop {
            let may_read = reading && self.may_read();
            let room = self.input.capacity() - self.input.len();
            tokio::select! {
                biased;
                _ = &mut stopping => break,
                n = deliveries.recv_many(&mut batch, DELIVERY_BATCH) => {
                    self.on_deliveries(n, deliveries.len(), &mut batch);
                }
                read = reader.read_buf(&mut self.input), if may_read => match read {
                    Ok(0) => {
                        reading = false;
                        self.input_ended = true;
                    }
                    Ok(n) => {
                        // Before serving: the client's close may already
                        // be there, behind what drained the socket.
                        if n < room && input_end::ended_now(&mut reader, &mut self.input) {
                            reading = false;
                            self.input_ended = true;
                        }
                        self.on_input();
                    }
                    Err(error) => {
                        tracing::debug!(%error, "read failed");
                        break;
                    }
                },
                out = write_or_flush(writer, &self.output), if !self.output.is_empty() || self.unflushed => match out {
                    Ok(Out::Wrote(0)) => break,
                    Ok(Out::Wrote(n)) => self.on_written(n),
                    Ok(Out::Flushed) => self.unflushed = false,
                    Err(error) => {
                        tracing::debug!(%error, "write failed");
                        break;
                    }
                },
                () = &mut check => {
                    let now = Instant::now();
                    let held_back = !self.may_read();
                    if let Some(expired) = self.deadlines.check(now, self.busy(), held_back) {
                        tracing::debug!(?expired, "closing a connection past its deadline");
                        self.output.extend_from_slice(expired.farewell());
                        break;
                    }
                    check.as_mut().reset(self.deadlines.next_check(now));
                }
            }
            if !reading && self.output.is_empty() && self.deferred == 0 {
                // The client closed its side and has every answer it is due:
                // those still in progress too (a Raft commit or read round),
                // since every request is answered. Queued acquires and
                // waiting watches are not due: they leave with the close.
                break;
            }
            self.keep_room_to_read();
            if self.handled_this_turn >= REQUESTS_PER_TURN {
                self.handled_this_turn = 0;
                tokio::task::yield_now().await;
            }
        }
    }

    /// Whether the connection may read more requests, as far as its answers
    /// go: not while it has too many to write, nor too many to come. That
    /// keeps the output buffer and the mailbox bounded (see `Mailbox`).
    #[inline]
    fn may_read(&self) -> bool {
        self.output.len() < OUTPUT_HIGH_WATER
            && self.deferred < self.node.config.max_pending
            && self.in_order.kept() < self.node.config.max_pending
            && !self.held
    }

    /// Takes `received` deliveries from `batch`; `still_queued` are left
    /// in the channel.
    #[inline]
    fn on_deliveries(&mut self, received: usize, still_queued: usize, batch: &mut Vec<Delivery>) {
        // Never 0: this task holds a sender in `mailbox`.
        debug_assert!(
            received + still_queued <= self.waiting.len() + self.watching.len() + self.deferred,
            "more deliveries than requests waiting for one"
        );
        for delivery in batch.drain(..) {
            self.on_delivery(delivery);
        }
    }

    /// Whether the connection has anything pending: the idle timeout
    /// does not run while it has.
    fn busy(&self) -> bool {
        !self.waiting.is_empty()
            || !self.watching.is_empty()
            || self.deferred > 0
            || !self.output.is_empty()
    }

    #[inline]
    fn keep_room_to_read(&mut self) {
        if self.input.capacity() - self.input.len() < 1024 {
            self.input.reserve(READ_CHUNK);
        }
    }

    /// Whatever is already encoded goes out if it can, quickly.
    async fn flush_before_close<W: AsyncWrite + Unpin>(&mut self, writer: &mut W) {
        if self.output.is_empty() && !self.unflushed {
            return;
        }
        let flush = async {
            while !self.output.is_empty() {
                match writer.write(&self.output).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => self.on_written(n),
                }
            }
            let _ = writer.flush().await;
        };
        let _ = tokio::time::timeout(CLOSE_FLUSH_TIMEOUT, flush).await;
    }

    fn on_input(&mut self) {
        // One clock read for the whole burst: every request in it was
        // received at once, and the read showed up in profiles.
        let now = self.locks.clock().now();
        let mut finished = false;
        while !self.held {
            match self.codec.decode(&mut self.input) {
                Ok(Some(Ok(request))) => {
                    finished = true;
                    self.on_request(request, now);
                }
                Ok(Some(Err(error))) => {
                    finished = true;
                    self.locks.metrics().error(ErrorReason::Malformed);
                    self.answer(&Response::Error(error.to_reply()));
                }
                Ok(None) => break,
                Err(error) => {
                    // The request codec reports malformed lines as items;
                    // an error here would be a codec bug: drop the input.
                    tracing::warn!(%error, "request decoder failed");
                    self.input.clear();
                    break;
                }
            }
        }
        let mid_line = self.codec.mid_line(&self.input);
        self.deadlines
            .after_input(finished, mid_line, self.codec.discarding());
    }

    fn on_request(&mut self, request: Request, now: Millis) {
        self.handled_this_turn += 1;
        if let Request::Auth { .. } = request {
            self.locks.metrics().request(Op::Auth);
        }
        if let Some(session) = &mut self.auth {
            if let Some(gated) = session.gate(&request) {
                self.on_gated(gated);
                return;
            }
        }
        match request {
            Request::Status => {
                let report = self.node.status(self.locks.status());
                self.answer(&Response::Status(report));
            }
            // Only without `--auth-file`: with it the session answers `U`.
            Request::Auth { user, .. } => self.answer(&auth::not_enabled(&user)),
            lock_request => self.on_lock_request(lock_request, now),
        }
    }

    /// Answers a request the session refused, now or after a hold.
    #[cold]
    fn on_gated(&mut self, gated: Gated) {
        if !matches!(gated, Gated::Answer(Response::Authenticated { .. })) {
            self.locks.metrics().error(ErrorReason::Unauthorized);
        }
        match gated {
            Gated::Answer(response) => self.answer(&response),
            Gated::Hold(response, delay) => {
                self.deferred += 1;
                self.held = true;
                auth::answer_later(&self.mailbox, response, delay);
            }
        }
    }

    /// A request to the lock logic: handed to the node as a value, its
    /// answer written or awaited.
    #[inline]
    fn on_lock_request(&mut self, line: Request, now: Millis) {
        if self.input_ended && input_end::skipped_after_end(&line) {
            tracing::debug!(op = ?line.op(), "not served: the client closed the connection");
            return;
        }
        let Some(mut request) = LockRequest::from_line(&line) else {
            return;
        };
        match &mut request {
            LockRequest::Acquire(AcquireRef { key, wait_ms, .. }) => {
                if self.waiting.len() + self.deferred >= self.node.config.max_pending {
                    self.refuse_acquire(key);
                    return;
                }
                // docs/protocol.md: `wait 0` waits as long as the node
                // allows, its maximum wait, then `T`; never without limit.
                if *wait_ms == 0 {
                    *wait_ms = self.node.config.limits.max_wait_ms;
                }
            }
            LockRequest::Watch { key, wait_ms, .. } => {
                if self.watching.len() >= self.node.config.max_watches_per_connection {
                    self.locks.metrics().error(ErrorReason::TooManyWatches);
                    return self.refuse(Op::Watch, key, TOO_MANY_WATCHES.to_owned());
                }
                if *wait_ms == 0 {
                    *wait_ms = self.node.config.limits.max_wait_ms;
                }
            }
            _ => {}
        }
        let op = request.op();
        let served = self
            .locks
            .handle(request, now, &self.mailbox, &mut self.events);
        if let Some(key) = line.into_key() {
            self.on_served(op, key, served);
        }
    }

    /// Writes the answer to a request of kind `op` on `key`, or notes
    /// that it comes later.
    #[inline]
    fn on_served(&mut self, op: Op, key: Key, served: Served<Answer>) {
        let response = match served {
            Served::Later => {
                self.deferred += 1;
                self.in_order.later(op, &key);
                return;
            }
            Served::Redirect(addr) => Response::Moved { op, key, addr },
            Served::Done(Answer::Acquired(AcquireOutcome::Granted { token })) => {
                return self.answer_grant(key, token);
            }
            Served::Done(Answer::Acquired(AcquireOutcome::Queued { id })) => {
                self.waiting.insert(id);
                return;
            }
            Served::Done(Answer::Acquired(AcquireOutcome::Refused(refusal))) => {
                Response::Error(ErrorReply {
                    op: Some(op),
                    key: Some(key.as_bytes().to_vec()),
                    reason: refusal.reason().to_string(),
                })
            }
            Served::Done(Answer::Changed(outcome)) => change_response(op, key, outcome),
            Served::Done(Answer::Queried(state)) => Response::Queried { key, state },
            Served::Done(Answer::Watched(state)) => Response::Watched { key, state },
            Served::Done(Answer::Watching(id)) => {
                self.watching.insert(id);
                return;
            }
            Served::Done(Answer::Refused(reason)) => return self.refuse(op, &key, reason),
        };
        self.answer(&response);
    }

    /// Answers `E <op> <key> <reason>`.
    #[cold]
    fn refuse(&mut self, op: Op, key: &Key, reason: String) {
        let reply = ErrorReply {
            op: Some(op),
            key: Some(key.as_bytes().to_vec()),
            reason,
        };
        self.answer(&Response::Error(reply));
    }

    /// Answers an acquire over the connection's limit of pending requests.
    #[cold]
    fn refuse_acquire(&mut self, key: &Key) {
        let reply = ErrorReply {
            op: Some(Op::Acquire),
            key: Some(key.as_bytes().to_vec()),
            reason: format!(
                "too many pending requests on this connection (max {})",
                self.node.config.max_pending
            ),
        };
        self.answer(&Response::Error(reply));
    }

    fn on_delivery(&mut self, delivery: Delivery) {
        match delivery {
            Delivery::Reply(response) => {
                self.deferred = self.deferred.saturating_sub(1);
                match self.in_order.arrived(response) {
                    Some(Response::Granted { key, token }) => self.answer_grant(key, token),
                    Some(other) => self.encode(&other),
                    None => {
                        while let Some(answer) = self.in_order.next_ready() {
                            self.encode(&answer);
                        }
                    }
                }
            }
            Delivery::Granted { id, key, token } => {
                self.waiting.remove(&id);
                self.answer_grant(key, token);
            }
            Delivery::TimedOut { id, key } => {
                self.waiting.remove(&id);
                self.answer(&Response::TimedOut { key });
            }
            Delivery::Resume(response) => {
                self.deferred = self.deferred.saturating_sub(1);
                self.held = false;
                self.answer(&response);
                // What arrived during the hold is served now.
                self.on_input();
            }
            Delivery::Watched { id, response } => {
                self.watching.remove(&id);
                self.answer(&response);
            }
            Delivery::Moved { id, key, to } => {
                self.waiting.remove(&id);
                self.answer(&Response::Moved {
                    op: Op::Acquire,
                    key,
                    addr: to,
                });
            }
        }
    }

    /// Writes an answer known now, unless an earlier request of its op and
    /// key is still to be answered: it then waits for that one.
    fn answer(&mut self, response: &Response) {
        if !self.in_order.keeps(response) {
            self.encode(response);
        }
    }

    fn encode(&mut self, response: &Response) {
        let before = self.output.len();
        // Encoding into a BytesMut cannot fail.
        let _ = self.codec.encode(response, &mut self.output);
        self.encoded_total += (self.output.len() - before) as u64;
    }

    fn answer_grant(&mut self, key: Key, token: Token) {
        let response = Response::Granted { key, token };
        self.encode(&response);
        if let Response::Granted { key, token } = response {
            self.unwritten_grants
                .push_back((self.encoded_total, key, token));
        }
    }

    fn on_written(&mut self, n: usize) {
        self.unflushed = self.flush_writes;
        let _ = self.output.split_to(n);
        self.written_total += n as u64;
        while let Some((end, _, _)) = self.unwritten_grants.front() {
            if *end > self.written_total {
                break;
            }
            self.unwritten_grants.pop_front();
        }
    }

    /// Leaves no trace of the connection in the lock state but the grants
    /// it delivered: queued acquires leave their queues, and grants that
    /// never reached the client are released.
    fn close(mut self, mut deliveries: mpsc::UnboundedReceiver<Delivery>) {
        self.locks
            .cancel_all(self.waiting.drain(), self.watching.drain());
        deliveries.close();
        let mut ghosts: Vec<(Key, Token)> = self
            .unwritten_grants
            .drain(..)
            .map(|(_, key, token)| (key, token))
            .collect();
        while let Ok(delivery) = deliveries.try_recv() {
            match delivery {
                Delivery::Granted { key, token, .. }
                | Delivery::Reply(Response::Granted { key, token }) => ghosts.push((key, token)),
                _ => {}
            }
        }
        if !ghosts.is_empty() {
            self.locks.release_ghosts(ghosts);
        }
    }
}
