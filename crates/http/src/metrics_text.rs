//! `GET /metrics`: the node's metrics in the Prometheus text format
//! (version 0.0.4), encoded by `prometheus-client` from one snapshot: the
//! node's counts (atomics) and one read of its status under the mutex.
//! The names and what they count are listed in docs/metrics.md.

use std::fmt::Error as FmtError;

use baton_proto::Role;
use baton_server::inspect::Member;
use baton_server::metrics::{
    op_label, Count, ErrorReason, HistogramSnapshot, Metrics, Started, REQUEST_OPS,
};
use baton_server::sync_metrics;
use baton_server::{NodeCounters, NodeStatus, Observed};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use crate::health::{active_of, term_of};
use crate::view::HttpContext;

/// The `Content-Type` of the answer.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// Everything one scrape shows, read before encoding.
#[derive(Debug)]
struct Scrape {
    self_addr: String,
    status: NodeStatus,
    counters: NodeCounters,
    members: Vec<Member>,
    requests: Vec<(&'static str, u64)>,
    errors: Vec<(&'static str, u64)>,
    counts: Vec<(&'static str, &'static str, u64)>,
    connections_open: i64,
    /// The caps and start time (none before the server starts).
    start: Option<Started>,
    /// See [`Observed::expiry_overdue_ms`].
    expiry_overdue_ms: Option<u64>,
    histograms: Vec<(&'static str, &'static str, HistogramSnapshot)>,
    /// `baton_fsync_seconds`, by store.
    fsync: Vec<(&'static str, HistogramSnapshot)>,
}

impl Scrape {
    fn take(ctx: &HttpContext) -> Scrape {
        let Observed {
            status,
            counters,
            members,
            expiry_overdue_ms,
            ..
        } = ctx.node.observe();
        let m: &Metrics = ctx.node.metrics();
        let count = |name, help, c| (name, help, m.count(c));
        Scrape {
            self_addr: ctx.self_addr.clone(),
            status,
            counters,
            members,
            requests: REQUEST_OPS.iter().map(|op| (op_label(*op), m.requests(*op))).collect(),
            errors: ErrorReason::ALL.iter().map(|r| (r.label(), m.errors(*r))).collect(),
            counts: vec![
                count("baton_grants", "Grants made (at once or to a waiter).", Count::Grants),
                count("baton_releases", "Grants ended by a release.", Count::Releases),
                count("baton_renewals", "Leases renewed.", Count::Renewals),
                count("baton_wait_timeouts", "Queued acquires whose wait ran out.", Count::WaitTimeouts),
                count("baton_waiters_moved", "Queued acquires sent elsewhere because this node stopped serving.", Count::WaitersMoved),
                count("baton_connections", "Client connections admitted.", Count::ConnectionsTotal),
                count("baton_watches_answered", "Watches (W) answered: at once, on a change, or when their wait ran out.", Count::WatchesAnswered),
                count("baton_values_set", "Holder values set or cleared (V).", Count::ValuesSet),
            ],
            connections_open: m.connections_open(),
            start: m.start(),
            expiry_overdue_ms,
            histograms: vec![
                ("baton_acquire_wait_seconds", "Time from an acquire's arrival to its grant.", m.acquire_wait.snapshot()),
                ("baton_hold_seconds", "Time from a grant to its end: its release, or its lease's end when it expired.", m.hold.snapshot()),
                ("baton_handover_seconds", "Time from a release's arrival to the grant of the same key to the next waiter.", m.handover.snapshot()),
            ],
            fsync: vec![
                ("raft_log", sync_metrics::FSYNC_RAFT_LOG.snapshot()),
                ("state_file", sync_metrics::FSYNC_STATE_FILE.snapshot()),
            ],
        }
    }
}

fn counter(e: &mut DescriptorEncoder, name: &str, help: &str, value: u64) -> Result<(), FmtError> {
    ConstCounter::new(value).encode(e.encode_descriptor(name, help, None, MetricType::Counter)?)
}

fn gauge(e: &mut DescriptorEncoder, name: &str, help: &str, value: i64) -> Result<(), FmtError> {
    ConstGauge::new(value).encode(e.encode_descriptor(name, help, None, MetricType::Gauge)?)
}

/// A gauge with one series per label value.
fn gauge_family<'a>(
    e: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    label: &str,
    series: impl IntoIterator<Item = (&'a str, i64)>,
) -> Result<(), FmtError> {
    let mut metric = e.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (value, n) in series {
        let labels = [(label, value)];
        ConstGauge::new(n).encode(metric.encode_family(&labels)?)?;
    }
    Ok(())
}

fn clamp(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl Scrape {
    fn encode_counts(&self, e: &mut DescriptorEncoder) -> Result<(), FmtError> {
        let mut requests = e.encode_descriptor(
            "baton_requests",
            "Client requests, by op.",
            None,
            MetricType::Counter,
        )?;
        for (op, n) in &self.requests {
            ConstCounter::new(*n).encode(requests.encode_family(&[("op", *op)])?)?;
        }
        let mut errors = e.encode_descriptor(
            "baton_errors",
            "Requests not served as asked, by reason (N, M, E answers).",
            None,
            MetricType::Counter,
        )?;
        for (reason, n) in &self.errors {
            ConstCounter::new(*n).encode(errors.encode_family(&[("reason", *reason)])?)?;
        }
        for (name, help, n) in &self.counts {
            counter(e, name, help, *n)?;
        }
        counter(
            e,
            "baton_expiries",
            "Grants ended because their lease ran out.",
            self.counters.expiries,
        )?;
        counter(
            e,
            "baton_role_changes",
            "Changes of this node's role (failovers, handoffs, elections).",
            self.counters.role_changes,
        )?;
        for (name, help, h) in &self.histograms {
            let metric = e.encode_descriptor(name, help, None, MetricType::Histogram)?;
            let mut metric = metric;
            metric.encode_histogram::<NoLabelSet>(h.sum_seconds, h.count, &h.buckets, None)?;
        }
        self.encode_durability(e)
    }

    /// The fsync latency by store, and a priority node's handoffs.
    fn encode_durability(&self, e: &mut DescriptorEncoder) -> Result<(), FmtError> {
        let mut fsync = e.encode_descriptor(
            "baton_fsync_seconds",
            "Time each sync of the node's durable state took, by store (raft_log, state_file).",
            None,
            MetricType::Histogram,
        )?;
        for (store, h) in &self.fsync {
            fsync
                .encode_family(&[("store", *store)])?
                .encode_histogram::<NoLabelSet>(h.sum_seconds, h.count, &h.buckets, None)?;
        }
        let (Some(given), Some(taken)) =
            (self.counters.handoffs_given, self.counters.handoffs_taken)
        else {
            return Ok(());
        };
        let mut handoffs = e.encode_descriptor(
            "baton_handoffs",
            "Priority: graceful handoffs of the active role, given (taken up by a successor) and taken.",
            None,
            MetricType::Counter,
        )?;
        for (direction, n) in [("given", given), ("taken", taken)] {
            ConstCounter::new(n).encode(handoffs.encode_family(&[("direction", direction)])?)?;
        }
        Ok(())
    }

    fn encode_state(&self, e: &mut DescriptorEncoder) -> Result<(), FmtError> {
        let s = &self.status;
        gauge(e, "baton_locks_held", "Grants held now.", clamp(s.locks))?;
        gauge(
            e,
            "baton_waiters_queued",
            "Acquires queued now.",
            clamp(s.waiters),
        )?;
        gauge(
            e,
            "baton_connections_open",
            "Client connections open now.",
            self.connections_open,
        )?;
        gauge(
            e,
            "baton_last_token",
            "The last fencing token issued or seen (above 2^53 a float loses its last digits).",
            clamp(s.token),
        )?;
        self.encode_start(e)?;
        if let Some(ms) = self.expiry_overdue_ms {
            let overdue = ConstGauge::new(ms as f64 / 1000.0);
            overdue.encode(e.encode_descriptor(
                "baton_expiry_overdue_seconds",
                "On the serving node: how long ago the earliest lease still held ended (its expiry backlog; 0 when none is due).",
                None,
                MetricType::Gauge,
            )?)?;
        }
        self.encode_role(e)?;
        if let Some(term) = term_of(s) {
            gauge(
                e,
                "baton_term",
                "The Raft term this node is in.",
                clamp(term),
            )?;
        }
        if let Some(index) = self.counters.commit_index {
            gauge(
                e,
                "baton_raft_commit_index",
                "The last log index known committed.",
                clamp(index),
            )?;
        }
        if let Some(index) = self.counters.applied_index {
            gauge(
                e,
                "baton_raft_applied_index",
                "The last log index applied to the lock table.",
                clamp(index),
            )?;
        }
        self.encode_members(e)
    }

    /// The configured caps, to compare the gauges with, and the start.
    fn encode_start(&self, e: &mut DescriptorEncoder) -> Result<(), FmtError> {
        let Some(start) = self.start else {
            return Ok(());
        };
        let caps = [
            (
                "baton_max_connections",
                "--max-connections: client connections served at once.",
                start.max_connections,
            ),
            (
                "baton_max_locks",
                "--max-locks: grants held at once.",
                start.max_locks,
            ),
            (
                "baton_max_waiters",
                "--max-waiters: acquires queued at once.",
                start.max_waiters,
            ),
        ];
        for (name, help, value) in caps {
            gauge(e, name, help, clamp(value))?;
        }
        gauge(
            e,
            "baton_start_time_seconds",
            "When this node's server started, in seconds since the Unix epoch.",
            clamp(start.at_unix_ms / 1000),
        )
    }

    /// The role gauges and the node's info line.
    fn encode_role(&self, e: &mut DescriptorEncoder) -> Result<(), FmtError> {
        let s = &self.status;
        let role = s.role.as_str();
        let roles = Role::ALL
            .iter()
            .map(|r| (r.as_str(), i64::from(r.as_str() == role)));
        gauge_family(
            e,
            "baton_role",
            "1 for this node's role, 0 for the others.",
            "role",
            roles,
        )?;
        let active = active_of(s, &self.self_addr).unwrap_or_else(|| "-".to_string());
        let mut info = e.encode_descriptor(
            "baton_node",
            "This node: its mode, address and the serving node it knows (always 1).",
            None,
            MetricType::Gauge,
        )?;
        let labels = [
            ("mode", s.mode.as_str()),
            ("self", self.self_addr.as_str()),
            ("active", active.as_str()),
        ];
        ConstGauge::new(1i64).encode(info.encode_family(&labels)?)
    }

    fn encode_members(&self, e: &mut DescriptorEncoder) -> Result<(), FmtError> {
        if self.members.is_empty() {
            return Ok(());
        }
        let up = self.members.iter().map(|m| {
            (
                m.addr.as_str(),
                i64::from(!matches!(m.state, "down" | "unknown" | "refusing")),
            )
        });
        gauge_family(
            e,
            "baton_peer_up",
            "1 for a member this node knows to be up or serving, 0 otherwise (down, unknown, or refusing the link).",
            "peer",
            up,
        )?;
        let lagging: Vec<(&str, i64)> = self
            .members
            .iter()
            .filter_map(|m| Some((m.addr.as_str(), clamp(m.lag?))))
            .collect();
        if !lagging.is_empty() {
            gauge_family(
                e,
                "baton_replication_lag_entries",
                "On a Raft leader: log entries not yet on each follower.",
                "peer",
                lagging,
            )?;
        }
        let matched: Vec<(&str, i64)> = self
            .members
            .iter()
            .filter_map(|m| Some((m.addr.as_str(), clamp(m.matched?))))
            .collect();
        if !matched.is_empty() {
            gauge_family(
                e,
                "baton_replication_matched_index",
                "On a Raft leader: the last log index known on each follower.",
                "peer",
                matched,
            )?;
        }
        Ok(())
    }
}

impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), FmtError> {
        self.encode_counts(&mut encoder)?;
        self.encode_state(&mut encoder)
    }
}

/// The text of one scrape.
pub fn render(ctx: &HttpContext) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Scrape::take(ctx)));
    let mut text = String::with_capacity(8 * 1024);
    // Writing to a String does not fail; an encoder error would be a bug
    // in a name, and leaves what was written.
    if let Err(error) = prometheus_client::encoding::prometheus_text::encode(&mut text, &registry) {
        tracing::warn!(%error, "metrics encoding failed");
    }
    text
}
