//! batond's logs, on stderr: text (colours only on a terminal) or one
//! JSON object per line (`--log-format json`). The default filter keeps
//! the Raft library (openraft) at `warn`, but for its heartbeat and
//! replication warnings, which report each failed call to a peer (20 a
//! second for a dead one, with Rust debug dumps and node ids): Baton's own
//! line says that, once per peer per interval and by address
//! (`peer unreachable`). For the same reason a failed vote request
//! ([`PEER_CALL_FAILURES`]) is not shown. `RUST_LOG` replaces the filter.
//! Another library warning that repeats is shown once, then summed up once
//! per interval with a count.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::IsTerminal;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tracing::callsite::Identifier;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{fmt, EnvFilter, Layer};

/// Without `RUST_LOG`: Baton's own lines from `info`, the Raft library's
/// from `warn`, its failed heartbeats and replication calls (and the
/// progress errors they make) from `error`, and none of its membership
/// API's: a refused change is returned to the caller, which answers it
/// in one sentence (`/v1/members`), not as a debug dump in the log.
pub const DEFAULT_FILTER: &str =
    "info,openraft=warn,openraft::core::heartbeat=error,openraft::replication=error,openraft::engine::handler::replication_handler=error,openraft::raft::api::management=off";

/// How openraft's core words a failed call to a peer (`while requesting
/// vote, error: ..., target: 2`): Baton's per-peer line says it, by
/// address.
pub const PEER_CALL_FAILURES: [&str; 4] = [
    "while requesting ",
    "timeout while requesting ",
    "error sending ",
    "timeout sending ",
];

/// How openraft words a notice it could not pass to its core because the
/// core has stopped (a graceful stop racing a disk write): nothing to act
/// on, and batond says itself that it is shutting down.
pub const STOPPED_CORE_NOTICES: [&str; 1] = ["failed to forward IO completion"];

/// How often a repeated library warning is summed up.
pub const SUMMARY_INTERVAL: Duration = Duration::from_secs(10);

/// Log statements tracked at once (there are as many as openraft has
/// warnings; the bound is against surprises).
const MAX_TRACKED: usize = 512;

/// The longest message kept to name a repeated warning in its summary.
const MAX_MESSAGE: usize = 200;

/// How batond writes its log lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines (coloured only when stderr is a terminal).
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

/// Installs the logger; a thread writes the summaries of repeated
/// warnings. A `RUST_LOG` that names openraft asks for its lines as they
/// come: then none is held back.
pub fn init(format: LogFormat) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    let asked_for_openraft = std::env::var("RUST_LOG").is_ok_and(|f| f.contains("openraft"));
    let repeats = Repeats::new(SUMMARY_INTERVAL, !asked_for_openraft);
    let registry = tracing_subscriber::registry()
        .with(filter)
        .with(repeats.clone());
    let installed = match format {
        LogFormat::Text => registry
            .with(
                fmt::layer()
                    .with_writer(std::io::stderr)
                    .with_ansi(std::io::stderr().is_terminal()),
            )
            .try_init(),
        LogFormat::Json => registry
            .with(fmt::layer().json().with_writer(std::io::stderr))
            .try_init(),
    };
    if installed.is_ok() {
        let spawned = std::thread::Builder::new()
            .name("log-summaries".into())
            .spawn(move || loop {
                std::thread::sleep(SUMMARY_INTERVAL);
                repeats.summarise(Instant::now());
            });
        if let Err(error) = spawned {
            tracing::warn!(%error, "cannot start the log summary thread; repeated warnings are counted but not summed up");
        }
    }
}

/// Counts the repeats of the Raft library's warnings and lets only the
/// first of each interval through.
#[derive(Debug, Clone)]
pub struct Repeats {
    interval: Duration,
    /// Off: every line is shown.
    on: bool,
    seen: Arc<Mutex<HashMap<Identifier, Seen>>>,
}

#[derive(Debug)]
struct Seen {
    target: &'static str,
    message: String,
    /// When one was last let through, or last summed up.
    shown_at: Instant,
    /// Held back since then.
    held: u64,
}

impl Repeats {
    pub fn new(interval: Duration, on: bool) -> Repeats {
        Repeats {
            interval,
            on,
            seen: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// Whether `event` is shown at `now`: always unless it is a library
    /// warning seen within the interval.
    fn show(&self, event: &Event<'_>, now: Instant) -> bool {
        let meta = event.metadata();
        if !self.on || !meta.target().starts_with("openraft") || *meta.level() > Level::WARN {
            return true;
        }
        let mut message = MessageText(String::new());
        event.record(&mut message);
        let said = |prefixes: &[&str]| prefixes.iter().any(|p| message.0.starts_with(p));
        if said(&PEER_CALL_FAILURES) || said(&STOPPED_CORE_NOTICES) {
            return false;
        }
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let id = meta.callsite();
        if let Some(entry) = seen.get_mut(&id) {
            if entry.held == 0 && now.duration_since(entry.shown_at) >= self.interval {
                entry.shown_at = now;
                return true;
            }
            entry.held += 1;
            return false;
        }
        if seen.len() < MAX_TRACKED {
            seen.insert(
                id,
                Seen {
                    target: meta.target(),
                    message: message.0,
                    shown_at: now,
                    held: 0,
                },
            );
        }
        true
    }

    /// Logs one line per warning held back since its last line, with the
    /// count, and starts a new interval for it. Returns how many lines.
    pub fn summarise(&self, now: Instant) -> usize {
        let due: Vec<(String, &'static str, u64, u64)> = {
            let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
            seen.values_mut()
                .filter(|entry| {
                    entry.held > 0 && now.duration_since(entry.shown_at) >= self.interval
                })
                .map(|entry| {
                    let held = std::mem::take(&mut entry.held);
                    let secs = now.duration_since(entry.shown_at).as_secs();
                    entry.shown_at = now;
                    (entry.message.clone(), entry.target, held, secs)
                })
                .collect()
        };
        // Logged with the lock released: these lines come back through `show`.
        for (message, source, repeated, secs) in &due {
            tracing::warn!(
                target: "batond::log",
                source,
                repeated,
                "repeated {repeated} more times in {secs}s: {message}"
            );
        }
        due.len()
    }
}

impl<S: Subscriber> Layer<S> for Repeats {
    fn event_enabled(&self, event: &Event<'_>, _: Context<'_, S>) -> bool {
        self.show(event, Instant::now())
    }
}

/// The `message` field of an event, cut to [`MAX_MESSAGE`] bytes.
struct MessageText(String);

impl Visit for MessageText {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.0, "{value:?}");
            if self.0.len() > MAX_MESSAGE {
                let mut end = MAX_MESSAGE;
                while !self.0.is_char_boundary(end) {
                    end -= 1;
                }
                self.0.truncate(end);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn the_default_filter_parses_and_silences_openraft_s_membership_errors() {
        use tracing_subscriber::layer::SubscriberExt as _;
        let filter = EnvFilter::try_new(DEFAULT_FILTER).expect("the default filter parses");
        let count = Count::default();
        let subscriber = tracing_subscriber::registry()
            .with(filter)
            .with(count.clone());
        tracing::subscriber::with_default(subscriber, || {
            tracing::error!(target: "openraft::raft::api::management", "the first step error");
            tracing::warn!(target: "openraft::storage", "shown");
            tracing::info!(target: "baton_cluster", "shown");
        });
        assert_eq!(count.0.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn switched_off_it_shows_every_line() {
        let repeats = Repeats::new(Duration::from_secs(3600), false);
        let count = Count::default();
        let subscriber = tracing_subscriber::registry()
            .with(repeats)
            .with(count.clone());
        tracing::subscriber::with_default(subscriber, || {
            for _ in 0..10 {
                tracing::warn!(target: "openraft::network", "heartbeat to 2 failed");
            }
        });
        assert_eq!(count.0.load(Ordering::Relaxed), 10);
    }

    /// Counts the events that reach the layer after `Repeats`.
    #[derive(Clone, Default)]
    struct Count(Arc<AtomicUsize>);

    impl<S: Subscriber> Layer<S> for Count {
        fn on_event(&self, _: &Event<'_>, _: Context<'_, S>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn a_repeated_library_warning_is_shown_once_then_summed_up() {
        let repeats = Repeats::new(Duration::from_secs(3600), true);
        let count = Count::default();
        let subscriber = tracing_subscriber::registry()
            .with(repeats.clone())
            .with(count.clone());
        tracing::subscriber::with_default(subscriber, || {
            for _ in 0..100 {
                tracing::warn!(target: "openraft::network", "heartbeat to 2 failed");
                tracing::info!(target: "baton_cluster", "not a library line");
                tracing::warn!(target: "baton_cluster", "Baton's own warning");
            }
            // One library line, and every Baton line.
            assert_eq!(count.0.load(Ordering::Relaxed), 1 + 200);
            // Not due yet: the interval has not passed.
            assert_eq!(repeats.summarise(Instant::now()), 0);
            let later = Instant::now() + Duration::from_secs(3600);
            assert_eq!(repeats.summarise(later), 1);
            assert_eq!(count.0.load(Ordering::Relaxed), 202);
            // Summed up: nothing is held any more.
            assert_eq!(repeats.summarise(later + Duration::from_secs(7200)), 0);
            // A failed vote request is Baton's per-peer line's to report.
            let before = count.0.load(Ordering::Relaxed);
            tracing::warn!(target: "openraft::core", "while requesting vote, error: Unreachable, target: 2");
            assert_eq!(count.0.load(Ordering::Relaxed), before);
            // A notice its stopped core could not take is no news.
            tracing::warn!(target: "openraft::raft", "failed to forward IO completion: IOFlushed: (by:<T3-N2:Q>, T3-N2.3)");
            assert_eq!(count.0.load(Ordering::Relaxed), before);
        });
        let seen = repeats.seen.lock().expect("lock");
        let entry = seen.values().next().expect("tracked");
        assert_eq!(entry.message, "heartbeat to 2 failed");
    }
}
