//! What the endpoint reads of its node, whatever the node's mode: the
//! status, counters, members and locks through [`NodeView`] (implemented
//! for every [`SharedLocks`]), and what the server around it knows
//! ([`HttpContext`]: its address, its users, whether its storage failed).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};

use baton_core::{Key, Token};
use baton_server::inspect::{LockPage, LockQuery};
use baton_server::{Auth, ForceRelease, LockNode, Metrics, Observed, Served, SharedLocks};

/// The future of a [`NodeView::force_release`].
pub type ReleaseFuture<'a> = Pin<Box<dyn Future<Output = ForceRelease> + Send + 'a>>;

/// A node as the endpoint sees it. Every call takes the node's mutex
/// once, for one read.
pub trait NodeView: Send + Sync + 'static {
    /// Status, engine counters, members and health issue, read together.
    fn observe(&self) -> Observed;
    /// One page of held locks.
    fn list_locks(&self, query: &LockQuery) -> Served<LockPage>;
    /// The node's counts (atomics, read without the mutex).
    fn metrics(&self) -> &Metrics;
    /// Releases the grant of `key` that carries `token`, as a client's `R`
    /// would (the console's force-release).
    fn force_release<'a>(&'a self, key: &'a Key, token: Token) -> ReleaseFuture<'a>;
}

impl<N: LockNode> NodeView for SharedLocks<N> {
    fn observe(&self) -> Observed {
        SharedLocks::observe(self)
    }

    fn list_locks(&self, query: &LockQuery) -> Served<LockPage> {
        SharedLocks::list_locks(self, query)
    }

    fn metrics(&self) -> &Metrics {
        SharedLocks::metrics(self)
    }

    fn force_release<'a>(&'a self, key: &'a Key, token: Token) -> ReleaseFuture<'a> {
        Box::pin(SharedLocks::force_release(self, key, token))
    }
}

/// Set once when the node's state can no longer be saved (the node then
/// stops, but answers 503 until it is gone). Clones share it.
#[derive(Debug, Clone, Default)]
pub struct StorageHealth(Arc<OnceLock<String>>);

impl StorageHealth {
    /// Records the failure (the first one is kept).
    pub fn failed(&self, reason: impl Into<String>) {
        let _ = self.0.set(reason.into());
    }

    pub fn failure(&self) -> Option<&str> {
        self.0.get().map(String::as_str)
    }
}

/// What the endpoint serves from.
#[derive(Clone)]
pub struct HttpContext {
    pub node: Arc<dyn NodeView>,
    /// This node's client address as its peers and clients know it (`self=` in `S`).
    pub self_addr: String,
    /// The users of `--auth-file`: the `/v1/` routes then need an admin.
    pub auth: Option<Arc<Auth>>,
    pub storage: StorageHealth,
    /// A Raft node's membership changes (`/v1/members`); `None` elsewhere.
    pub members: Option<Arc<dyn crate::members::MembershipAdmin>>,
    /// The recent changes the endpoint saw (the console's).
    pub changes: Arc<crate::changes::ChangeLog>,
}

impl std::fmt::Debug for HttpContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpContext")
            .field("self_addr", &self.self_addr)
            .field("auth", &self.auth.is_some())
            .field("storage", &self.storage)
            .finish_non_exhaustive()
    }
}

impl HttpContext {
    pub fn new(node: Arc<dyn NodeView>, self_addr: String, auth: Option<Arc<Auth>>) -> HttpContext {
        HttpContext {
            node,
            self_addr,
            auth,
            storage: StorageHealth::default(),
            members: None,
            changes: Arc::default(),
        }
    }
}
