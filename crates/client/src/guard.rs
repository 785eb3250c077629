//! A held lock: its token, renewal, optional keep-alive, and release on drop.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use baton_core::{HolderValue, Key, Token};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::client::Client;
use crate::error::{Error, Result};

/// How often the keep-alive renews, as a fraction of the lease: a third
/// leaves two more tries before the grant could lapse.
const KEEP_ALIVE_DIVISOR: u32 = 3;
/// Pause between renew attempts after one failed without a verdict.
const RENEW_RETRY: Duration = Duration::from_millis(200);
/// The keep-alive gives up renewing, and the guard is marked lost, when a
/// tenth of the lease is left: the program hears it before the lease ends
/// on the node, with time to stop touching the resource.
const LOST_MARGIN_DIVISOR: u32 = 10;

/// What a guard, its keep-alive task and the client's close share.
#[derive(Debug)]
pub(crate) struct Held {
    /// This guard's entry in the client's list of live guards.
    id: u64,
    client: Client,
    key: Key,
    token: Token,
    /// The lease and the latest moment the grant is known to last until,
    /// counted from when the acquire or renew was sent (the node counts from
    /// later, so this errs on the safe side).
    lease: Mutex<(Duration, Instant)>,
    lost: watch::Sender<bool>,
    /// The value the grant carries, as last set by this guard.
    value: Mutex<Option<HolderValue>>,
    /// Set by whoever ends the guard's claim: its release, its drop, its
    /// `into_token`, or the client's close. Only that one acts on the grant.
    settled: AtomicBool,
}

impl Held {
    pub(crate) fn key(&self) -> &Key {
        &self.key
    }

    pub(crate) fn token(&self) -> Token {
        self.token
    }

    /// Claims the right to end this guard; true for the first caller only.
    pub(crate) fn settle(&self) -> bool {
        let first = !self.settled.swap(true, Ordering::AcqRel);
        if first {
            self.client.forget_guard(self.id);
        }
        first
    }

    fn lease(&self) -> (Duration, Instant) {
        *self.lease.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn renewed(&self, lease: Duration, sent: Instant) {
        *self.lease.lock().unwrap_or_else(PoisonError::into_inner) = (lease, sent + lease);
    }

    pub(crate) fn mark_lost(&self) {
        self.lost.send_replace(true);
    }

    /// Renews, retrying for at most `window` when no node answers.
    async fn renew(&self, lease: Duration, window: Duration) -> Result<()> {
        let sent = Instant::now();
        let renewed = self
            .client
            .renew_within(&self.key, self.token, lease, window)
            .await;
        match renewed {
            Ok(()) => {
                self.renewed(lease, sent);
                Ok(())
            }
            Err(err) => {
                if matches!(err, Error::LeaseLost { .. }) {
                    self.mark_lost();
                }
                Err(err)
            }
        }
    }
}

/// A granted lock.
///
/// End it with [`Guard::release`], which releases the lock and reports the
/// outcome, or with [`Client::close`], which releases every lock its guards
/// still hold and waits for the answers.
///
/// Dropping a guard only *starts* a release in the background and returns
/// at once. That release needs the tokio runtime to keep running until the
/// node answers: when `main` returns (or the runtime is shut down) right
/// after the drop, it dies with the runtime, and the lock stays held until
/// its lease runs out. Without a runtime nothing is sent at all. So before a
/// program exits, release its guards or call [`Client::close`]: `close`
/// also waits for the background releases of guards dropped earlier.
///
/// ```no_run
/// # async fn demo(client: baton_client::Client) -> baton_client::Result<()> {
/// # use std::time::Duration;
/// let mut guard = client.acquire("orders/42", Duration::from_secs(5), Duration::from_secs(30)).await?;
/// guard.keep_alive();
/// // ... the guarded work, writing with guard.token() ...
/// guard.release().await?;
/// # Ok(())
/// # }
/// ```
pub struct Guard {
    held: Arc<Held>,
    keep_alive: Option<JoinHandle<()>>,
}

impl Guard {
    pub(crate) fn new(
        client: Client,
        key: Key,
        token: Token,
        lease: Duration,
        sent: Instant,
    ) -> Guard {
        let (lost, _) = watch::channel(false);
        let held = client.track_guard(|id| {
            Arc::new(Held {
                id,
                client: client.clone(),
                key,
                token,
                lease: Mutex::new((lease, sent + lease)),
                lost,
                value: Mutex::new(None),
                settled: AtomicBool::new(false),
            })
        });
        Guard {
            held,
            keep_alive: None,
        }
    }

    /// Records the value the grant was acquired with.
    pub(crate) fn with_value(self, value: Option<HolderValue>) -> Guard {
        *self
            .held
            .value
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = value;
        self
    }

    /// The value the grant carries: given to [`Acquire::value`](crate::Acquire::value),
    /// or set since with [`Guard::set_value`].
    pub fn value(&self) -> Option<HolderValue> {
        self.held
            .value
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Sets the value the grant carries (`V`, protocol 1.2): what
    /// [`Client::inspect`] and watches report for this holder. Watchers of
    /// the key see the change. [`Error::LeaseLost`] means the grant is gone.
    ///
    /// ```no_run
    /// # async fn demo(client: baton_client::Client) -> baton_client::Result<()> {
    /// # use std::time::Duration;
    /// let guard = client.acquire("service/primary", Duration::ZERO, Duration::from_secs(30)).await?;
    /// guard.set_value("10.0.0.7:8080").await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn set_value(&self, value: impl AsRef<[u8]>) -> Result<()> {
        let value = HolderValue::new(value.as_ref())?;
        self.put_value(Some(value)).await
    }

    /// Clears the value the grant carries (`V <key> <token> -`).
    pub async fn clear_value(&self) -> Result<()> {
        self.put_value(None).await
    }

    async fn put_value(&self, value: Option<HolderValue>) -> Result<()> {
        let held = &self.held;
        match held
            .client
            .put_value(&held.key, held.token, value.clone())
            .await
        {
            Ok(()) => {
                *held.value.lock().unwrap_or_else(PoisonError::into_inner) = value;
                Ok(())
            }
            Err(Error::NotHeld { key, token }) => {
                held.mark_lost();
                Err(Error::LeaseLost { key, token })
            }
            Err(err) => Err(err),
        }
    }

    /// The lock this guard holds.
    ///
    /// ```no_run
    /// # async fn demo(client: baton_client::Client) -> baton_client::Result<()> {
    /// # use std::time::Duration;
    /// let guard = client.acquire("orders/42", Duration::from_secs(5), Duration::from_secs(30)).await?;
    /// assert_eq!(guard.key().as_bytes(), b"orders/42");
    /// # Ok(())
    /// # }
    /// ```
    pub fn key(&self) -> &Key {
        &self.held.key
    }

    /// The fencing token of this grant: pass it to the protected resource.
    ///
    /// ```no_run
    /// # async fn demo(client: baton_client::Client) -> baton_client::Result<()> {
    /// # use std::time::Duration;
    /// let guard = client.acquire("orders/42", Duration::ZERO, Duration::from_secs(30)).await?;
    /// println!("writing with fence token {}", guard.token());
    /// # Ok(())
    /// # }
    /// ```
    pub fn token(&self) -> Token {
        self.held.token
    }

    /// Extends the grant to end `lease` from now. [`Error::LeaseLost`] means
    /// the grant is gone and the protected resource must not be touched.
    ///
    /// ```no_run
    /// # async fn demo(client: baton_client::Client) -> baton_client::Result<()> {
    /// # use std::time::Duration;
    /// let guard = client.acquire("orders/42", Duration::ZERO, Duration::from_secs(30)).await?;
    /// guard.renew(Duration::from_secs(60)).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn renew(&self, lease: Duration) -> Result<()> {
        let window = self.held.client.request_timeout();
        self.held.renew(lease, window).await
    }

    /// Starts renewing in the background every third of the lease, until
    /// the guard is released or dropped. Watch [`Guard::lost`] to learn when
    /// renewal failed and the grant may be gone. Calling it again does nothing.
    ///
    /// ```no_run
    /// # async fn demo(client: baton_client::Client) -> baton_client::Result<()> {
    /// # use std::time::Duration;
    /// let mut guard = client.acquire("orders/42", Duration::ZERO, Duration::from_secs(30)).await?;
    /// guard.keep_alive(); // renewed every 10 s from now on
    /// # Ok(())
    /// # }
    /// ```
    pub fn keep_alive(&mut self) {
        if self.keep_alive.is_none() {
            self.keep_alive = Some(tokio::spawn(keep_alive(Arc::clone(&self.held))));
        }
    }

    /// Whether the lease is known to be lost.
    ///
    /// ```no_run
    /// # async fn demo(client: baton_client::Client) -> baton_client::Result<()> {
    /// # use std::time::Duration;
    /// let guard = client.acquire("orders/42", Duration::ZERO, Duration::from_secs(30)).await?;
    /// if guard.is_lost() {
    ///     return Err(guard.lost().await);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn is_lost(&self) -> bool {
        *self.held.lost.borrow()
    }

    /// Resolves when the lease is known to be lost: a renewal was answered
    /// `N K`, or the keep-alive could not renew before the lease ran out.
    /// Never resolves while the grant is fine.
    ///
    /// ```no_run
    /// # async fn demo(client: baton_client::Client) -> baton_client::Result<()> {
    /// # use std::time::Duration;
    /// let mut guard = client.acquire("orders/42", Duration::ZERO, Duration::from_secs(30)).await?;
    /// guard.keep_alive();
    /// tokio::select! {
    ///     () = tokio::time::sleep(Duration::from_secs(60)) => {}
    ///     lost = guard.lost() => return Err(lost),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn lost(&self) -> Error {
        let mut lost = self.held.lost.subscribe();
        // The sender lives in `held`, which `self` keeps alive, so waiting
        // cannot fail; the error arm only keeps this total.
        while !*lost.borrow_and_update() {
            if lost.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
        Error::LeaseLost {
            key: self.held.key.clone(),
            token: self.held.token,
        }
    }

    /// Releases the lock now (retried for 5 s across connections).
    /// [`Error::NotHeld`] means it had already expired or been released;
    /// [`Error::Closed`], that [`Client::close`] released it already.
    ///
    /// ```no_run
    /// # async fn demo(client: baton_client::Client) -> baton_client::Result<()> {
    /// # use std::time::Duration;
    /// let guard = client.acquire("orders/42", Duration::ZERO, Duration::from_secs(30)).await?;
    /// guard.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn release(mut self) -> Result<()> {
        self.stop_keep_alive();
        if !self.held.settle() {
            return Err(Error::Closed);
        }
        self.held
            .client
            .release(&self.held.key, self.held.token)
            .await
    }

    /// Gives up the guard without releasing the lock: it stays held until
    /// someone releases it with the returned token or its lease runs out,
    /// and [`Client::close`] leaves it alone. This is what a command-line
    /// `acquire` needs.
    ///
    /// ```no_run
    /// # async fn demo(client: baton_client::Client) -> baton_client::Result<()> {
    /// # use std::time::Duration;
    /// let token = client.acquire("orders/42", Duration::ZERO, Duration::from_secs(30)).await?.into_token();
    /// // Still held until released with this token or until the lease ends.
    /// client.release("orders/42", token).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn into_token(mut self) -> Token {
        self.stop_keep_alive();
        self.held.settle();
        self.held.token
    }

    fn stop_keep_alive(&mut self) {
        if let Some(task) = self.keep_alive.take() {
            task.abort();
        }
    }
}

impl fmt::Debug for Guard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Guard")
            .field("key", &self.held.key)
            .field("token", &self.held.token)
            .field("keep_alive", &self.keep_alive.is_some())
            .field("lost", &self.is_lost())
            .finish()
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.stop_keep_alive();
        if !self.held.settle() {
            return;
        }
        // Without a runtime there is nothing to send with; the lease then
        // frees the lock.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            if self.held.client.first_warning() {
                tracing::warn!(
                    key = %self.held.key,
                    "a guard was dropped outside a tokio runtime: no release was sent, \
                     and the lock stays held until its lease ends; release guards or call \
                     Client::close before the runtime shuts down"
                );
            }
            return;
        };
        let held = Arc::clone(&self.held);
        // Tracked, so that `Client::close` waits for it.
        held.client.background().spawn_on(&runtime, {
            let held = Arc::clone(&held);
            async move {
                if let Err(err) = held.client.release(&held.key, held.token).await {
                    tracing::debug!(key = %held.key, %err, "background release failed");
                }
            }
        });
    }
}

async fn keep_alive(held: Arc<Held>) {
    loop {
        let (lease, _) = held.lease();
        let period = (lease / KEEP_ALIVE_DIVISOR).max(Duration::from_millis(1));
        tokio::time::sleep(period).await;
        loop {
            // Retrying past the lease's end would only hide that it is lost.
            let give_up = lost_deadline(&held);
            let window = give_up
                .saturating_duration_since(Instant::now())
                .max(RENEW_RETRY);
            match held.renew(lease, window).await {
                Ok(()) => break,
                Err(Error::LeaseLost { .. }) => return,
                // `close` releases the grant and marks it lost.
                Err(Error::Closed) => return,
                Err(err) => {
                    if Instant::now() + RENEW_RETRY >= lost_deadline(&held) {
                        tracing::warn!(key = %held.key, %err, "could not renew before the lease ran out");
                        held.mark_lost();
                        return;
                    }
                    tracing::debug!(key = %held.key, %err, "renew failed; retrying");
                    tokio::time::sleep(RENEW_RETRY).await;
                }
            }
        }
    }
}

/// When the keep-alive stops trying and marks the guard lost: a tenth of
/// the lease before the grant is known to end.
fn lost_deadline(held: &Held) -> Instant {
    let (lease, until) = held.lease();
    until
        .checked_sub(lease / LOST_MARGIN_DIVISOR)
        .unwrap_or(until)
}
