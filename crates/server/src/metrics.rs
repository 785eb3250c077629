//! What a node counts for its operator (`/metrics` of the HTTP endpoint,
//! `baton-http`): requests by op, outcomes, errors by reason, and three
//! latency histograms.
//!
//! Everything is a relaxed atomic: the counts are read by a scrape that
//! wants totals, not an order between them, and the hot path pays one
//! uncontended `fetch_add` per count (no lock, no allocation). The
//! histograms have fixed buckets in milliseconds, one `fetch_add` per
//! bucket hit and two for the count and sum. [`SharedLocks`] updates these
//! where requests and events already pass; the counts that only a
//! connection sees (malformed lines, `U`, connections) have hooks here for
//! the connection code.
//!
//! [`SharedLocks`]: crate::SharedLocks

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::OnceLock;

use baton_core::{Millis, Quota};
use baton_proto::Op;

/// The requests a node counts, by their kind, in the order `/metrics`
/// lists them.
pub const REQUEST_OPS: [Op; 8] = [
    Op::Acquire,
    Op::Release,
    Op::Renew,
    Op::Query,
    Op::Status,
    Op::Auth,
    Op::SetValue,
    Op::Watch,
];

/// The `op` label value of a request kind.
pub fn op_label(op: Op) -> &'static str {
    match op {
        Op::Acquire => "acquire",
        Op::Release => "release",
        Op::Renew => "renew",
        Op::Query => "query",
        Op::Status => "status",
        Op::Auth => "authenticate",
        Op::SetValue => "set_value",
        Op::Watch => "watch",
    }
}

/// Where `op` is counted: its place in [`REQUEST_OPS`] (an exhaustive
/// match, so a new kind is not counted out of bounds).
fn request_slot(op: Op) -> usize {
    match op {
        Op::Acquire => 0,
        Op::Release => 1,
        Op::Renew => 2,
        Op::Query => 3,
        Op::Status => 4,
        Op::Auth => 5,
        Op::SetValue => 6,
        Op::Watch => 7,
    }
}

/// Why a request was not served as asked, by reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorReason {
    /// `N`: no live grant with that token.
    NotHeld,
    /// `M`: this node does not serve (a standby, a follower).
    Redirected,
    /// `E A <key> too many locks`.
    TooManyLocks,
    /// `E A <key> too many waiters`.
    TooManyWaiters,
    /// `E W <key> too many watches` (the node's or the connection's cap).
    TooManyWatches,
    /// `E`: a malformed line or a value past a limit (connection hook).
    Malformed,
    /// `E ... authentication failed / required`, `permission denied`
    /// (connection hook).
    Unauthorized,
}

impl ErrorReason {
    pub const ALL: [ErrorReason; 7] = [
        ErrorReason::NotHeld,
        ErrorReason::Redirected,
        ErrorReason::TooManyLocks,
        ErrorReason::TooManyWaiters,
        ErrorReason::Malformed,
        ErrorReason::Unauthorized,
        ErrorReason::TooManyWatches,
    ];

    /// The `reason` label value.
    pub fn label(self) -> &'static str {
        match self {
            ErrorReason::NotHeld => "not_held",
            ErrorReason::Redirected => "redirected",
            ErrorReason::TooManyLocks => "too_many_locks",
            ErrorReason::TooManyWaiters => "too_many_waiters",
            ErrorReason::Malformed => "malformed",
            ErrorReason::Unauthorized => "unauthorized",
            ErrorReason::TooManyWatches => "too_many_watches",
        }
    }
}

/// Upper bounds of the histogram buckets, in milliseconds (a last,
/// unbounded bucket is implied): 1 ms to 1 h, about 2.5x apart.
pub const BUCKETS_MS: [u64; 15] = [
    1, 2, 5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 10_000, 60_000, 600_000, 3_600_000,
];

/// A latency histogram over [`BUCKETS_MS`].
#[derive(Debug, Default)]
pub struct Histogram {
    /// Per bucket (not cumulative); the last is "above every bound".
    buckets: [AtomicU64; BUCKETS_MS.len() + 1],
    count: AtomicU64,
    sum_ms: AtomicU64,
}

/// A histogram's values at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramSnapshot {
    /// `(upper bound in seconds, observations in this bucket alone)`, the
    /// last bound `+Inf`: not cumulative, as `prometheus-client`'s encoder
    /// takes them (it writes the cumulative `_bucket` series).
    pub buckets: Vec<(f64, u64)>,
    pub count: u64,
    pub sum_seconds: f64,
}

impl HistogramSnapshot {
    /// The counts of `buckets` under `bounds` (in seconds; the last bucket
    /// is `+Inf`). The count is the buckets' total, so that `+Inf` and
    /// `_count` agree even while observations land during the scrape.
    pub fn of(
        bounds: impl Iterator<Item = f64>,
        buckets: &[AtomicU64],
        sum_seconds: f64,
    ) -> HistogramSnapshot {
        let mut total = 0;
        let buckets = bounds
            .chain(std::iter::once(f64::INFINITY))
            .zip(buckets)
            .map(|(bound, n)| {
                let n = n.load(Relaxed);
                total += n;
                (bound, n)
            })
            .collect();
        HistogramSnapshot {
            buckets,
            count: total,
            sum_seconds,
        }
    }
}

impl Histogram {
    /// Counts one observation of `ms` milliseconds.
    #[inline]
    pub fn observe(&self, ms: Millis) {
        let i = BUCKETS_MS.partition_point(|&bound| bound < ms);
        self.buckets[i].fetch_add(1, Relaxed);
        self.count.fetch_add(1, Relaxed);
        self.sum_ms.fetch_add(ms, Relaxed);
    }

    pub fn snapshot(&self) -> HistogramSnapshot {
        let bounds = BUCKETS_MS.iter().map(|&ms| ms as f64 / 1000.0);
        let sum_seconds = self.sum_ms.load(Relaxed) as f64 / 1000.0;
        HistogramSnapshot::of(bounds, &self.buckets, sum_seconds)
    }
}

/// The node's counts. One per node, inside its [`SharedLocks`](crate::SharedLocks).
#[derive(Debug, Default)]
pub struct Metrics {
    requests: [AtomicU64; REQUEST_OPS.len()],
    errors: [AtomicU64; ErrorReason::ALL.len()],
    grants: AtomicU64,
    releases: AtomicU64,
    renewals: AtomicU64,
    wait_timeouts: AtomicU64,
    /// Waiters sent elsewhere because this node stopped serving.
    waiters_moved: AtomicU64,
    /// Watches answered (at once, on a change, or when their wait ran out).
    watches_answered: AtomicU64,
    /// Values set or cleared (`V`).
    values_set: AtomicU64,
    connections_open: AtomicI64,
    connections_total: AtomicU64,
    /// Request received to grant.
    pub acquire_wait: Histogram,
    /// Grant to its end: a release, or its lease's end for a grant that
    /// expired (see `lease_ends`).
    pub hold: Histogram,
    /// Release received to the next waiter's grant of the same key.
    pub handover: Histogram,
    /// Set once, as the server starts.
    started: OnceLock<Started>,
}

/// What the server was started with, for alerts that compare a gauge with
/// its cap (`baton_connections_open` with `baton_max_connections`) and
/// that see a restart (`baton_start_time_seconds` moves).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Started {
    /// `--max-connections`.
    pub max_connections: u64,
    /// `--max-locks`, `--max-waiters`.
    pub max_locks: u64,
    pub max_waiters: u64,
    /// The wall clock when the server started, in ms since the Unix epoch.
    pub at_unix_ms: u64,
}

/// A plain count of [`Metrics`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Count {
    Grants,
    Releases,
    Renewals,
    WaitTimeouts,
    WaitersMoved,
    ConnectionsTotal,
    WatchesAnswered,
    ValuesSet,
}

impl Metrics {
    #[inline]
    pub fn request(&self, op: Op) {
        self.requests[request_slot(op)].fetch_add(1, Relaxed);
    }

    #[inline]
    pub fn error(&self, reason: ErrorReason) {
        self.errors[reason as usize].fetch_add(1, Relaxed);
    }

    #[inline]
    pub(crate) fn add(&self, count: Count, n: u64) {
        self.counter(count).fetch_add(n, Relaxed);
    }

    fn counter(&self, count: Count) -> &AtomicU64 {
        match count {
            Count::Grants => &self.grants,
            Count::Releases => &self.releases,
            Count::Renewals => &self.renewals,
            Count::WaitTimeouts => &self.wait_timeouts,
            Count::WaitersMoved => &self.waiters_moved,
            Count::ConnectionsTotal => &self.connections_total,
            Count::WatchesAnswered => &self.watches_answered,
            Count::ValuesSet => &self.values_set,
        }
    }

    /// Hook for the accept loop: a client connection was admitted.
    #[inline]
    pub fn connection_opened(&self) {
        self.connections_open.fetch_add(1, Relaxed);
        self.connections_total.fetch_add(1, Relaxed);
    }

    /// Hook for the accept loop: an admitted client connection ended.
    #[inline]
    pub fn connection_closed(&self) {
        self.connections_open.fetch_sub(1, Relaxed);
    }

    pub fn requests(&self, op: Op) -> u64 {
        self.requests[request_slot(op)].load(Relaxed)
    }

    pub fn errors(&self, reason: ErrorReason) -> u64 {
        self.errors[reason as usize].load(Relaxed)
    }

    pub fn count(&self, count: Count) -> u64 {
        self.counter(count).load(Relaxed)
    }

    /// Client connections open now (0 until the accept loop calls the hooks).
    pub fn connections_open(&self) -> i64 {
        self.connections_open.load(Relaxed).max(0)
    }

    /// Records the caps the server starts with, and when (the first call
    /// counts: a node starts its server once).
    pub fn started(&self, max_connections: usize, quota: Quota, at_unix_ms: u64) {
        let wide = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
        let _ = self.started.set(Started {
            max_connections: wide(max_connections),
            max_locks: wide(quota.max_locks),
            max_waiters: wide(quota.max_waiters),
            at_unix_ms,
        });
    }

    /// The caps and start time, once the server has started.
    pub fn start(&self) -> Option<Started> {
        self.started.get().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_histogram_counts_each_bucket_with_an_infinite_last_one() {
        let h = Histogram::default();
        for ms in [0, 1, 2, 3, 1_000, 4_000_000] {
            h.observe(ms);
        }
        let s = h.snapshot();
        assert_eq!(s.count, 6);
        assert_eq!(s.buckets[0], (0.001, 2), "0 and 1 ms are at most 1 ms");
        assert_eq!(s.buckets[1], (0.002, 1));
        assert_eq!(s.buckets[2], (0.005, 1));
        assert_eq!(s.buckets[9], (1.0, 1));
        assert_eq!(s.buckets[BUCKETS_MS.len() - 1].1, 0);
        let last = s.buckets[BUCKETS_MS.len()];
        assert!(last.0.is_infinite());
        assert_eq!(last.1, 1);
        assert!((s.sum_seconds - 4_001.006).abs() < 1e-9);
    }

    #[test]
    fn each_request_kind_has_its_own_slot_and_label() {
        for (i, op) in REQUEST_OPS.into_iter().enumerate() {
            assert_eq!(request_slot(op), i, "{op}");
        }
        let labels: std::collections::HashSet<_> = REQUEST_OPS.map(op_label).into();
        assert_eq!(labels.len(), REQUEST_OPS.len());
    }

    #[test]
    fn the_start_is_recorded_once() {
        let m = Metrics::default();
        assert_eq!(m.start(), None);
        let quota = Quota {
            max_locks: 7,
            max_waiters: 9,
            ..Quota::default()
        };
        m.started(5, quota, 1_000);
        m.started(6, Quota::default(), 2_000);
        let want = Started {
            max_connections: 5,
            max_locks: 7,
            max_waiters: 9,
            at_unix_ms: 1_000,
        };
        assert_eq!(m.start(), Some(want));
    }

    #[test]
    fn counts_are_kept_apart() {
        let m = Metrics::default();
        m.request(Op::Acquire);
        m.request(Op::Acquire);
        m.error(ErrorReason::NotHeld);
        m.add(Count::Grants, 3);
        m.connection_opened();
        m.connection_opened();
        m.connection_closed();
        assert_eq!(m.requests(Op::Acquire), 2);
        assert_eq!(m.requests(Op::Release), 0);
        assert_eq!(m.errors(ErrorReason::NotHeld), 1);
        assert_eq!(m.count(Count::Grants), 3);
        assert_eq!(m.connections_open(), 1);
        assert_eq!(m.count(Count::ConnectionsTotal), 2);
    }
}
