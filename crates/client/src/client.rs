//! The client handle and the request logic: failover, redirects, retries.

use std::sync::Arc;
use std::time::Duration;

use baton_core::{Key, Token};
use baton_proto::{Request, Response, StatusReport};
use bytes::BytesMut;
use tokio::time::Instant;

use crate::builder::ClientBuilder;
use crate::duration::{ceil_ms, lease_ms};
use crate::error::{Error, Result};
use crate::guard::Guard;
use crate::pool::Pool;
use crate::slot::{CallError, Slot};

/// How long to wait before asking again when a node answers `M ... -`
/// (no active node known yet, typically during a failover).
const NO_ACTIVE_PAUSE: Duration = Duration::from_millis(100);
/// Release is retried for this long ...
const RELEASE_WINDOW: Duration = Duration::from_secs(5);
/// ... at this interval, across connections.
const RETRY_INTERVAL: Duration = Duration::from_millis(200);
/// Consecutive redirects after which the client pauses between hops, so
/// two nodes pointing at each other during a handoff cannot spin it.
const FREE_HOPS: u32 = 4;

/// A handle to a Baton cluster. Cheap to clone: clones share the connections.
///
/// Dropping the last handle (and every [`Guard`]) closes the connections.
#[derive(Debug, Clone)]
pub struct Client {
    pool: Arc<Pool>,
}

/// What one node said about itself, or why it could not be asked.
#[derive(Debug)]
pub struct NodeStatus {
    /// The address as registered in the client.
    pub addr: String,
    pub status: Result<StatusReport>,
}

/// The response line as the node sent it, for error messages.
fn line(response: &Response) -> String {
    let mut buf = BytesMut::new();
    response.encode(&mut buf);
    String::from_utf8_lossy(&buf).trim_end().to_owned()
}

impl Client {
    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }

    pub(crate) fn from_pool(pool: Arc<Pool>) -> Client {
        Client { pool }
    }

    pub(crate) fn request_timeout(&self) -> Duration {
        self.pool.request_timeout
    }

    /// Waits up to `wait` for the lock on `key` and holds it for `lease`.
    ///
    /// `wait` follows the protocol: [`Duration::ZERO`] waits without limit.
    /// Both are rounded up to the millisecond. If a connection breaks while
    /// the acquire is pending, it is sent again on the next usable
    /// connection with what is left of the wait; [`Error::NoServer`] comes
    /// only when no usable connection remains after as many attempts as
    /// there are registered connections.
    pub async fn acquire(
        &self,
        key: impl AsRef<[u8]>,
        wait: Duration,
        lease: Duration,
    ) -> Result<Guard> {
        let key = Key::new(key.as_ref())?;
        let lease_ms = lease_ms(lease)?;
        let deadline = (ceil_ms(wait) > 0).then(|| Instant::now() + wait);
        let mut failures = 0;
        let mut hops = 0;
        let mut redirect: Option<Arc<Slot>> = None;
        loop {
            let slot = match redirect.take() {
                Some(slot) => slot,
                None => match self.pool.pick(deadline).await {
                    Some(slot) => slot,
                    None => {
                        // Nothing usable for the rest of the wait: that is the
                        // more useful thing to report than the wait running out.
                        if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                            return Err(Error::NoServer);
                        }
                        failures += 1;
                        if failures >= self.pool.len() {
                            return Err(Error::NoServer);
                        }
                        continue;
                    }
                },
            };
            // Computed only now: finding a connection may have taken a while.
            let wait_ms = match deadline {
                None => 0,
                Some(deadline) => match deadline.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => ceil_ms(left),
                    _ => return Err(Error::TimedOut { key }),
                },
            };
            let req = Request::Acquire {
                key: key.clone(),
                wait_ms,
                lease_ms,
            };
            // The node answers T when the wait runs out; the extra time only
            // covers the trip, so a silent node cannot hold the caller forever.
            let limit =
                deadline.map(|_| Duration::from_millis(wait_ms) + self.pool.request_timeout);
            let sent = Instant::now();
            match slot.call(req, limit).await {
                Ok(Response::Granted { token, .. }) => {
                    return Ok(Guard::new(
                        self.clone(),
                        key,
                        token,
                        Duration::from_millis(lease_ms),
                        sent,
                    ))
                }
                Ok(Response::TimedOut { .. }) | Err(CallError::Unanswered) => {
                    return Err(Error::TimedOut { key })
                }
                Ok(Response::Moved { addr, .. }) => {
                    redirect = self.follow(addr.as_deref(), &mut hops, deadline).await;
                }
                Ok(Response::Error(reply)) => {
                    return Err(Error::Rejected {
                        reason: reply.reason,
                    })
                }
                Ok(other) => return Err(Error::Unexpected(line(&other))),
                Err(CallError::Broken) => {
                    tracing::debug!(%key, addr = %slot.addr, "connection broke during acquire; failing over");
                    failures += 1;
                    if failures >= self.pool.len() && self.pool.pick(deadline).await.is_none() {
                        return Err(Error::NoServer);
                    }
                }
            }
        }
    }

    /// Takes the lock only if it is free now (the shortest wait the
    /// protocol can express, 1 ms).
    pub async fn try_acquire(&self, key: impl AsRef<[u8]>, lease: Duration) -> Result<Guard> {
        self.acquire(key, Duration::from_millis(1), lease).await
    }

    /// Releases the grant of `key` with `token`.
    ///
    /// Retried for 5 seconds at 200 ms intervals across connections until a
    /// node answers, so a connection breaking at the wrong moment does not
    /// leave the lock held until its lease runs out.
    pub async fn release(&self, key: impl AsRef<[u8]>, token: Token) -> Result<()> {
        let key = Key::new(key.as_ref())?;
        let req = Request::Release {
            key: key.clone(),
            token,
        };
        match self.call_retrying(req, RELEASE_WINDOW).await? {
            Response::Released { .. } => Ok(()),
            Response::NotHeld { .. } => Err(Error::NotHeld { key, token }),
            other => Err(Error::Unexpected(line(&other))),
        }
    }

    /// Extends the grant of `key` with `token` to end `lease` from now.
    pub async fn renew(&self, key: impl AsRef<[u8]>, token: Token, lease: Duration) -> Result<()> {
        self.renew_within(key, token, lease, self.pool.request_timeout)
            .await
    }

    /// [`Client::renew`], retrying across connections for at most `window`.
    pub(crate) async fn renew_within(
        &self,
        key: impl AsRef<[u8]>,
        token: Token,
        lease: Duration,
        window: Duration,
    ) -> Result<()> {
        let key = Key::new(key.as_ref())?;
        let req = Request::Renew {
            key: key.clone(),
            token,
            lease_ms: lease_ms(lease)?,
        };
        match self.call_retrying(req, window).await? {
            Response::Renewed { .. } => Ok(()),
            Response::NotHeld { .. } => Err(Error::LeaseLost { key, token }),
            other => Err(Error::Unexpected(line(&other))),
        }
    }

    /// Asks every registered address for its `S` status, concurrently. A
    /// node without a usable connection is reported as [`Error::NoServer`].
    pub async fn status_all(&self) -> Vec<NodeStatus> {
        let asks = self.pool.addresses().into_iter().map(|addr| async move {
            let status = self.status_of(&addr).await;
            NodeStatus { addr, status }
        });
        futures_util::future::join_all(asks).await
    }

    async fn status_of(&self, addr: &str) -> Result<StatusReport> {
        let slot = self.pool.usable_to(addr).ok_or(Error::NoServer)?;
        let limit = self.pool.request_timeout;
        match slot.call(Request::Status, Some(limit)).await {
            Ok(Response::Status(report)) => Ok(report),
            Ok(Response::Error(reply)) => Err(Error::Rejected {
                reason: reply.reason,
            }),
            Ok(other) => Err(Error::Unexpected(line(&other))),
            Err(CallError::Broken) => Err(Error::NoServer),
            Err(CallError::Unanswered) => Err(Error::Unanswered { after: limit }),
        }
    }

    /// Sends `req` until a node gives an answer other than a redirect,
    /// trying the connections in turn every [`RETRY_INTERVAL`] for `window`.
    async fn call_retrying(&self, req: Request, window: Duration) -> Result<Response> {
        let end = Instant::now() + window;
        let mut hops = 0;
        let mut redirect: Option<Arc<Slot>> = None;
        let mut unanswered = None;
        loop {
            if let Some(slot) = redirect.take().or_else(|| self.pool.pick_now()) {
                let limit = end
                    .saturating_duration_since(Instant::now())
                    .min(self.pool.request_timeout);
                match slot.call(req.clone(), Some(limit)).await {
                    Ok(Response::Moved { addr, .. }) => {
                        redirect = self.follow(addr.as_deref(), &mut hops, Some(end)).await;
                        if redirect.is_some() {
                            continue;
                        }
                    }
                    Ok(Response::Error(reply)) => {
                        return Err(Error::Rejected {
                            reason: reply.reason,
                        })
                    }
                    Ok(answer) => return Ok(answer),
                    Err(CallError::Unanswered) => unanswered = Some(limit),
                    Err(CallError::Broken) => {
                        tracing::debug!(addr = %slot.addr, "connection broke; retrying elsewhere");
                    }
                }
            }
            if Instant::now() + RETRY_INTERVAL > end {
                return Err(match unanswered {
                    Some(after) => Error::Unanswered { after },
                    None => Error::NoServer,
                });
            }
            tokio::time::sleep(RETRY_INTERVAL).await;
        }
    }

    /// Handles `M`: the connection to resend to, or `None` after a short
    /// pause when no active node is known yet.
    async fn follow(
        &self,
        addr: Option<&str>,
        hops: &mut u32,
        until: Option<Instant>,
    ) -> Option<Arc<Slot>> {
        *hops += 1;
        let pause = match until {
            Some(until) => NO_ACTIVE_PAUSE.min(until.saturating_duration_since(Instant::now())),
            None => NO_ACTIVE_PAUSE,
        };
        match addr {
            Some(addr) => {
                if *hops > FREE_HOPS {
                    tokio::time::sleep(pause).await;
                }
                Some(self.pool.slot_for(addr))
            }
            None => {
                tokio::time::sleep(pause).await;
                None
            }
        }
    }
}
