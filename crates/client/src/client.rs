//! The client handle and the request logic: failover, redirects, retries.

use std::sync::Arc;
use std::time::Duration;

use baton_core::{HolderValue, Key, KeyState, Token};
use baton_proto::{Op, Request, Response, StatusReport};
use bytes::BytesMut;
use tokio::time::Instant;

use crate::acquire_attempt::NoVerdict;
use crate::builder::ClientBuilder;
use crate::connection::match_key;
use crate::duration::lease_ms;
use crate::error::{Error, Result};
use crate::guard::Held;
use crate::lifecycle::{Background, Handles, Lifecycle};
use crate::pool::Pool;
use crate::slot::{CallError, Slot};
use crate::turns::Turn;

/// How long to wait before asking again when a node answers `M ... -`
/// (no active node known yet, typically during a failover).
const NO_ACTIVE_PAUSE: Duration = Duration::from_millis(100);
/// Release is retried for this long ...
pub(crate) const RELEASE_WINDOW: Duration = Duration::from_secs(5);
/// ... at this interval, across connections.
const RETRY_INTERVAL: Duration = Duration::from_millis(200);
/// Consecutive redirects after which the client pauses between hops, so
/// two nodes pointing at each other during a handoff cannot spin it.
const FREE_HOPS: u32 = 4;

/// A handle to a Baton cluster. Cheap to clone: clones share the connections.
///
/// End it with [`Client::close`] before the program exits: it releases
/// every lock the client's guards still hold and waits for the answers.
/// Dropping the last handle (and every [`Guard`](crate::Guard)) closes the connections
/// but releases nothing: locks of guards still alive stay held until their
/// leases run out.
///
/// ```no_run
/// # async fn demo(client: baton_client::Client) -> baton_client::Result<()> {
/// # use std::time::Duration;
/// let guard = client.acquire("jobs/report", Duration::from_secs(5), Duration::from_secs(30)).await?;
/// guard.release().await?;
/// client.close().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Client {
    pub(crate) pool: Arc<Pool>,
    pub(crate) life: Arc<Lifecycle<Held>>,
    /// Shared by the handles the program holds (kept for its drop); `None`
    /// in a guard's copy, so that the program dropping its last handle is
    /// seen.
    _handles: Option<Arc<Handles<Held>>>,
}

/// What one node said about itself, or why it could not be asked.
///
/// ```no_run
/// # async fn demo(client: baton_client::Client) -> baton_client::Result<()> {
/// # use std::time::Duration;
/// for node in client.status_all().await {
///     match node.status {
///         Ok(status) => println!("{} {}", node.addr, status.role.as_str()),
///         Err(err) => println!("{} unreachable: {err}", node.addr),
///     }
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct NodeStatus {
    /// The address as registered in the client.
    pub addr: String,
    /// Its `S` answer, or why it could not be asked.
    pub status: Result<StatusReport>,
}

/// The response line as the node sent it, for error messages.
pub(crate) fn line(response: &Response) -> String {
    let mut buf = BytesMut::new();
    response.encode(&mut buf);
    String::from_utf8_lossy(&buf).trim_end().to_owned()
}

/// What one call on a connection came back with.
pub(crate) type Answer = std::result::Result<Response, CallError>;

impl Client {
    /// A builder: give it the servers, then [`build`](ClientBuilder::build).
    ///
    /// ```no_run
    /// # async fn demo() -> baton_client::Result<()> {
    /// let client = baton_client::Client::builder()
    ///     .servers(["10.0.0.1:7411", "10.0.0.2:7411", "10.0.0.3:7411"])
    ///     .build()
    ///     .await?;
    /// # let _ = client;
    /// # Ok(())
    /// # }
    /// ```
    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }

    pub(crate) fn from_pool(pool: Arc<Pool>) -> Client {
        let life = Arc::new(Lifecycle::default());
        let handles = Some(Arc::new(Handles::new(Arc::clone(&life))));
        Client {
            pool,
            life,
            _handles: handles,
        }
    }

    /// The copy a guard keeps: it does not count as the program's handle.
    pub(crate) fn for_guard(&self) -> Client {
        Client {
            pool: Arc::clone(&self.pool),
            life: Arc::clone(&self.life),
            _handles: None,
        }
    }

    /// True the first time only: the client's lifecycle warning is said once.
    pub(crate) fn first_warning(&self) -> bool {
        self.life.first_warning()
    }

    /// Registers a new guard's shared state, so that `close` finds it.
    pub(crate) fn track_guard(&self, make: impl FnOnce(u64) -> Arc<Held>) -> Arc<Held> {
        self.life.register(make)
    }

    pub(crate) fn forget_guard(&self, id: u64) {
        self.life.unregister(id);
    }

    /// Where background releases are tracked, for `close` to wait on.
    pub(crate) fn background(&self) -> &Background {
        &self.pool.background
    }

    /// Closes the client: releases every lock still held by one of its
    /// guards, waits for those answers and for the background releases of
    /// guards dropped earlier (and of grants that came after their caller
    /// gave up), then closes the connections.
    ///
    /// Bounded: each release is retried as [`Client::release`] does, for at
    /// most 5 seconds, all at once. Call it last, before `main` returns:
    /// afterwards (and while it runs) every acquire and renew, on this
    /// handle or any clone, fails with [`Error::Closed`], and an acquire
    /// still waiting is given up (the node drops it from its queue when the
    /// connection closes). Guards still alive are marked lost
    /// ([`Guard::lost`](crate::Guard::lost) resolves); locks given up with
    /// [`Guard::into_token`](crate::Guard::into_token) are left alone. Calling it again does nothing.
    ///
    /// The error is the first release that got no verdict (no node reached,
    /// no answer): that lock may stay held until its lease runs out. A lock
    /// found already gone (`N R`) is not an error here.
    ///
    /// ```no_run
    /// # async fn demo(client: baton_client::Client) -> baton_client::Result<()> {
    /// # use std::time::Duration;
    /// let _guard = client.acquire("jobs/a", Duration::ZERO, Duration::from_secs(30)).await?;
    /// // Releases jobs/a and waits for the answer.
    /// client.close().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn close(&self) -> Result<()> {
        self.life.start_closing();
        let releases = self
            .life
            .take_live()
            .into_iter()
            .filter(|held| held.settle())
            .map(|held| async move {
                let released = self.release(held.key(), held.token()).await;
                held.mark_lost();
                match released {
                    Ok(()) | Err(Error::NotHeld { .. }) => Ok(()),
                    Err(err) => {
                        tracing::warn!(key = %held.key(), %err, "close could not release");
                        Err(err)
                    }
                }
            });
        let (released, ()) = futures_util::future::join(
            futures_util::future::join_all(releases),
            self.pool.background.finish(),
        )
        .await;
        self.pool.shut_down();
        released.into_iter().collect()
    }

    /// Fails with [`Error::Closed`] once `close` was called.
    pub(crate) fn check_open(&self) -> Result<()> {
        if self.life.is_closing() {
            Err(Error::Closed)
        } else {
            Ok(())
        }
    }

    pub(crate) fn request_timeout(&self) -> Duration {
        self.pool.request_timeout
    }

    /// Releases the grant of `key` with `token`.
    ///
    /// Retried for 5 seconds at 200 ms intervals across connections until a
    /// node answers, so a connection breaking at the wrong moment does not
    /// leave the lock held until its lease runs out.
    ///
    /// ```no_run
    /// # async fn demo(client: baton_client::Client) -> baton_client::Result<()> {
    /// # use std::time::Duration;
    /// let token = client.acquire("orders/42", Duration::ZERO, Duration::from_secs(30)).await?.into_token();
    /// client.release("orders/42", token).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn release(&self, key: impl AsRef<[u8]>, token: Token) -> Result<()> {
        if self.pool.is_shut_down() {
            return Err(Error::Closed);
        }
        let key = Key::new(key.as_ref())?;
        let req = Request::Release {
            key: key.clone(),
            token,
        };
        let per_node = self.pool.request_timeout;
        match self.call_retrying(req, RELEASE_WINDOW, per_node).await? {
            Response::Released { .. } => Ok(()),
            Response::NotHeld { .. } => Err(Error::NotHeld { key, token }),
            other => Err(Error::Unexpected(line(&other))),
        }
    }

    /// Extends the grant of `key` with `token` to end `lease` from now.
    ///
    /// ```no_run
    /// # async fn demo(client: baton_client::Client) -> baton_client::Result<()> {
    /// # use std::time::Duration;
    /// let token = client.acquire("orders/42", Duration::ZERO, Duration::from_secs(30)).await?.into_token();
    /// client.renew("orders/42", token, Duration::from_secs(60)).await?;
    /// # Ok(())
    /// # }
    /// ```
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
        self.check_open()?;
        let key = Key::new(key.as_ref())?;
        let req = Request::Renew {
            key: key.clone(),
            token,
            lease_ms: lease_ms(lease)?,
        };
        // A renewal may be sent twice, so half the window is given to one
        // node: one that does not answer leaves time to renew elsewhere
        // before the lease runs out, even before it is found frozen.
        let per_node = (window / 2).min(self.pool.request_timeout);
        match self.call_retrying(req, window, per_node).await? {
            Response::Renewed { .. } => Ok(()),
            Response::NotHeld { .. } => Err(Error::LeaseLost { key, token }),
            other => Err(Error::Unexpected(line(&other))),
        }
    }

    /// Sets the value of the grant of `key` with `token` (`V`, protocol
    /// 1.2); [`Error::NotHeld`] if no live grant of the key has that token.
    /// [`Guard::set_value`](crate::Guard::set_value) does this for a guard.
    ///
    /// ```no_run
    /// # async fn demo(client: baton_client::Client) -> baton_client::Result<()> {
    /// # use std::time::Duration;
    /// let token = client.acquire("service/primary", Duration::ZERO, Duration::from_secs(30)).await?.into_token();
    /// client.set_value("service/primary", token, "10.0.0.7:8080").await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn set_value(
        &self,
        key: impl AsRef<[u8]>,
        token: Token,
        value: impl AsRef<[u8]>,
    ) -> Result<()> {
        let value = HolderValue::new(value.as_ref())?;
        self.put_value(key, token, Some(value)).await
    }

    /// Clears the value of the grant of `key` with `token` (`V <key> <token> -`).
    pub async fn clear_value(&self, key: impl AsRef<[u8]>, token: Token) -> Result<()> {
        self.put_value(key, token, None).await
    }

    /// `V`: setting a value twice is harmless, so it is retried across
    /// connections within the request timeout, like a renewal.
    pub(crate) async fn put_value(
        &self,
        key: impl AsRef<[u8]>,
        token: Token,
        value: Option<HolderValue>,
    ) -> Result<()> {
        self.check_open()?;
        let key = Key::new(key.as_ref())?;
        let req = Request::SetValue {
            key: key.clone(),
            token,
            value,
        };
        let window = self.pool.request_timeout;
        match self.call_retrying(req, window, window).await? {
            Response::ValueSet { .. } => Ok(()),
            Response::NotHeld { .. } => Err(Error::NotHeld { key, token }),
            other => Err(Error::Unexpected(line(&other))),
        }
    }

    /// `Q <key>`: the key's live grant (token, lease left) and waiters, as
    /// the serving node sees them; in a Raft cluster a linearizable read.
    /// Redirects are followed within the request timeout. For a key with
    /// several holders, shared holders, permits or values (protocol 1.2),
    /// `grant` is the newest holder and `detail` has the permits, the mode,
    /// every holder (the oldest 16) with its value, and the state tag;
    /// [`KeyStateExt`](crate::KeyStateExt) reads them for any key.
    ///
    /// ```no_run
    /// # async fn demo(client: baton_client::Client) -> baton_client::Result<()> {
    /// # use std::time::Duration;
    /// let state = client.inspect("orders/42").await?;
    /// match state.grant {
    ///     Some(grant) => println!("held with token {}", grant.token),
    ///     None => println!("free, {} waiting", state.waiters),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn inspect(&self, key: impl AsRef<[u8]>) -> Result<KeyState> {
        self.check_open()?;
        let key = Key::new(key.as_ref())?;
        let req = Request::Query { key };
        let window = self.pool.request_timeout;
        match self.call_retrying(req, window, window).await? {
            Response::Queried { state, .. } => Ok(state),
            other => Err(Error::Unexpected(line(&other))),
        }
    }

    /// Asks every registered address for its `S` status, concurrently. A
    /// node without a usable connection is reported as [`Error::NoServer`].
    ///
    /// ```no_run
    /// # async fn demo(client: baton_client::Client) -> baton_client::Result<()> {
    /// # use std::time::Duration;
    /// let up = client.status_all().await.iter().filter(|n| n.status.is_ok()).count();
    /// println!("{up} nodes answered");
    /// # Ok(())
    /// # }
    /// ```
    pub async fn status_all(&self) -> Vec<NodeStatus> {
        let asks = self.pool.addresses().into_iter().map(|addr| async move {
            let status = self.status_of(&addr).await;
            NodeStatus { addr, status }
        });
        futures_util::future::join_all(asks).await
    }

    async fn status_of(&self, addr: &str) -> Result<StatusReport> {
        let slot = self
            .pool
            .usable_to(addr)
            .ok_or_else(|| self.pool.no_server_at(addr))?;
        let limit = self.pool.request_timeout;
        match slot.call(Request::Status, Some(limit)).await {
            Ok(Response::Status(report)) => Ok(report),
            Ok(Response::Error(reply)) => Err(crate::auth::rejected(reply)),
            Ok(other) => Err(Error::Unexpected(line(&other))),
            // `S` is never kept back: only acquires and watches are.
            Err(CallError::Broken | CallError::WaitRanOutUnsent) => {
                Err(self.pool.no_server_at(addr))
            }
            Err(CallError::Unanswered(after)) => Err(Error::Unanswered { after }),
        }
    }

    /// Sends `req` until a node gives an answer other than a redirect,
    /// trying the connections in turn every [`RETRY_INTERVAL`] for `window`,
    /// waiting at most `per_node` for each answer.
    pub(crate) async fn call_retrying(
        &self,
        req: Request,
        window: Duration,
        per_node: Duration,
    ) -> Result<Response> {
        let end = Instant::now() + window;
        let mut hops = 0;
        let mut redirect: Option<Arc<Slot>> = None;
        let mut no_verdict = NoVerdict::default();
        loop {
            let redirected = redirect.is_some();
            if let Some(slot) = redirect.take().or_else(|| self.pool.pick_now()) {
                let needs = crate::protocol::needs_12(&req);
                let slot = self.slot_for_request(slot, needs, redirected)?;
                let limit = end.saturating_duration_since(Instant::now()).min(per_node);
                match slot.call(req.clone(), Some(limit)).await {
                    Ok(Response::Moved { addr, .. }) => {
                        if addr.is_none() {
                            no_verdict = NoVerdict::NotServing;
                        }
                        redirect = self.follow(addr.as_deref(), &mut hops, Some(end)).await;
                        if redirect.is_some() {
                            continue;
                        }
                    }
                    Ok(Response::Error(reply)) => return Err(crate::auth::rejected(reply)),
                    Ok(answer) => return Ok(answer),
                    Err(CallError::Unanswered(after)) => no_verdict = NoVerdict::Unanswered(after),
                    // Never `WaitRanOutUnsent`: releases, renewals, queries
                    // and values are not kept back.
                    Err(CallError::Broken | CallError::WaitRanOutUnsent) => {
                        no_verdict = NoVerdict::NoConnection;
                        tracing::debug!(addr = %slot.addr, "connection broke; retrying elsewhere");
                    }
                }
            }
            if Instant::now() + RETRY_INTERVAL > end || self.pool.tls_failure().is_some() {
                return Err(no_verdict.error(&self.pool));
            }
            tokio::time::sleep(RETRY_INTERVAL).await;
        }
    }

    /// The connection an acquire or a watch (`op`) of `key` meant for
    /// `slot`'s node goes out on, with its turn of the key there (see
    /// [`Pool::take_turn`]); `None` when `until` passed first.
    pub(crate) async fn in_turn(
        &self,
        slot: Arc<Slot>,
        op: Op,
        key: &Key,
        until: Option<Instant>,
    ) -> Result<Option<(Arc<Slot>, Option<Turn>)>> {
        let key = match_key(op, Some(key.as_bytes()));
        tokio::select! {
            taken = self.pool.take_turn(slot, key, until) => Ok(taken),
            () = self.life.closing() => Err(Error::Closed),
        }
    }

    /// Handles `M`: the connection to resend to, or `None` after a short
    /// pause when no active node is known yet.
    pub(crate) async fn follow(
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
