//! Acquiring: the [`Acquire`] request a caller builds and awaits (a plain
//! lock, a semaphore permit, a shared lock, a holder value), and the
//! attempts it makes across failover and redirects.

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use baton_core::{HolderValue, Key, LockMode, Token, MAX_PERMITS};
use baton_proto::{AcquireOptions, Op, Request, Response};
use tokio::time::Instant;

use crate::acquire_attempt::{AcquireAttempt, NoVerdict};
use crate::client::{line, Answer, Client};
use crate::duration::lease_ms;
use crate::error::{Error, Result};
use crate::guard::Guard;
use crate::slot::{CallError, Slot};
use crate::turns::Turn;

/// An acquire, built by [`Client::acquire`] or [`Client::try_acquire`]
/// and sent when awaited. The options make it more than a plain lock
/// (protocol 1.2; a 1.1 node refuses them with [`Error::Rejected`]):
///
/// - [`permits`](Acquire::permits): a semaphore, held by up to N grants;
/// - [`shared`](Acquire::shared): a readers-writer lock's shared side;
/// - [`value`](Acquire::value): a short text attached to the grant (an
///   address, an id), which [`Client::inspect`] and watches report.
///
/// Every grant has its own token, lease, renewal and release, so what
/// comes back is a [`Guard`] in every case.
///
/// ```no_run
/// # async fn demo(client: baton_client::Client) -> baton_client::Result<()> {
/// # use std::time::Duration;
/// // One of 4 workers at a time, saying which one it is.
/// let guard = client
///     .acquire("pool/gpu", Duration::from_secs(5), Duration::from_secs(30))
///     .permits(4)
///     .value("worker-7")
///     .await?;
/// guard.release().await?;
/// // A reader: coexists with other readers, never with a writer.
/// let reader = client
///     .acquire("config", Duration::from_secs(5), Duration::from_secs(30))
///     .shared()
///     .await?;
/// reader.release().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
#[must_use = "an acquire sends nothing until it is awaited"]
pub struct Acquire<'a> {
    client: &'a Client,
    key: Result<Key>,
    wait: Duration,
    lease: Duration,
    options: AcquireOptions,
    /// The first bad option, reported when awaited.
    invalid: Option<Error>,
}

impl<'a> Acquire<'a> {
    pub(crate) fn new(client: &'a Client, key: &[u8], wait: Duration, lease: Duration) -> Self {
        Acquire {
            client,
            key: Key::new(key).map_err(Error::from),
            wait,
            lease,
            options: AcquireOptions::default(),
            invalid: None,
        }
    }

    fn refuse(&mut self, err: Error) {
        self.invalid.get_or_insert(err);
    }

    /// A semaphore of `permits` permits: the key is held by up to that
    /// many grants at once (1 to 10,000; 1 is a plain lock). Every acquirer
    /// of a key must name the same number: while the key has holders or
    /// waiters, another number is refused ([`Error::Rejected`], `the key
    /// has <n> permits`).
    pub fn permits(mut self, permits: u32) -> Self {
        if (1..=MAX_PERMITS).contains(&permits) {
            self.options.permits = permits;
        } else {
            self.refuse(Error::InvalidOption {
                why: format!("permits must be 1 to {MAX_PERMITS}, not {permits}"),
            });
        }
        self
    }

    /// A shared grant: it coexists with other shared grants of the key and
    /// excludes exclusive ones (plain acquires are exclusive). Requests are
    /// served in order: a shared acquire that arrives while an exclusive
    /// one waits queues behind it. Takes no [`permits`](Acquire::permits).
    pub fn shared(mut self) -> Self {
        self.options.mode = LockMode::Shared;
        self
    }

    /// Attaches `value` to the grant: 1 to 128 bytes, no space, no control
    /// byte, not exactly `-`; [`Error::InvalidValue`] otherwise. Change it
    /// later with [`Guard::set_value`].
    pub fn value(mut self, value: impl AsRef<[u8]>) -> Self {
        match HolderValue::new(value.as_ref()) {
            Ok(value) => self.options.value = Some(value),
            Err(err) => self.refuse(err.into()),
        }
        self
    }

    /// The request's fields, or the first thing wrong with them.
    fn checked(self) -> Result<(&'a Client, AcquireAttempt)> {
        if let Some(err) = self.invalid {
            return Err(err);
        }
        if self.options.mode == LockMode::Shared && self.options.permits != 1 {
            return Err(Error::InvalidOption {
                why: "shared locks take no permits".into(),
            });
        }
        self.client.check_open()?;
        let mut attempt = AcquireAttempt::new(self.key?, self.wait, lease_ms(self.lease)?);
        attempt.options = self.options;
        Ok((self.client, attempt))
    }
}

impl<'a> IntoFuture for Acquire<'a> {
    type Output = Result<Guard>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<Guard>> + Send + 'a>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            let (client, attempt) = self.checked()?;
            client.acquire_with(attempt).await
        })
    }
}

impl Client {
    /// Waits up to `wait` for the lock on `key` and holds it for `lease`.
    ///
    /// `wait` follows the protocol: [`Duration::ZERO`] waits as long as the node allows (its
    /// maximum wait), then times out.
    /// Both are rounded up to the millisecond. If a connection breaks while
    /// the acquire is pending, it is sent again on the next usable
    /// connection with what is left of the wait; [`Error::NoServer`] comes
    /// only when no usable connection remains after as many attempts as
    /// there are registered connections.
    ///
    /// Awaiting it sends a plain (exclusive) acquire; the [`Acquire`] it
    /// returns takes options first: permits, shared, a value.
    ///
    /// ```no_run
    /// # async fn demo(client: baton_client::Client) -> baton_client::Result<()> {
    /// # use std::time::Duration;
    /// match client.acquire("orders/42", Duration::from_secs(5), Duration::from_secs(30)).await {
    ///     Ok(guard) => guard.release().await?,
    ///     Err(baton_client::Error::TimedOut { .. }) => println!("busy, try later"),
    ///     Err(err) => return Err(err),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn acquire(&self, key: impl AsRef<[u8]>, wait: Duration, lease: Duration) -> Acquire<'_> {
        Acquire::new(self, key.as_ref(), wait, lease)
    }

    /// Takes the lock only if it is free now (the shortest wait the
    /// protocol can express, 1 ms). Takes the same options as
    /// [`Client::acquire`].
    ///
    /// ```no_run
    /// # async fn demo(client: baton_client::Client) -> baton_client::Result<()> {
    /// # use std::time::Duration;
    /// match client.try_acquire("orders/42", Duration::from_secs(30)).await {
    ///     Ok(guard) => guard.release().await?,
    ///     Err(baton_client::Error::TimedOut { .. }) => println!("held by someone else"),
    ///     Err(err) => return Err(err),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_acquire(&self, key: impl AsRef<[u8]>, lease: Duration) -> Acquire<'_> {
        self.acquire(key, Duration::from_millis(1), lease)
    }

    /// Sends `attempt` until a node gives a verdict.
    async fn acquire_with(&self, mut attempt: AcquireAttempt) -> Result<Guard> {
        loop {
            // Each attempt checks: `close` may have started during the last.
            self.check_open()?;
            let following_redirect = attempt.redirect.is_some();
            let Some(slot) = self.next_acquire_slot(&mut attempt).await? else {
                continue;
            };
            let needs = (!attempt.options.is_plain()).then_some("an acquire with options");
            let slot = self.slot_for_request(slot, needs, following_redirect)?;
            let taken = self
                .in_turn(slot, Op::Acquire, &attempt.key, attempt.deadline)
                .await?;
            // Its wait ran out while earlier acquires of the key had theirs.
            let (slot, turn) = taken.ok_or_else(|| Error::TimedOut {
                key: attempt.key.clone(),
            })?;
            // Computed only now: finding a connection may have taken a while.
            let wait_ms = attempt
                .wait_left_ms(following_redirect)
                .ok_or_else(|| attempt.no_verdict.error(&self.pool))?;
            attempt.sent = true;
            let (answer, sent) = self.send_acquire(&slot, &attempt, wait_ms, turn).await?;
            if let Some(guard) = self
                .settle_acquire(&mut attempt, &slot, answer, sent)
                .await?
            {
                return Ok(guard);
            }
        }
    }
    /// The connection for the next attempt: the redirect target if the last
    /// answer was `M addr`, else the next usable one. `None` when nothing
    /// was usable this time but the acquire may still try again.
    async fn next_acquire_slot(&self, attempt: &mut AcquireAttempt) -> Result<Option<Arc<Slot>>> {
        if let Some(slot) = attempt.redirect.take() {
            return Ok(Some(slot));
        }
        let picked = tokio::select! {
            slot = self.pool.pick(attempt.deadline) => slot,
            () = self.life.closing() => return Err(Error::Closed),
        };
        if let Some(slot) = picked {
            return Ok(Some(slot));
        }
        attempt.no_verdict = NoVerdict::NoConnection;
        // Nothing usable for the rest of the wait: that is the more useful
        // thing to report than the wait running out.
        if attempt.wait_is_over() {
            return Err(self.pool.no_server());
        }
        attempt.failures += 1;
        if attempt.failures >= self.pool.len() {
            return Err(self.pool.no_server());
        }
        Ok(None)
    }

    /// Sends one `A` on `slot`, in its `turn` of the key there, asking to
    /// wait `wait_ms`; the answer, and when it was sent (where the lease
    /// starts, for the guard).
    async fn send_acquire(
        &self,
        slot: &Slot,
        attempt: &AcquireAttempt,
        wait_ms: u64,
        turn: Option<Turn>,
    ) -> Result<(Answer, Instant)> {
        let req = Request::Acquire {
            key: attempt.key.clone(),
            wait_ms,
            lease_ms: attempt.lease_ms,
            options: attempt.options.clone(),
        };
        // The node answers T when the wait runs out; the extra time only
        // covers the trip, so a silent node cannot hold the caller forever.
        let limit = attempt
            .deadline
            .map(|_| Duration::from_millis(wait_ms) + self.pool.request_timeout);
        let sent = Instant::now();
        // Closing gives the acquire up: dropping its call makes the
        // connection release a grant that comes later. An answer already
        // here goes first (biased): dropping a grant delivered but unread
        // would leave the key held for its whole lease.
        tokio::select! {
            biased;
            answer = slot.call_in_turn(req, limit, turn) => Ok((answer, sent)),
            () = self.life.closing() => Err(Error::Closed),
        }
    }

    /// What one attempt's answer means: the guard, an error that ends the
    /// acquire, or `None` to try again (after a redirect, or on another
    /// connection when this one broke).
    async fn settle_acquire(
        &self,
        attempt: &mut AcquireAttempt,
        slot: &Slot,
        answer: Answer,
        sent: Instant,
    ) -> Result<Option<Guard>> {
        let key = &attempt.key;
        match answer {
            Ok(Response::Granted { token, .. }) => {
                self.guard_granted(attempt, token, sent).map(Some)
            }
            // Only the node's word means the wait ran out, or the wait
            // running out before the acquire could be sent at all.
            Ok(Response::TimedOut { .. }) | Err(CallError::WaitRanOutUnsent) => {
                Err(Error::TimedOut { key: key.clone() })
            }
            Err(CallError::Unanswered(after)) => Err(Error::Unanswered { after }),
            Ok(Response::Moved { addr, .. }) => {
                if addr.is_none() {
                    attempt.no_verdict = NoVerdict::NotServing;
                }
                attempt.redirect = self
                    .follow(addr.as_deref(), &mut attempt.hops, attempt.deadline)
                    .await;
                Ok(None)
            }
            Ok(Response::Error(reply)) => Err(crate::auth::rejected(reply)),
            Ok(other) => Err(Error::Unexpected(line(&other))),
            // `close` shuts the connections down: that break is the close,
            // not a node to fail over from.
            Err(CallError::Broken) if self.life.is_closing() => Err(Error::Closed),
            Err(CallError::Broken) => {
                tracing::debug!(%key, addr = %slot.addr, "connection broke during acquire; failing over");
                attempt.no_verdict = NoVerdict::NoConnection;
                attempt.failures += 1;
                if attempt.failures >= self.pool.len()
                    && self.pool.pick(attempt.deadline).await.is_none()
                {
                    return Err(self.pool.no_server());
                }
                Ok(None)
            }
        }
    }

    /// Wraps a grant in its guard, unless `close` started meanwhile.
    fn guard_granted(
        &self,
        attempt: &AcquireAttempt,
        token: Token,
        sent: Instant,
    ) -> Result<Guard> {
        let guard = Guard::new(
            self.for_guard(),
            attempt.key.clone(),
            token,
            Duration::from_millis(attempt.lease_ms),
            sent,
        )
        .with_value(attempt.options.value.clone());
        // Registered first, checked second: `close` either found this guard
        // or is seen here. Dropping it then releases the grant in the
        // background, which `close` waits for.
        if self.life.is_closing() {
            drop(guard);
            return Err(Error::Closed);
        }
        Ok(guard)
    }
}
