//! Logs refused peer connections once per source per interval, with how
//! many were refused quietly since: a flood of forged handshakes must not
//! become a flood of log lines. A source is an address (handshakes that
//! failed, before the peer said who it is) or the name a peer gives
//! itself (peers refused for another peer list). Past [`MAX_SOURCES`]
//! sources, the sources beyond share one line per interval.

use std::collections::HashMap;
use std::fmt::Display;
use std::hash::Hash;
use std::net::IpAddr;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use baton_core::{LogGate, MAX_SOURCES};
use tokio::time::Instant;

/// One log line per source address per this.
pub const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(60);

/// When a source was last logged, and its refusals held back since.
type Source = LogGate<std::time::Instant>;

#[derive(Debug)]
struct Sources<K> {
    by_addr: HashMap<K, Source>,
    /// Refusals from sources that found the table full.
    overflow: Option<Source>,
}

/// The refusal log of one node, for one kind of refusal.
#[derive(Debug)]
pub struct RefusalLog<K = IpAddr> {
    sources: Mutex<Sources<K>>,
    /// The log line's message.
    what: &'static str,
}

impl Default for RefusalLog<IpAddr> {
    fn default() -> Self {
        // The reason says what was wrong (a key, a node id, a hello): the
        // line must not guess.
        RefusalLog::new("refused a peer connection")
    }
}

impl<K: Hash + Eq + Display> RefusalLog<K> {
    /// A log whose lines say `what`.
    pub fn new(what: &'static str) -> RefusalLog<K> {
        RefusalLog {
            sources: Mutex::new(Sources {
                by_addr: HashMap::new(),
                overflow: None,
            }),
            what,
        }
    }

    /// Notes a refused peer connection from `from`; logs it unless that
    /// source was logged within the interval. Returns whether it logged.
    pub fn refused(&self, from: K, reason: &dyn Display) -> bool {
        let what = self.what;
        let now = Instant::now().into_std();
        let mut sources = self.sources.lock().unwrap_or_else(PoisonError::into_inner);
        if !sources.by_addr.contains_key(&from) && sources.by_addr.len() >= MAX_SOURCES {
            sources
                .by_addr
                .retain(|_, s| s.is_recent(now, REFUSAL_LOG_INTERVAL));
        }
        if !sources.by_addr.contains_key(&from) && sources.by_addr.len() >= MAX_SOURCES {
            let overflow = sources.overflow.get_or_insert_with(Source::default);
            let Some(quiet) = overflow.note(now, REFUSAL_LOG_INTERVAL) else {
                return false;
            };
            tracing::warn!(
                %reason,
                refused_quietly = quiet,
                "{what}, from many sources"
            );
            return true;
        }
        let mut source = sources.by_addr.get(&from).copied().unwrap_or_default();
        let logged = source.note(now, REFUSAL_LOG_INTERVAL);
        if let Some(quiet) = logged {
            log_refusal(what, &from, reason, quiet);
        }
        sources.by_addr.insert(from, source);
        logged.is_some()
    }
}

fn log_refusal(what: &str, from: &dyn Display, reason: &dyn Display, quiet: u64) {
    tracing::warn!(%from, %reason, refused_quietly = quiet, "{what}");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([127, 0, 0, last])
    }

    #[tokio::test(start_paused = true)]
    async fn one_line_per_address_per_interval() {
        let log = RefusalLog::default();
        assert!(log.refused(ip(1), &"wrong key"));
        for _ in 0..100 {
            assert!(!log.refused(ip(1), &"wrong key"));
        }
        assert!(log.refused(ip(2), &"wrong key"), "another address logs");
        tokio::time::advance(REFUSAL_LOG_INTERVAL).await;
        assert!(
            log.refused(ip(1), &"wrong key"),
            "logs again after the interval"
        );
        assert!(!log.refused(ip(1), &"wrong key"));
    }

    #[tokio::test(start_paused = true)]
    async fn many_addresses_share_a_line_and_memory_stays_bounded() {
        let log = RefusalLog::default();
        let mut logged = 0;
        for i in 0..(MAX_SOURCES as u32 + 500) {
            let addr = IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0000 + i));
            if log.refused(addr, &"wrong key") {
                logged += 1;
            }
        }
        assert_eq!(logged, MAX_SOURCES + 1);
        let sources = log.sources.lock().expect("lock");
        assert_eq!(sources.by_addr.len(), MAX_SOURCES);
    }
}
