//! fsync latency (`baton_fsync_seconds` in /metrics): how long each sync
//! of the node's durable state takes, by store. The hook is one call where
//! a store syncs: [`SyncHistogram::time`] around the sync. The histograms
//! are process-wide statics (batond runs one node per process), so the
//! stores need no handle threaded through them; a process running several
//! nodes (the simulations) sums their syncs.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use crate::metrics::HistogramSnapshot;

/// Upper bounds of the buckets, in microseconds (a last, unbounded bucket
/// is implied): 50 µs (a sync with nothing to write) to 10 s (a stalled disk).
pub const SYNC_BUCKETS_US: [u64; 14] = [
    50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 1_000_000,
    10_000_000,
];

/// The Raft log's syncs (a batch of appended entries, before it is acknowledged).
pub static FSYNC_RAFT_LOG: SyncHistogram = SyncHistogram::new();
/// The state file's syncs (a single or priority node's lock table and tokens).
pub static FSYNC_STATE_FILE: SyncHistogram = SyncHistogram::new();

/// A latency histogram over [`SYNC_BUCKETS_US`].
#[derive(Debug)]
pub struct SyncHistogram {
    /// Per bucket (not cumulative); the last is "above every bound".
    buckets: [AtomicU64; SYNC_BUCKETS_US.len() + 1],
    count: AtomicU64,
    sum_us: AtomicU64,
}

impl Default for SyncHistogram {
    fn default() -> Self {
        SyncHistogram::new()
    }
}

impl SyncHistogram {
    pub const fn new() -> SyncHistogram {
        SyncHistogram {
            buckets: [const { AtomicU64::new(0) }; SYNC_BUCKETS_US.len() + 1],
            count: AtomicU64::new(0),
            sum_us: AtomicU64::new(0),
        }
    }

    /// Runs `sync` and counts how long it took (failed syncs too: a disk
    /// that fails slowly is worth seeing).
    #[inline]
    pub fn time<T>(&self, sync: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
        let started = Instant::now();
        let result = sync();
        self.observe(started.elapsed());
        result
    }

    pub fn observe(&self, took: Duration) {
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        let i = SYNC_BUCKETS_US.partition_point(|&bound| bound < us);
        self.buckets[i].fetch_add(1, Relaxed);
        self.count.fetch_add(1, Relaxed);
        self.sum_us.fetch_add(us, Relaxed);
    }

    pub fn snapshot(&self) -> HistogramSnapshot {
        let bounds = SYNC_BUCKETS_US.iter().map(|&us| us as f64 / 1e6);
        let sum_seconds = self.sum_us.load(Relaxed) as f64 / 1e6;
        HistogramSnapshot::of(bounds, &self.buckets, sum_seconds)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syncs_are_counted_into_microsecond_buckets() {
        let h = SyncHistogram::new();
        h.observe(Duration::from_micros(30));
        h.observe(Duration::from_micros(700));
        h.observe(Duration::from_secs(20));
        let s = h.snapshot();
        assert_eq!(s.count, 3);
        assert_eq!(s.buckets[0], (0.00005, 1));
        assert_eq!(s.buckets[3], (0.0005, 0));
        assert_eq!(s.buckets[4], (0.001, 1));
        let last = s.buckets[SYNC_BUCKETS_US.len()];
        assert!(last.0.is_infinite() && last.1 == 1);
        assert!(s.sum_seconds >= 20.0007);
    }

    /// A failed sync is counted and its error passed on. Which bucket it
    /// lands in depends on the wall clock (a preempted test thread can take
    /// milliseconds to "fail instantly"), so only the count is checked.
    #[test]
    fn a_failed_sync_is_timed_and_its_error_returned() {
        let h = SyncHistogram::new();
        let failed: io::Result<()> = h.time(|| Err(io::Error::other("disk gone")));
        assert_eq!(
            failed.map_err(|e| e.to_string()),
            Err("disk gone".to_string())
        );
        let s = h.snapshot();
        assert_eq!(s.count, 1);
        let counted: u64 = s.buckets.iter().map(|b| b.1).sum();
        assert_eq!(counted, 1);
    }
}
