//! A registered connection: one server address, a supervisor task that
//! keeps a socket to it open, and the channel callers use to reach it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use baton_proto::{Request, Response};
use futures_util::FutureExt;
use tokio::sync::{mpsc, oneshot, watch, Notify};
use tokio::time::Instant;

use crate::auth::{self, AuthOutcome, Credentials};
use crate::connection::{self, closed, Call, End, Reply, Serving, Unsent};
use crate::error::Error;
use crate::lifecycle::Background;
use crate::liveness::Liveness;
use crate::tls::{self, ConnectError};
use crate::turns::{ConnId, Turn};

/// How long a broken connection stays out before the next reconnect
/// attempt (unless a redirect names its node: see [`Slot::dial_now`]).
pub(crate) const RECONNECT_INTERVAL: Duration = Duration::from_secs(3);
/// A node is dialled at most this often, however many redirects name it,
/// so that one that keeps failing is not dialled in a loop.
const REDIRECT_DIAL_GAP: Duration = Duration::from_secs(1);

/// Why a call on one connection got no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CallError {
    /// The connection is down, broke before the answer came, or was given
    /// up because its node stopped answering.
    Broken,
    /// The connection is up (its node answers probes) but this answer did
    /// not come within the limit given.
    Unanswered(Duration),
    /// An acquire or a watch waited in the client behind another of its key
    /// in flight on the connection, and its wait ran out there: never sent.
    WaitRanOutUnsent,
}

/// What the supervisor publishes about its connection.
#[derive(Debug, Default)]
pub(crate) struct SlotState {
    usable: AtomicBool,
    attempted: AtomicBool,
    /// The last attempt reached the node, which refused the credentials.
    auth_failed: AtomicBool,
    auth_not_enabled: AtomicBool,
    /// The last attempt reached a node that requires credentials the
    /// client does not have.
    auth_required: AtomicBool,
    /// Why the last attempt failed, when it failed for a TLS reason.
    tls_failure: Mutex<Option<String>>,
    /// Asks a supervisor waiting to redial to dial at once.
    dial_now: Notify,
    /// The node's last `S` answer said it speaks protocol 1.2.
    speaks_12: AtomicBool,
}

impl SlotState {
    fn set_tls_failure(&self, why: Option<String>) {
        *self
            .tls_failure
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = why;
    }
}

/// What every connection of one client shares: the signal that the client
/// was closed, and where background work is tracked.
#[derive(Debug, Clone)]
pub(crate) struct Shared {
    pub(crate) connect_timeout: Duration,
    pub(crate) changed: Arc<watch::Sender<u64>>,
    pub(crate) shutdown: watch::Receiver<bool>,
    pub(crate) background: Arc<Background>,
    /// Sent first on every connection, when given.
    pub(crate) credentials: Option<Arc<Credentials>>,
    /// TLS to every node, when the builder was given it.
    pub(crate) tls: Option<Arc<rustls::ClientConfig>>,
    /// When a silent connection is given up.
    pub(crate) liveness: Liveness,
}

/// A connection as the pool sees it.
#[derive(Debug)]
pub(crate) struct Slot {
    pub(crate) addr: String,
    /// Names it among the client's connections, for [`crate::turns`].
    pub(crate) id: ConnId,
    calls: mpsc::UnboundedSender<Call>,
    state: Arc<SlotState>,
}

/// The id of the next connection registered.
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

impl Slot {
    /// Registers a connection to `addr` and starts its supervisor.
    /// `shared.changed` is bumped whenever a connection comes up or gives up
    /// its first try, so callers waiting for a usable connection wake up.
    pub(crate) fn spawn(addr: String, shared: Shared) -> Arc<Slot> {
        let (calls, rx) = mpsc::unbounded_channel();
        let state = Arc::new(SlotState::default());
        tokio::spawn(supervise(addr.clone(), shared, Arc::clone(&state), rx));
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        Arc::new(Slot {
            addr,
            id,
            calls,
            state,
        })
    }

    /// Up, and its node answered since it was dialled.
    pub(crate) fn is_usable(&self) -> bool {
        self.state.usable.load(Ordering::Acquire)
    }

    /// Whether the node speaks protocol 1.2, as its last `S` answer said.
    pub(crate) fn speaks_12(&self) -> bool {
        self.state.speaks_12.load(Ordering::Acquire)
    }

    /// Dials now if the connection is down and waiting to redial, and its
    /// last dial began at least [`REDIRECT_DIAL_GAP`] ago (else the request
    /// is dropped). For a redirect to this node, whose call should be sent
    /// right after (it waits for the dial).
    pub(crate) fn dial_now(&self) {
        self.state.dial_now.notify_one();
    }

    /// Why the last attempt failed, if it was for a TLS reason.
    pub(crate) fn tls_failure(&self) -> Option<String> {
        self.state
            .tls_failure
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// True once the first connection attempt finished, either way.
    pub(crate) fn attempted(&self) -> bool {
        self.state.attempted.load(Ordering::Acquire)
    }

    /// The error the node's refusal of the credentials stands for, if the
    /// last attempt ended that way.
    pub(crate) fn auth_refusal(&self) -> Option<Error> {
        if self.state.auth_failed.load(Ordering::Acquire) {
            Some(Error::AuthenticationFailed)
        } else if self.state.auth_not_enabled.load(Ordering::Acquire) {
            Some(Error::AuthenticationNotEnabled)
        } else if self.state.auth_required.load(Ordering::Acquire) {
            Some(Error::AuthenticationRequired)
        } else {
            None
        }
    }

    /// Sends one request and waits for its answer, at most `limit` if given.
    pub(crate) async fn call(
        &self,
        req: Request,
        limit: Option<Duration>,
    ) -> Result<Response, CallError> {
        self.call_in_turn(req, limit, None).await
    }

    /// [`Slot::call`] for an acquire or a watch that took its `turn` of
    /// its key on this connection (see [`crate::turns`]).
    pub(crate) async fn call_in_turn(
        &self,
        req: Request,
        limit: Option<Duration>,
        turn: Option<Turn>,
    ) -> Result<Response, CallError> {
        let (reply, answer) = oneshot::channel();
        let reply = Reply::in_turn(reply, turn);
        self.calls
            .send(Call { req, reply })
            .map_err(|_| CallError::Broken)?;
        let answer = match limit {
            None => answer.await,
            Some(limit) => match tokio::time::timeout(limit, answer).await {
                Ok(answer) => answer,
                Err(_) => return Err(CallError::Unanswered(limit)),
            },
        };
        match answer {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(Unsent)) => Err(CallError::WaitRanOutUnsent),
            Err(_) => Err(CallError::Broken),
        }
    }
}

/// Records why the node would not take the credentials.
fn note_refusal(state: &SlotState, addr: &str, outcome: &AuthOutcome) {
    let (failed, not_enabled) = match outcome {
        AuthOutcome::Failed => (true, false),
        AuthOutcome::NotEnabled => (false, true),
        AuthOutcome::Broken | AuthOutcome::TlsRequired(_) => (false, false),
    };
    if failed || not_enabled {
        tracing::warn!(%addr, ?outcome, "the node did not accept the credentials");
    }
    state.auth_failed.store(failed, Ordering::Release);
    state.auth_not_enabled.store(not_enabled, Ordering::Release);
}

/// Sends `U` first on a fresh connection, plain or TLS; the stream back
/// if the node took the credentials.
async fn authenticated(
    mut stream: tls::Connected,
    credentials: &Credentials,
    within: Duration,
    state: &SlotState,
    addr: &str,
) -> Result<tls::Connected, ConnectError> {
    let outcome = match &mut stream {
        tls::Connected::Plain(plain) => auth::authenticate(plain, credentials, within).await,
        tls::Connected::Tls(secure) => {
            auth::authenticate(secure.as_mut(), credentials, within).await
        }
    };
    match outcome {
        Ok(()) => Ok(stream),
        // A TLS node answers a plaintext `U` that it wants TLS.
        Err(AuthOutcome::TlsRequired(why)) => Err(ConnectError::Tls(why)),
        Err(outcome) => {
            note_refusal(state, addr, &outcome);
            Err(ConnectError::Io(std::io::Error::other(
                "authentication did not succeed",
            )))
        }
    }
}

/// Serves a connection that is up (and authenticated) until it ends; it
/// is usable from the node's first answer. Publishes its state on the way.
/// How it ended.
async fn serve_connected(
    stream: tls::Connected,
    addr: &str,
    state: &SlotState,
    changed: &watch::Sender<u64>,
    serving: Serving<'_>,
) -> End {
    let liveness = serving.liveness;
    let answered = AtomicBool::new(false);
    let on_alive = || {
        answered.store(true, Ordering::Release);
        state.auth_failed.store(false, Ordering::Release);
        state.auth_not_enabled.store(false, Ordering::Release);
        state.auth_required.store(false, Ordering::Release);
        state.set_tls_failure(None);
        state.usable.store(true, Ordering::Release);
        state.attempted.store(true, Ordering::Release);
        publish(changed);
        tracing::debug!(%addr, "connected");
    };
    let end = match stream {
        tls::Connected::Plain(stream) => {
            let (read, write) = stream.into_split();
            connection::serve(read, write, serving, on_alive).await
        }
        tls::Connected::Tls(stream) => {
            let (read, write) = tokio::io::split(stream);
            connection::serve(read, write, serving, on_alive).await
        }
    };
    state.usable.store(false, Ordering::Release);
    let answered = answered.load(Ordering::Acquire);
    match &end {
        End::ClientGone => {}
        End::Broken => tracing::info!(%addr, "connection lost; reconnecting in the background"),
        End::Unresponsive if answered => tracing::warn!(
            %addr,
            after_ms = liveness.unresponsive_after.as_millis(),
            "the node stopped answering; dropped the connection, reconnecting in the background"
        ),
        // A redial to a node still frozen: said once above, when it froze.
        End::Unresponsive => tracing::debug!(%addr, "the node does not answer a new connection"),
        End::Tls(why) => {
            tracing::warn!(%addr, %why, "TLS failure");
            state.set_tls_failure(Some(why.clone()));
        }
        End::AuthRequired => {
            tracing::warn!(%addr, "the node requires authentication: give the client credentials");
            state.auth_required.store(true, Ordering::Release);
        }
    }
    publish(changed);
    end
}

fn publish(changed: &watch::Sender<u64>) {
    changed.send_modify(|generation| *generation = generation.wrapping_add(1));
}

/// Connects, serves, and after a break reconnects every
/// [`RECONNECT_INTERVAL`], until the client is dropped or closed.
async fn supervise(
    addr: String,
    shared: Shared,
    state: Arc<SlotState>,
    mut calls: mpsc::UnboundedReceiver<Call>,
) {
    let Shared {
        connect_timeout,
        changed,
        mut shutdown,
        background,
        credentials,
        tls,
        liveness,
    } = shared;
    loop {
        if *shutdown.borrow() {
            state.attempted.store(true, Ordering::Release);
            publish(&changed);
            return;
        }
        // This dial answers any request for one made so far.
        let _ = state.dial_now.notified().now_or_never();
        let dialled_at = Instant::now();
        let connect = tokio::time::timeout(connect_timeout, tls::connect(&addr, tls.as_ref()));
        let connected = tokio::select! {
            connected = connect => connected,
            () = closed(&mut shutdown) => continue,
        };
        let connected = match (connected, &credentials) {
            (Ok(Ok(stream)), Some(credentials)) => {
                Ok(authenticated(stream, credentials, connect_timeout, &state, &addr).await)
            }
            (other, _) => other,
        };
        match connected {
            Ok(Ok(stream)) => {
                let serving = Serving {
                    calls: &mut calls,
                    shutdown: &mut shutdown,
                    background: &background,
                    liveness,
                    speaks_12: &state.speaks_12,
                };
                let end = serve_connected(stream, &addr, &state, &changed, serving).await;
                if end == End::ClientGone {
                    return;
                }
            }
            Ok(Err(ConnectError::Tls(why))) => {
                tracing::warn!(%addr, %why, "TLS failure");
                state.set_tls_failure(Some(why));
            }
            Ok(Err(ConnectError::Io(err))) => {
                state.set_tls_failure(None);
                tracing::debug!(%addr, %err, "connect failed")
            }
            Err(_) => tracing::debug!(%addr, "connect timed out"),
        }
        if !state.attempted.swap(true, Ordering::AcqRel) {
            publish(&changed);
        }
        let early = dialled_at + REDIRECT_DIAL_GAP;
        if !pause_before_redial(&mut calls, &mut shutdown, &state.dial_now, early).await {
            return;
        }
    }
}

/// Between two dials: calls that come fail at once (dropping them tells
/// the caller, who fails over instead of waiting for the reconnect), until
/// the pause ends or `dial_now` asks for a dial, from `early` on (a request
/// before then is dropped); the calls sent after that request wait for the
/// dial. False once the client is gone.
async fn pause_before_redial(
    calls: &mut mpsc::UnboundedReceiver<Call>,
    shutdown: &mut watch::Receiver<bool>,
    dial_now: &Notify,
    early: Instant,
) -> bool {
    while calls.try_recv().is_ok() {}
    let pause = tokio::time::sleep(RECONNECT_INTERVAL);
    tokio::pin!(pause);
    let dial_now = async {
        tokio::time::sleep_until(early).await;
        let _ = dial_now.notified().now_or_never();
        dial_now.notified().await
    };
    tokio::pin!(dial_now);
    loop {
        tokio::select! {
            // Before the calls: a call sent right after asking for the dial
            // must not be dropped as if the pause went on.
            biased;
            () = &mut dial_now => return true,
            () = &mut pause => return true,
            () = closed(shutdown) => return true,
            call = calls.recv() => if call.is_none() { return false },
        }
    }
}
