//! Watching a key (`W`, protocol 1.2): a [`Watch`] is a stream of the
//! key's states, one per change of its holders or their values. Each `W`
//! says which state the client last saw, so a `W` sent again (after a
//! redirect, a broken connection, a wait that ran out) loses nothing.

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use baton_core::{Key, KeyState, StateTag};
use baton_proto::{Op, Request, Response};
use futures_util::Stream;
use tokio::time::Instant;

use crate::client::{line, Client};
use crate::duration::ceil_ms;
use crate::error::{Error, Result};
use crate::slot::CallError;

/// The wait each `W` asks for. A watch whose stream was dropped stays on
/// the node until its `W` is answered (the protocol has no cancel), and
/// counts against the node's watch limits until then: a short wait bounds
/// that, and sending `W` again after it costs one line each way.
pub(crate) const WATCH_WAIT: Duration = Duration::from_secs(30);
/// How a node refuses a wait above its `--max-wait`: the watch then asks
/// for the node's maximum (`0`), which is shorter than [`WATCH_WAIT`].
const WAIT_TOO_LONG: &str = "wait exceeds the maximum";
/// Pause before sending again once every connection broke in turn under
/// the same `W`, so connections that break as soon as they are used
/// cannot spin the watch.
const BROKEN_PAUSE: Duration = Duration::from_millis(200);

/// A stream of one key's states: an item each time its holders or their
/// values change (a grant, a release, an expiry, a hand-over, a value
/// set). A change of the waiters' count or of a lease alone is not one.
/// Made by [`Client::watch`] and [`Client::watch_since`].
///
/// Redirects are followed, and a `W` whose connection breaks (or whose
/// node stops answering) is sent again on another connection with the
/// last state seen, so no change is missed across a failover; states in
/// between two items may be skipped, as with any watch, never the latest.
/// The stream ends after its first error: [`Error::NoServer`] when no
/// connection comes back within a reconnect round, [`Error::NotServing`]
/// when no node serves for the request timeout, [`Error::Rejected`] for
/// a node's refusal (a 1.1 node's, or `too many watches`),
/// [`Error::Unsupported`] when the nodes speak protocol 1.1 only,
/// [`Error::Closed`]. Resume with [`Client::watch_since`] and the last
/// state's [`tag`](KeyState::tag).
///
/// Dropping the stream stops it at once: nothing is sent again, and the
/// node answers the `W` still pending within 30 s, an answer the client
/// drops.
///
/// ```no_run
/// # async fn demo(client: baton_client::Client) -> baton_client::Result<()> {
/// use baton_client::KeyStateExt;
/// use futures_util::StreamExt;
///
/// let mut changes = client.watch("orders/42")?;
/// while let Some(state) = changes.next().await {
///     let state = state?;
///     println!("{} holder(s), tag {}", state.holder_count(), state.tag());
/// }
/// # Ok(())
/// # }
/// ```
pub struct Watch {
    key: Key,
    states: Pin<Box<dyn Stream<Item = Result<KeyState>> + Send>>,
}

impl fmt::Debug for Watch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Watch").field("key", &self.key).finish()
    }
}

impl Watch {
    /// The key watched.
    pub fn key(&self) -> &Key {
        &self.key
    }
}

impl Stream for Watch {
    type Item = Result<KeyState>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.states.as_mut().poll_next(cx)
    }
}

/// A watch's progress: what it last saw.
struct Watching {
    client: Client,
    key: Key,
    /// `None` until the first state: it is read with `Q`, and is the
    /// stream's first item.
    seen: Option<StateTag>,
    /// The wait each `W` asks for, in ms: [`WATCH_WAIT`], or 0 (the node's
    /// maximum) once a node said that is shorter.
    wait_ms: u64,
}

impl Watching {
    /// The next state whose tag differs from the last one seen.
    async fn next_change(&mut self) -> Result<KeyState> {
        loop {
            let state = match self.seen {
                None => {
                    // A node that speaks 1.1 only answers this Q, then
                    // refuses every W: said before the first item.
                    if let Some(slot) = self.client.pool.pick_now() {
                        self.client.slot_for_request(slot, Some("a watch"), false)?;
                    }
                    self.client.inspect(&self.key).await?
                }
                Some(seen) => {
                    self.client
                        .watch_once(&self.key, seen, &mut self.wait_ms)
                        .await?
                }
            };
            let tag = state.tag();
            // A wait that ran out answers the state unchanged.
            if self.seen != Some(tag) {
                self.seen = Some(tag);
                return Ok(state);
            }
        }
    }
}

impl Client {
    /// Watches `key`: the stream's first item is the key's state now, then
    /// one item per change (see [`Watch`]). Fails at once only for a bad
    /// key or a closed client.
    pub fn watch(&self, key: impl AsRef<[u8]>) -> Result<Watch> {
        self.start_watch(key.as_ref(), None)
    }

    /// Watches `key` from a state seen before (a [`KeyState::tag`]): the
    /// first item comes once the key's state differs from it, which may be
    /// at once.
    pub fn watch_since(&self, key: impl AsRef<[u8]>, seen: StateTag) -> Result<Watch> {
        self.start_watch(key.as_ref(), Some(seen))
    }

    fn start_watch(&self, key: &[u8], seen: Option<StateTag>) -> Result<Watch> {
        self.check_open()?;
        let key = Key::new(key)?;
        let watching = Watching {
            // Not the program's handle: a watch left running does not hide
            // that the program dropped its client.
            client: self.for_guard(),
            key: key.clone(),
            seen,
            wait_ms: ceil_ms(WATCH_WAIT),
        };
        let states = futures_util::stream::unfold(Some(watching), |watching| async move {
            let mut watching = watching?;
            match watching.next_change().await {
                Ok(state) => Some((Ok(state), Some(watching))),
                // The error is the last item.
                Err(err) => Some((Err(err), None)),
            }
        });
        Ok(Watch {
            key,
            states: Box::pin(states),
        })
    }

    /// One `W <key> <wait> <seen>` until a node answers it: redirects
    /// followed, sent again on another connection when its own breaks, and
    /// with the node's maximum wait when it refuses `wait_ms` as too long.
    async fn watch_once(&self, key: &Key, seen: StateTag, wait_ms: &mut u64) -> Result<KeyState> {
        let mut hops = 0;
        let mut redirect = None;
        let mut not_serving_since: Option<Instant> = None;
        let mut broken = 0;
        loop {
            self.check_open()?;
            let redirected = redirect.is_some();
            let slot = match redirect.take() {
                Some(slot) => slot,
                None => tokio::select! {
                    slot = self.pool.pick(None) => slot.ok_or_else(|| self.pool.no_server())?,
                    () = self.life.closing() => return Err(Error::Closed),
                },
            };
            let slot = self.slot_for_request(slot, Some("a watch"), redirected)?;
            let until = (*wait_ms > 0).then(|| Instant::now() + Duration::from_millis(*wait_ms));
            // A wait that ran out while an earlier watch of the key had its
            // turn: the state did not change for this one.
            let Some((slot, turn)) = self.in_turn(slot, Op::Watch, key, until).await? else {
                continue;
            };
            let req = Request::Watch {
                key: key.clone(),
                wait_ms: *wait_ms,
                seen,
            };
            // The node answers when the wait runs out; the extra time only
            // covers the trip.
            let limit = WATCH_WAIT + self.pool.request_timeout;
            let answer = tokio::select! {
                biased;
                answer = slot.call_in_turn(req, Some(limit), turn) => answer,
                () = self.life.closing() => return Err(Error::Closed),
            };
            match answer {
                Ok(Response::Watched { state, .. }) => return Ok(state),
                Ok(Response::Moved { addr, .. }) => {
                    if addr.is_none() {
                        let since = *not_serving_since.get_or_insert_with(Instant::now);
                        if since.elapsed() >= self.pool.request_timeout {
                            return Err(Error::NotServing);
                        }
                    } else {
                        not_serving_since = None;
                    }
                    redirect = self.follow(addr.as_deref(), &mut hops, None).await;
                }
                Ok(Response::Error(reply))
                    if *wait_ms != 0 && reply.reason.starts_with(WAIT_TOO_LONG) =>
                {
                    *wait_ms = 0;
                }
                Ok(Response::Error(reply)) => return Err(crate::auth::rejected(reply)),
                Ok(other) => return Err(Error::Unexpected(line(&other))),
                Err(CallError::Unanswered(after)) => return Err(Error::Unanswered { after }),
                // It waited its whole wait behind another watch of the key:
                // as a wait that ran out, the state did not change for it.
                Err(CallError::WaitRanOutUnsent) => {}
                Err(CallError::Broken) if self.life.is_closing() => return Err(Error::Closed),
                Err(CallError::Broken) => {
                    tracing::debug!(%key, addr = %slot.addr, "connection broke during a watch; sending it again");
                    broken += 1;
                    if broken >= self.pool.len() {
                        tokio::time::sleep(BROKEN_PAUSE).await;
                    }
                }
            }
        }
    }
}
