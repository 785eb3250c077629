//! The recent changes of the cluster as this node saw them, for the
//! console's "recent role changes": this node's role, the serving node,
//! the term, and each member's state and membership. The endpoint samples
//! the node every [`SAMPLE_EVERY`] (one read under the node's mutex, as a
//! scrape takes) and keeps the last [`MAX_CHANGES`] differences, so a
//! page opened after a failover still shows it; a change undone within
//! one sample is not seen (`baton_role_changes_total` counts every one).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::health::{active_of, term_of};
use crate::view::NodeView;

/// How often the node is sampled.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(1);
/// Changes kept: about a page's worth; older ones are dropped.
pub const MAX_CHANGES: usize = 50;

/// One change, at a wall-clock time (ms since the Unix epoch).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Change {
    pub at_ms: u64,
    pub what: String,
}

/// What one sample keeps of the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    pub role: String,
    pub active: Option<String>,
    pub term: Option<u64>,
    /// Each member's address, state and membership (`voter`/`learner`).
    pub members: Vec<(String, String, &'static str)>,
}

/// The changes seen so far, newest first, and the last sample.
#[derive(Debug, Default)]
pub struct ChangeLog {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    last: Option<Sample>,
    changes: VecDeque<Change>,
}

impl ChangeLog {
    /// Records what differs from the last sample (the first sample is
    /// recorded as where the log starts).
    pub fn record(&self, sample: Sample, at_ms: u64) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let seen = match &inner.last {
            None => vec![start_text(&sample)],
            Some(last) => differences(last, &sample),
        };
        for what in seen {
            inner.changes.push_front(Change { at_ms, what });
        }
        inner.changes.truncate(MAX_CHANGES);
        inner.last = Some(sample);
    }

    /// The changes, newest first.
    pub fn recent(&self) -> Vec<Change> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.changes.iter().cloned().collect()
    }
}

/// What `node` shows now, `self_addr` being its address.
pub fn sample(node: &dyn NodeView, self_addr: &str) -> Sample {
    let observed = node.observe();
    let status = &observed.status;
    Sample {
        role: status.role.as_str().to_string(),
        active: active_of(status, self_addr),
        term: term_of(status),
        members: observed
            .members
            .iter()
            .map(|m| {
                let membership = if m.voter { "voter" } else { "learner" };
                (m.addr.clone(), m.state.to_string(), membership)
            })
            .collect(),
    }
}

/// Samples `node` every [`SAMPLE_EVERY`] into `log`, until the node's
/// tasks stop.
pub async fn keep(node: Arc<dyn NodeView>, self_addr: String, log: Arc<ChangeLog>) {
    let mut every = tokio::time::interval(SAMPLE_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        log.record(sample(&*node, &self_addr), now_ms());
    }
}

fn now_ms() -> u64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
}

fn or_none(addr: Option<&String>) -> &str {
    addr.map_or("none", String::as_str)
}

fn start_text(s: &Sample) -> String {
    let term = s.term.map(|t| format!(", term {t}")).unwrap_or_default();
    format!(
        "first seen: this node {}, serving node {}{term}",
        s.role,
        or_none(s.active.as_ref())
    )
}

/// The changes from `before` to `now`, in words.
pub fn differences(before: &Sample, now: &Sample) -> Vec<String> {
    let mut seen = Vec::new();
    if before.role != now.role {
        seen.push(format!("this node: {} → {}", before.role, now.role));
    }
    if before.active != now.active {
        let (from, to) = (
            or_none(before.active.as_ref()),
            or_none(now.active.as_ref()),
        );
        seen.push(format!("serving node: {from} → {to}"));
    }
    if let (Some(from), Some(to)) = (before.term, now.term) {
        if from != to {
            seen.push(format!("term {from} → {to}"));
        }
    }
    for (addr, state, membership) in &now.members {
        match before.members.iter().find(|(a, _, _)| a == addr) {
            None => seen.push(format!("{addr} joined as a {membership} ({state})")),
            Some((_, was, was_membership)) => {
                if was != state {
                    seen.push(format!("{addr}: {was} → {state}"));
                }
                if was_membership != membership {
                    seen.push(format!("{addr}: {was_membership} → {membership}"));
                }
            }
        }
    }
    for (addr, _, _) in &before.members {
        if !now.members.iter().any(|(a, _, _)| a == addr) {
            seen.push(format!("{addr} left the membership"));
        }
    }
    seen
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(role: &str, active: Option<&str>, term: u64, members: &[(&str, &str)]) -> Sample {
        Sample {
            role: role.into(),
            active: active.map(str::to_string),
            term: Some(term),
            members: members
                .iter()
                .map(|(a, s)| (a.to_string(), s.to_string(), "voter"))
                .collect(),
        }
    }

    #[test]
    fn a_failover_is_told_in_words() {
        let before = at(
            "follower",
            Some("a"),
            2,
            &[("a", "leader"), ("b", "follower"), ("c", "follower")],
        );
        let now = at(
            "leader",
            Some("b"),
            3,
            &[("b", "leader"), ("c", "follower"), ("d", "follower")],
        );
        assert_eq!(
            differences(&before, &now),
            [
                "this node: follower → leader",
                "serving node: a → b",
                "term 2 → 3",
                "b: follower → leader",
                "d joined as a voter (follower)",
                "a left the membership",
            ]
        );
        assert!(differences(&now, &now).is_empty());
    }

    #[test]
    fn the_log_starts_with_the_first_sample_and_keeps_the_newest() {
        let log = ChangeLog::default();
        log.record(at("follower", None, 1, &[]), 5);
        assert_eq!(
            log.recent()[0].what,
            "first seen: this node follower, serving node none, term 1"
        );
        for term in 2..(MAX_CHANGES as u64 + 10) {
            log.record(at("follower", None, term, &[]), term);
        }
        let recent = log.recent();
        assert_eq!(recent.len(), MAX_CHANGES);
        let last = MAX_CHANGES as u64 + 9;
        assert_eq!(
            recent[0],
            Change {
                at_ms: last,
                what: format!("term {} → {last}", last - 1)
            }
        );
    }
}
