//! The registered connections and the round-robin over the usable ones.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::auth::Credentials;
use crate::connection::MatchKey;
use crate::error::Error;
use crate::lifecycle::Background;
use crate::liveness::Liveness;
use crate::slot::{Shared, Slot, RECONNECT_INTERVAL};
use crate::turns::{NoTurn, Turn, Turns};

#[derive(Debug)]
pub(crate) struct Pool {
    slots: RwLock<Vec<Arc<Slot>>>,
    next: AtomicUsize,
    changed: Arc<watch::Sender<u64>>,
    /// Set once, by `close`: every connection shuts down.
    shutdown: watch::Sender<bool>,
    /// Releases running in the background, which `close` waits for.
    pub(crate) background: Arc<Background>,
    pub(crate) connect_timeout: Duration,
    pub(crate) request_timeout: Duration,
    credentials: Option<Arc<Credentials>>,
    tls: Option<Arc<rustls::ClientConfig>>,
    liveness: Liveness,
    /// Which connection each acquire and watch of a key goes out on.
    turns: Arc<Turns>,
}

impl Pool {
    /// Registers one connection per address, two when there is only one
    /// address so that a single broken socket never pauses the service.
    pub(crate) fn start(
        addrs: &[String],
        connect_timeout: Duration,
        request_timeout: Duration,
        credentials: Option<Arc<Credentials>>,
        tls: Option<Arc<rustls::ClientConfig>>,
        liveness: Liveness,
    ) -> Pool {
        let (changed, _) = watch::channel(0);
        let changed = Arc::new(changed);
        let (shutdown, _) = watch::channel(false);
        let background = Arc::new(Background::default());
        let shared = Shared {
            connect_timeout,
            changed: Arc::clone(&changed),
            shutdown: shutdown.subscribe(),
            background: Arc::clone(&background),
            credentials: credentials.clone(),
            tls,
            liveness,
        };
        let mut slots = Vec::new();
        let copies = if addrs.len() == 1 { 2 } else { 1 };
        for addr in addrs {
            for _ in 0..copies {
                slots.push(Slot::spawn(addr.clone(), shared.clone()));
            }
        }
        Pool {
            slots: RwLock::new(slots),
            next: AtomicUsize::new(0),
            changed,
            shutdown,
            background,
            connect_timeout,
            request_timeout,
            credentials,
            tls: shared.tls,
            liveness,
            turns: Arc::default(),
        }
    }

    /// Why no connection is usable, if it is the node refusing the
    /// credentials rather than no node being reachable.
    pub(crate) fn auth_refusal(&self) -> Option<Error> {
        self.slots().iter().find_map(|slot| slot.auth_refusal())
    }

    fn slots(&self) -> Vec<Arc<Slot>> {
        self.slots
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// How many connections are registered, usable or not.
    pub(crate) fn len(&self) -> usize {
        self.slots
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Every distinct address, in registration order.
    pub(crate) fn addresses(&self) -> Vec<String> {
        let mut addrs: Vec<String> = Vec::new();
        for slot in self.slots() {
            if !addrs.contains(&slot.addr) {
                addrs.push(slot.addr.clone());
            }
        }
        addrs
    }

    /// The next usable connection in round-robin order, if any.
    pub(crate) fn pick_now(&self) -> Option<Arc<Slot>> {
        let slots = self.slots.read().unwrap_or_else(PoisonError::into_inner);
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        (0..slots.len())
            .map(|i| &slots[start.wrapping_add(i) % slots.len()])
            .find(|slot| slot.is_usable())
            .cloned()
    }

    /// The next usable connection whose node speaks protocol 1.2, if any.
    pub(crate) fn pick_now_speaking_12(&self) -> Option<Arc<Slot>> {
        let slots = self.slots.read().unwrap_or_else(PoisonError::into_inner);
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        (0..slots.len())
            .map(|i| &slots[start.wrapping_add(i) % slots.len()])
            .find(|slot| slot.is_usable() && slot.speaks_12())
            .cloned()
    }

    /// A usable connection to `addr`, if one is up.
    pub(crate) fn usable_to(&self, addr: &str) -> Option<Arc<Slot>> {
        self.slots()
            .into_iter()
            .find(|slot| slot.addr == addr && slot.is_usable())
    }

    /// Like [`Pool::pick_now`], but waits for a connection to come back: at
    /// most one reconnect round, and never past `until`.
    pub(crate) async fn pick(&self, until: Option<Instant>) -> Option<Arc<Slot>> {
        let round = Instant::now() + RECONNECT_INTERVAL + self.connect_timeout;
        let until = until.map_or(round, |until| until.min(round));
        let mut changed = self.changed.subscribe();
        loop {
            if let Some(slot) = self.pick_now() {
                return Some(slot);
            }
            // A TLS mismatch does not heal by waiting for a reconnect.
            if self.tls_failure().is_some() {
                return None;
            }
            match tokio::time::timeout_at(until, changed.changed()).await {
                Ok(Ok(())) => {}
                _ => return None,
            }
        }
    }

    /// The connection for an acquire or a watch (`key`, its op and key)
    /// meant for `slot`'s node, with its turn of the key there: `slot` if
    /// its key is free on it, else another usable connection to the node
    /// where it is free, else the first to be free, waited for until
    /// `until` (see [`crate::turns`]). `slot` without a turn when no
    /// connection to the node is usable; `None` when the wait ran out.
    pub(crate) async fn take_turn(
        &self,
        slot: Arc<Slot>,
        key: MatchKey,
        until: Option<Instant>,
    ) -> Option<(Arc<Slot>, Option<Turn>)> {
        let line = (slot.addr.clone(), key);
        let usable = || {
            let same_node = self.slots().into_iter().filter(|s| s.addr == slot.addr);
            let usable = same_node.filter(|s| s.is_usable());
            // The one picked first, then the others in order.
            let (picked, others): (Vec<_>, Vec<_>) = usable.partition(|s| s.id == slot.id);
            picked.iter().chain(&others).map(|s| s.id).collect()
        };
        let mut others = self.changed.subscribe();
        match self.turns.take(&line, usable, &mut others, until).await {
            Ok(turn) => {
                let chosen = self.slots().into_iter().find(|s| s.id == turn.conn);
                Some(chosen.map_or((slot, None), |chosen| (chosen, Some(turn))))
            }
            Err(NoTurn::NoConnection) => Some((slot, None)),
            Err(NoTurn::WaitRanOut) => None,
        }
    }

    /// The connection a redirect points at, registering it if the address is
    /// new. A usable connection is preferred when several share the address;
    /// one that is down is dialled at once (the node the redirect names is
    /// likely up again), at most once a second.
    pub(crate) fn slot_for(&self, addr: &str) -> Arc<Slot> {
        let mut slots = self.slots.write().unwrap_or_else(PoisonError::into_inner);
        let known = slots.iter().filter(|slot| slot.addr == addr);
        if let Some(slot) = known.clone().find(|slot| slot.is_usable()) {
            return Arc::clone(slot);
        }
        if let Some(slot) = known.clone().next_back() {
            slot.dial_now();
            return Arc::clone(slot);
        }
        tracing::info!(%addr, "redirected to a new address; connecting to it");
        let slot = Slot::spawn(addr.to_owned(), self.shared());
        slots.push(Arc::clone(&slot));
        slot
    }

    fn shared(&self) -> Shared {
        Shared {
            connect_timeout: self.connect_timeout,
            changed: Arc::clone(&self.changed),
            shutdown: self.shutdown.subscribe(),
            background: Arc::clone(&self.background),
            credentials: self.credentials.clone(),
            tls: self.tls.clone(),
            liveness: self.liveness,
        }
    }

    /// The error for "no usable connection": [`Error::Tls`] when every
    /// connection failed for a TLS reason (retrying will not help), else
    /// [`Error::NoServer`].
    pub(crate) fn no_server(&self) -> Error {
        match self.tls_failure() {
            Some((addr, why)) => Error::Tls { addr, why },
            None => Error::NoServer,
        }
    }

    /// [`Pool::no_server`] for the connections to one address.
    pub(crate) fn no_server_at(&self, addr: &str) -> Error {
        let why = self
            .slots()
            .iter()
            .filter(|slot| slot.addr == addr)
            .find_map(|slot| slot.tls_failure());
        match why {
            Some(why) => Error::Tls {
                addr: addr.to_owned(),
                why,
            },
            None => Error::NoServer,
        }
    }

    /// The TLS failure of the connections, if every one's last attempt
    /// failed for a TLS reason.
    pub(crate) fn tls_failure(&self) -> Option<(String, String)> {
        let slots = self.slots();
        let mut first = None;
        for slot in &slots {
            let why = slot.tls_failure()?;
            first.get_or_insert((slot.addr.clone(), why));
        }
        first
    }

    /// Closes every connection for good (their supervisors end).
    pub(crate) fn shut_down(&self) {
        self.shutdown.send_replace(true);
    }

    pub(crate) fn is_shut_down(&self) -> bool {
        *self.shutdown.borrow()
    }

    /// Waits until every connection made its first attempt, bounded by the
    /// connect timeout (plus a little slack for task scheduling).
    pub(crate) async fn settle(&self) {
        let until = Instant::now() + self.connect_timeout + Duration::from_millis(200);
        let mut changed = self.changed.subscribe();
        while !self.slots().iter().all(|slot| slot.attempted()) {
            if !matches!(
                tokio::time::timeout_at(until, changed.changed()).await,
                Ok(Ok(()))
            ) {
                return;
            }
        }
    }
}
