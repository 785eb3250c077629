//! Keeps a slowloris from filling `--max-connections`.
//!
//! The rule: when the node is at its connection limit, a newcomer is not
//! refused if some connection has had an unfinished line (for a
//! connection that never finished one: since it connected) for longer
//! than [`EVICT_GRACE`]. The one whose unfinished line is the oldest is
//! closed instead, and the newcomer takes its place. A connection that
//! finishes its lines promptly (every well-behaved client, idle or busy)
//! is never evicted; one that dribbles bytes or sends nothing is, and
//! otherwise its line timeout closes it anyway. So attackers holding
//! every slot with unfinished lines can only push each other out.
//!
//! Each connection publishes when its unfinished line began in a
//! [`ConnWatch`]: one relaxed store when a line is left unfinished or
//! finishes, nothing per request. Only a newcomer at the limit scans them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How long a line must have been unfinished before its connection may be
/// evicted for a newcomer.
pub const EVICT_GRACE: Duration = Duration::from_secs(1);

/// What the node sees of one connection.
#[derive(Debug)]
pub(crate) struct ConnWatch {
    epoch: Instant,
    /// Milliseconds since `epoch` plus one when the unfinished line began;
    /// 0 when no line is unfinished.
    line_since: AtomicU64,
    evicted: AtomicBool,
    /// Cancelled to close the connection (a child of the node's shutdown).
    close: CancellationToken,
}

impl ConnWatch {
    fn new(epoch: Instant, close: CancellationToken, connected: Instant) -> ConnWatch {
        let watch = ConnWatch {
            epoch,
            line_since: AtomicU64::new(0),
            evicted: AtomicBool::new(false),
            close,
        };
        watch.set_line_since(Some(connected));
        watch
    }

    #[cfg(test)]
    pub(crate) fn for_test() -> ConnWatch {
        let now = Instant::now();
        ConnWatch::new(now, CancellationToken::new(), now)
    }

    pub(crate) fn set_line_since(&self, since: Option<Instant>) {
        let value = since.map_or(0, |at| {
            at.saturating_duration_since(self.epoch).as_millis() as u64 + 1
        });
        self.line_since.store(value, Ordering::Relaxed);
    }

    /// Whether the node closed this connection for a newcomer.
    pub(crate) fn evicted(&self) -> bool {
        self.evicted.load(Ordering::Acquire)
    }

    /// The token the connection stops on.
    #[cfg(test)]
    pub(crate) fn close_token(&self) -> &CancellationToken {
        &self.close
    }
}

/// Every open connection of a node, for eviction.
#[derive(Debug)]
pub(crate) struct Connections {
    epoch: Instant,
    next_id: AtomicU64,
    open: Mutex<HashMap<u64, Arc<ConnWatch>>>,
}

/// A registered connection; unregisters it when dropped.
#[derive(Debug)]
pub(crate) struct Registered {
    id: u64,
    pub(crate) watch: Arc<ConnWatch>,
    connections: Arc<Connections>,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.connections.locked().remove(&self.id);
    }
}

impl Connections {
    pub(crate) fn new() -> Arc<Connections> {
        Arc::new(Connections {
            epoch: Instant::now(),
            next_id: AtomicU64::new(0),
            open: Mutex::new(HashMap::new()),
        })
    }

    fn locked(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<ConnWatch>>> {
        self.open
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Registers a connection accepted now that stops on `close`.
    pub(crate) fn register(self: &Arc<Self>, close: CancellationToken) -> Registered {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let watch = Arc::new(ConnWatch::new(self.epoch, close, Instant::now()));
        self.locked().insert(id, watch.clone());
        Registered {
            id,
            watch,
            connections: self.clone(),
        }
    }

    /// Closes the connection whose unfinished line is the oldest, if it is
    /// older than `grace` at `now`; whether one was.
    pub(crate) fn evict_oldest(&self, now: Instant, grace: Duration) -> bool {
        // No line began before the registry did.
        let Some(cutoff) = now
            .checked_sub(grace)
            .and_then(|cutoff| cutoff.checked_duration_since(self.epoch))
        else {
            return false;
        };
        let cutoff_ms = cutoff.as_millis() as u64 + 1;
        let open = self.locked();
        let oldest = open
            .values()
            .filter(|w| !w.evicted.load(Ordering::Relaxed))
            .map(|w| (w.line_since.load(Ordering::Relaxed), w))
            .filter(|(since, _)| *since != 0 && *since <= cutoff_ms)
            .min_by_key(|(since, _)| *since);
        let Some((_, victim)) = oldest else {
            return false;
        };
        victim.evicted.store(true, Ordering::Release);
        victim.close.cancel();
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_oldest_unfinished_line_past_the_grace_goes() {
        let connections = Connections::new();
        let old = connections.register(CancellationToken::new());
        tokio::time::advance(Duration::from_secs(2)).await;
        let newer = connections.register(CancellationToken::new());
        let finished = connections.register(CancellationToken::new());
        finished.watch.set_line_since(None);
        tokio::time::advance(Duration::from_millis(500)).await;
        // Only `old` is past the grace.
        assert!(connections.evict_oldest(Instant::now(), EVICT_GRACE));
        assert!(old.watch.evicted() && old.watch.close_token().is_cancelled());
        // `newer` is 0.5 s old: within the grace. `finished` has no line.
        assert!(!connections.evict_oldest(Instant::now(), EVICT_GRACE));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(connections.evict_oldest(Instant::now(), EVICT_GRACE));
        assert!(newer.watch.evicted());
        assert!(!finished.watch.evicted());
        assert!(!connections.evict_oldest(Instant::now(), EVICT_GRACE));
    }

    #[tokio::test(start_paused = true)]
    async fn nothing_is_past_the_grace_in_the_first_second() {
        let connections = Connections::new();
        let _silent = connections.register(CancellationToken::new());
        tokio::time::advance(Duration::from_millis(999)).await;
        assert!(!connections.evict_oldest(Instant::now(), EVICT_GRACE));
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(connections.evict_oldest(Instant::now(), EVICT_GRACE));
    }

    #[tokio::test(start_paused = true)]
    async fn a_closed_connection_leaves_the_registry() {
        let connections = Connections::new();
        drop(connections.register(CancellationToken::new()));
        tokio::time::advance(Duration::from_secs(5)).await;
        assert!(!connections.evict_oldest(Instant::now(), EVICT_GRACE));
    }
}
