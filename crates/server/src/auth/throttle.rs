//! Slowing down secret guessing, and logging refusals without flooding
//! the log.
//!
//! Per source (an IPv4 address, or the /64 of an IPv6 one, since one host
//! commonly holds a whole /64), failed `U` requests draw from a bucket of
//! [`FAIL_BURST`] that refills at [`FAIL_REFILL_PER_SEC`]. While the bucket
//! is empty, every `U` from that source fails without its secret being
//! looked at, right or wrong, until the bucket refills: a guesser gets
//! about one try a second per address, whatever the number of connections,
//! and a legitimate client behind that address waits seconds, not forever.
//! (Each failed `U` also holds its own connection for [`FAIL_DELAY`]; see
//! the session.) Refusals (failed `U`, `authentication required`,
//! `permission denied`) are logged at most once per source per
//! [`LOG_INTERVAL`], with how many there were since the last line.
//!
//! One short mutex, taken only on those refusals and on `U`, never on a
//! permitted request, never across an await. The map is bounded by
//! [`MAX_SOURCES`]; past it, sources share one overflow entry.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use baton_core::LogGate;

/// Failed `U` requests a source may make at once.
pub const FAIL_BURST: u32 = 10;
/// How fast a source's failures are forgiven.
pub const FAIL_REFILL_PER_SEC: u32 = 1;
/// How long a failed `U` holds its connection before it is answered and
/// the connection reads on.
pub const FAIL_DELAY: Duration = Duration::from_millis(250);
/// At most one log line per source per this.
pub const LOG_INTERVAL: Duration = Duration::from_secs(60);
/// Sources tracked at once.
pub use baton_core::MAX_SOURCES;

/// Who a refusal is counted against.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Source {
    V4([u8; 4]),
    /// The first 64 bits.
    V6([u8; 8]),
    /// No address (an in-memory connection), or the overflow entry.
    Unknown,
}

impl Source {
    pub(crate) fn of(addr: Option<IpAddr>) -> Source {
        match addr.map(|a| a.to_canonical()) {
            Some(IpAddr::V4(v4)) => Source::V4(v4.octets()),
            Some(IpAddr::V6(v6)) => {
                let mut first = [0u8; 8];
                first.copy_from_slice(&v6.octets()[..8]);
                Source::V6(first)
            }
            None => Source::Unknown,
        }
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::V4(o) => write!(f, "{}", std::net::Ipv4Addr::from(*o)),
            Source::V6(o) => {
                let mut full = [0u8; 16];
                full[..8].copy_from_slice(o);
                write!(f, "{}/64", std::net::Ipv6Addr::from(full))
            }
            Source::Unknown => f.write_str("unknown"),
        }
    }
}

/// Kinds of refusal, counted for the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    Failed = 0,
    Required = 1,
    Denied = 2,
}

#[derive(Debug)]
struct Record {
    /// Failures still allowed, in thousandths (refilled continuously).
    allowance_milli: u64,
    refilled: Instant,
    counts: [u64; 3],
    /// The counts say how many were held back; its own count is unused.
    log: LogGate<Instant>,
}

impl Record {
    fn new(now: Instant) -> Record {
        Record {
            allowance_milli: u64::from(FAIL_BURST) * 1000,
            refilled: now,
            counts: [0; 3],
            log: LogGate::default(),
        }
    }

    fn refill(&mut self, now: Instant) {
        let ms = now.saturating_duration_since(self.refilled).as_millis();
        let gained = u64::try_from(ms).unwrap_or(u64::MAX) * u64::from(FAIL_REFILL_PER_SEC);
        self.allowance_milli = self
            .allowance_milli
            .saturating_add(gained)
            .min(u64::from(FAIL_BURST) * 1000);
        self.refilled = now;
    }

    /// Whether the record says nothing a fresh one would not.
    fn idle(&self, now: Instant) -> bool {
        self.allowance_milli >= u64::from(FAIL_BURST) * 1000
            && self.counts == [0; 3]
            && !self.log.is_recent(now, LOG_INTERVAL)
    }
}

/// The shared refusal accounting of one node.
#[derive(Debug, Default)]
pub(crate) struct Throttle {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    records: HashMap<Source, Record>,
    /// When idle records were last dropped: at most once a second, so a
    /// full map does not cost a scan per refusal.
    pruned: Option<Instant>,
}

/// How often a full map is scanned for idle records.
const PRUNE_EVERY: Duration = Duration::from_secs(1);

impl Throttle {
    /// Whether `source` may try a secret now (its bucket is not empty).
    pub(crate) fn may_try(&self, source: Source) -> bool {
        let now = Instant::now();
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        match state.records.get_mut(&source) {
            None => true,
            Some(record) => {
                record.refill(now);
                record.allowance_milli >= 1000
            }
        }
    }

    /// Counts a refusal against `source`, and logs if it is time to.
    pub(crate) fn refused(&self, source: Source, kind: Refusal, user: &[u8]) {
        let now = Instant::now();
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let source = state.room_for(source, now);
        let record = state
            .records
            .entry(source)
            .or_insert_with(|| Record::new(now));
        if kind == Refusal::Failed {
            record.refill(now);
            record.allowance_milli = record.allowance_milli.saturating_sub(1000);
        }
        record.counts[kind as usize] += 1;
        if record.log.note(now, LOG_INTERVAL).is_some() {
            let [failed, required, denied] = std::mem::take(&mut record.counts);
            tracing::warn!(
                %source,
                last_user = %String::from_utf8_lossy(user),
                failed,
                required,
                denied,
                "refused client requests (authentication failed, authentication required, permission denied); at most one line per source per minute"
            );
        }
    }
}

impl State {
    /// The entry `source` may use: its own, unless the map is full of busy
    /// sources, then the shared overflow entry (one slot is kept for it).
    fn room_for(&mut self, source: Source, now: Instant) -> Source {
        let own_limit = MAX_SOURCES - 1;
        if self.records.len() < own_limit || self.records.contains_key(&source) {
            return source;
        }
        if self
            .pruned
            .is_none_or(|at| now.saturating_duration_since(at) >= PRUNE_EVERY)
        {
            self.pruned = Some(now);
            self.records.retain(|_, record| {
                record.refill(now);
                !record.idle(now)
            });
        }
        if self.records.len() < own_limit {
            source
        } else {
            Source::Unknown
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_of_failures_empties_the_bucket() {
        let throttle = Throttle::default();
        let source = Source::of(Some([10, 0, 0, 1].into()));
        let other = Source::of(Some([10, 0, 0, 2].into()));
        for _ in 0..FAIL_BURST {
            assert!(throttle.may_try(source));
            throttle.refused(source, Refusal::Failed, b"u");
        }
        assert!(!throttle.may_try(source));
        assert!(throttle.may_try(other), "another address is not affected");
        // Other refusals do not draw from the bucket.
        throttle.refused(other, Refusal::Denied, b"u");
        throttle.refused(other, Refusal::Required, b"u");
        assert!(throttle.may_try(other));
    }

    #[test]
    fn ipv6_sources_are_their_64() {
        let a: IpAddr = "2001:db8:1:2::1".parse().unwrap_or_else(|e| panic!("{e}"));
        let b: IpAddr = "2001:db8:1:2:ffff::9"
            .parse()
            .unwrap_or_else(|e| panic!("{e}"));
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(Source::of(Some(a)), Source::of(Some(b)));
        assert_ne!(Source::of(Some(a)), Source::of(Some(c)));
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(Source::of(Some(mapped)), Source::V4([10, 0, 0, 1]));
        assert_eq!(Source::of(Some(a)).to_string(), "2001:db8:1:2::/64");
    }

    #[test]
    fn the_map_stays_bounded() {
        let throttle = Throttle::default();
        for i in 0..(MAX_SOURCES as u32 + 100) {
            let ip = std::net::Ipv4Addr::from(0x0a00_0000 + i);
            throttle.refused(Source::of(Some(ip.into())), Refusal::Failed, b"u");
        }
        let state = throttle
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        assert!(state.records.len() <= MAX_SOURCES);
    }
}
