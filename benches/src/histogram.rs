//! A fixed-size log-linear latency histogram. Recording is one array
//! increment, so the driver can record every cycle without its own cost
//! showing in the figures; values keep better than 1% relative precision.

use std::time::Duration;

/// Values below this are counted exactly, one bucket each.
const EXACT: u64 = 256;
/// Sub-buckets per power of two above `EXACT`: 2^7, so under 1% error.
const SUB_BITS: u32 = 7;
const SUB: u64 = 1 << SUB_BITS;
/// Powers of two from 2^8 to 2^63.
const BUCKETS: usize = EXACT as usize + (64 - 8) * SUB as usize;

/// Latencies in nanoseconds.
#[derive(Clone, Debug)]
pub struct Histogram {
    counts: Vec<u64>,
    total: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self::new()
    }
}

impl Histogram {
    pub fn new() -> Self {
        Self {
            counts: vec![0; BUCKETS],
            total: 0,
        }
    }

    pub fn record(&mut self, latency: Duration) {
        let nanos = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        self.counts[index(nanos)] += 1;
        self.total += 1;
    }

    pub fn len(&self) -> u64 {
        self.total
    }

    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    pub fn merge(&mut self, other: &Histogram) {
        for (mine, theirs) in self.counts.iter_mut().zip(&other.counts) {
            *mine += theirs;
        }
        self.total += other.total;
    }

    /// The value at quantile `q` (0 < q <= 1): the smallest recorded value
    /// with at least `q` of all values at or below it. `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        if self.total == 0 {
            return None;
        }
        // Nearest-rank: rank 1 is the smallest value.
        let rank = ((q.clamp(0.0, 1.0) * self.total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (bucket, count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return Some(Duration::from_nanos(midpoint(bucket)));
            }
        }
        None
    }
}

fn index(nanos: u64) -> usize {
    if nanos < EXACT {
        return nanos as usize;
    }
    let power = 63 - nanos.leading_zeros(); // >= 8
    let shift = power - SUB_BITS;
    let sub = (nanos >> shift) - SUB; // in 0..SUB
    EXACT as usize + (power as usize - 8) * SUB as usize + sub as usize
}

/// The middle of the value range a bucket covers.
fn midpoint(bucket: usize) -> u64 {
    let bucket = bucket as u64;
    if bucket < EXACT {
        return bucket;
    }
    let above = bucket - EXACT;
    let power = above / SUB + 8;
    let shift = power - u64::from(SUB_BITS);
    let low = (SUB + above % SUB) << shift;
    low + (1 << shift) / 2
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test
mod tests {
    use super::*;

    fn nanos(d: Option<Duration>) -> u64 {
        d.unwrap().as_nanos() as u64
    }

    #[test]
    fn small_values_are_exact() {
        let mut h = Histogram::new();
        for v in 1..=100u64 {
            h.record(Duration::from_nanos(v));
        }
        assert_eq!(h.len(), 100);
        assert_eq!(nanos(h.quantile(0.5)), 50);
        assert_eq!(nanos(h.quantile(0.99)), 99);
        assert_eq!(nanos(h.quantile(1.0)), 100);
        assert_eq!(nanos(h.quantile(0.001)), 1);
    }

    #[test]
    fn large_values_within_one_percent() {
        let mut v = 257u64;
        while v < u64::MAX / 3 {
            let mut h = Histogram::new();
            h.record(Duration::from_nanos(v));
            let got = nanos(h.quantile(0.5)) as f64;
            let err = (got - v as f64).abs() / v as f64;
            assert!(err < 0.01, "{v} came back as {got}");
            v = v * 3 + 7;
        }
    }

    #[test]
    fn every_bucket_round_trips() {
        for bucket in 0..BUCKETS {
            assert_eq!(index(midpoint(bucket)), bucket, "bucket {bucket}");
        }
        assert_eq!(index(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn percentiles_of_a_skewed_distribution() {
        let mut h = Histogram::new();
        for _ in 0..990 {
            h.record(Duration::from_micros(10));
        }
        for _ in 0..10 {
            h.record(Duration::from_millis(5));
        }
        let p50 = nanos(h.quantile(0.5)) as f64;
        let p99 = nanos(h.quantile(0.99)) as f64;
        let p999 = nanos(h.quantile(0.999)) as f64;
        assert!((p50 - 10_000.0).abs() < 100.0, "{p50}");
        assert!((p99 - 10_000.0).abs() < 100.0, "{p99}");
        assert!((p999 - 5_000_000.0).abs() < 50_000.0, "{p999}");
    }

    #[test]
    fn merge_adds_counts() {
        let mut a = Histogram::new();
        let mut b = Histogram::new();
        a.record(Duration::from_nanos(10));
        b.record(Duration::from_nanos(20));
        b.record(Duration::from_nanos(30));
        a.merge(&b);
        assert_eq!(a.len(), 3);
        assert_eq!(nanos(a.quantile(0.5)), 20);
        assert_eq!(nanos(a.quantile(1.0)), 30);
    }

    #[test]
    fn empty_has_no_quantile() {
        let h = Histogram::new();
        assert!(h.is_empty());
        assert_eq!(h.quantile(0.5), None);
    }
}
