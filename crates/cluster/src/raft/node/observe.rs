//! What the node reads in openraft's metrics: the role it serves in (a
//! leader that has not heard from a majority for a while steps down),
//! each follower's replication for `S`, and a follower whose replication
//! is stuck. Pure: the shell hands in copies of the metrics and the time.
//!
//! openraft keeps such a leader in its `Leader` state and only refuses new
//! proposals once its lease (the longest election timeout) has run out; the
//! requests it already holds would wait for a majority that may never come
//! back. The step-down here is what ends them: the engine answers its
//! waiters and, shortly after, its requests in flight, with `M`.

use std::time::Duration;

use openraft::metrics::RaftServerMetrics;
use openraft::{RaftMetrics, ServerState, TokioInstant};

use crate::raft::engine::RaftRole;
use crate::raft::types::{NodeId, TypeConfig};

/// openraft's full metrics: acknowledgements, replication, log indexes.
pub type Metrics = RaftMetrics<TypeConfig>;
/// openraft's server metrics: role, leader, vote, membership. openraft
/// publishes them first, the full metrics right after.
pub type ServerMetrics = RaftServerMetrics<TypeConfig>;

/// Turns metrics into the role to serve in, remembering when this node
/// began to lead (a fresh leader has no quorum acknowledgement yet).
#[derive(Debug)]
pub struct RoleWatch {
    step_down_after: Duration,
    leading_since: Option<(u64, TokioInstant)>,
}

impl RoleWatch {
    /// A leader steps down after `step_down_after` without a majority.
    pub fn new(step_down_after: Duration) -> RoleWatch {
        RoleWatch {
            step_down_after,
            leading_since: None,
        }
    }

    /// The role at `now`: a leader whose newest majority acknowledgement is
    /// older than the step-down time serves as a candidate (redirecting to
    /// nobody) until a majority answers again.
    ///
    /// The role, leader, term and voters come from `server`; `full` only
    /// adds the acknowledgement, and only once it shows the same vote (it
    /// may still be the previous step's: until then the leadership counts
    /// as fresh).
    pub fn role(&mut self, server: &ServerMetrics, full: &Metrics, now: TokioInstant) -> RaftRole {
        match server.state {
            ServerState::Leader => {
                let term = server.vote.leader_id.term;
                let since = match self.leading_since {
                    Some((t, at)) if t == term => at,
                    _ => {
                        self.leading_since = Some((term, now));
                        now
                    }
                };
                let acked = match full.last_quorum_acked {
                    Some(acked) if full.vote == server.vote => *acked,
                    _ => since,
                };
                // A node that is the only voter is its own majority: it
                // hears no acknowledgement because it needs none.
                let mut voters = server.membership_config.membership().voter_ids();
                let alone = voters.next() == Some(server.id) && voters.next().is_none();
                if !alone && now.saturating_duration_since(acked) > self.step_down_after {
                    RaftRole::Candidate
                } else {
                    RaftRole::Leader { term }
                }
            }
            ServerState::Candidate => RaftRole::Candidate,
            // A stopped core leads nobody, whatever it last believed.
            ServerState::Shutdown => RaftRole::Follower { leader: None },
            ServerState::Follower | ServerState::Learner => RaftRole::Follower {
                leader: server.current_leader,
            },
        }
    }

    /// When this node began to lead in its latest term as leader.
    pub fn leading_since(&self) -> Option<TokioInstant> {
        self.leading_since.map(|(_, at)| at)
    }
}

/// The time from `earlier` to `self`, zero if `earlier` is later.
pub trait SaturatingSince {
    fn saturating_duration_since(self, earlier: Self) -> Duration;
}

impl SaturatingSince for TokioInstant {
    fn saturating_duration_since(self, earlier: Self) -> Duration {
        if self > earlier {
            self - earlier
        } else {
            Duration::ZERO
        }
    }
}

/// Finds a follower that answers heartbeats but whose replication has not
/// moved for a while although it lags. openraft 0.10.0-alpha.37 can leave
/// a replication stream in that state when a follower comes back with an
/// empty log (its data directory wiped) while the leader still streams to
/// its old position: the leader then believes entries are in flight that
/// never are, and nothing but a new leadership rebuilds the stream.
#[derive(Debug)]
pub struct StuckWatch {
    stuck_after: Duration,
    /// Per follower: its matched index, and since when it has not moved.
    seen: std::collections::BTreeMap<NodeId, (Option<u64>, TokioInstant)>,
}

impl StuckWatch {
    pub fn new(stuck_after: Duration) -> StuckWatch {
        StuckWatch {
            stuck_after,
            seen: std::collections::BTreeMap::new(),
        }
    }

    /// A follower stuck at `now`, if any; each is reported once per
    /// `stuck_after` at most.
    pub fn stuck(&mut self, metrics: &Metrics, now: TokioInstant) -> Option<PeerProgress> {
        if metrics.state != ServerState::Leader {
            self.seen.clear();
            return None;
        }
        let mut found = None;
        for progress in replication(metrics) {
            let entry = self
                .seen
                .entry(progress.node)
                .or_insert((progress.matched, now));
            let alive = answers(metrics, progress.node, now, self.stuck_after);
            // The clock runs only while the follower answers: one that
            // comes back from a pause or a partition lags by everything it
            // missed, and gets a whole period to catch up before it counts
            // as stuck (else its return cost a leadership).
            if entry.0 != progress.matched || progress.lag == 0 || !alive {
                *entry = (progress.matched, now);
                continue;
            }
            if now.saturating_duration_since(entry.1) > self.stuck_after {
                entry.1 = now;
                found = Some(progress);
            }
        }
        found
    }
}

/// Whether the leader heard `node` acknowledge a heartbeat within
/// `within` of `now`.
pub fn answers(metrics: &Metrics, node: NodeId, now: TokioInstant, within: Duration) -> bool {
    metrics
        .heartbeat
        .as_ref()
        .and_then(|h| h.get(&node).copied().flatten())
        .is_some_and(|acked| now.saturating_duration_since(*acked) < within)
}

/// The followers of a leader that have not acknowledged a heartbeat
/// within `within` of `now` (killed, paused, cut off); empty off the lead.
/// A leader that took the lead at `leading_since`, less than `within`
/// ago, has had no time to hear everyone: nobody is silent yet.
pub fn silent_followers(
    metrics: &Metrics,
    now: TokioInstant,
    within: Duration,
    leading_since: Option<TokioInstant>,
) -> Vec<NodeId> {
    if leading_since.is_some_and(|since| now.saturating_duration_since(since) < within) {
        return Vec::new();
    }
    replication(metrics)
        .into_iter()
        .map(|p| p.node)
        .filter(|&node| !answers(metrics, node, now, within))
        .collect()
}

/// Whom a leader stopping gracefully hands the lead to: the follower with
/// the most of its log among those that acknowledged a heartbeat within
/// `within` of `now` (a dead one would leave the cluster without a leader
/// for the whole wait).
pub fn hand_off_target(metrics: &Metrics, now: TokioInstant, within: Duration) -> Option<NodeId> {
    replication(metrics)
        .into_iter()
        .filter(|p| answers(metrics, p.node, now, within))
        .max_by_key(|p| p.matched)
        .map(|p| p.node)
}

/// openraft's last committed and last applied log indexes (`None`:
/// nothing yet), for the metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LogIndexes {
    pub committed: Option<u64>,
    pub applied: Option<u64>,
}

impl LogIndexes {
    pub fn of(metrics: &Metrics) -> LogIndexes {
        LogIndexes {
            committed: metrics.cluster_committed.as_ref().map(|l| l.index),
            applied: metrics.last_applied.as_ref().map(|l| l.index),
        }
    }
}

/// One follower's replication as the leader sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerProgress {
    pub node: NodeId,
    /// The last log index known to be on that node (`None`: nothing yet).
    pub matched: Option<u64>,
    /// Entries of the leader's log not yet on that node.
    pub lag: u64,
}

/// The followers' replication, on a leader; empty elsewhere.
pub fn replication(metrics: &Metrics) -> Vec<PeerProgress> {
    let Some(replication) = metrics.replication.as_ref() else {
        return Vec::new();
    };
    let last = metrics.last_log_index;
    replication
        .iter()
        .filter(|(node, _)| **node != metrics.id)
        .map(|(node, matched)| {
            let matched = matched.as_ref().map(|m| m.index);
            let lag = match (last, matched) {
                (Some(last), Some(m)) => last.saturating_sub(m),
                (Some(last), None) => last + 1,
                (None, _) => 0,
            };
            PeerProgress {
                node: *node,
                matched,
                lag,
            }
        })
        .collect()
}

/// The extra `S` fields of a Raft node: `term=<n>`, and on a leader one
/// per follower, `peer.<i>=matched:<index>,lag:<n>` (`matched:-` while
/// nothing is known to be there).
pub fn status_fields(term: u64, progress: &[PeerProgress]) -> Vec<(String, String)> {
    let term = ("term".to_string(), term.to_string());
    std::iter::once(term)
        .chain(progress.iter().map(|p| {
            let matched = p.matched.map_or_else(|| "-".to_string(), |m| m.to_string());
            (
                format!("peer.{}", p.node),
                format!("matched:{matched},lag:{}", p.lag),
            )
        }))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raft::node::tests::server_of;
    use openraft::Instant as _;

    /// Index `index` of term 3's log, as replication reports it.
    fn at(index: u64) -> Option<crate::raft::types::LogId> {
        Some(openraft::LogId::new(
            openraft::impls::leader_id_adv::LeaderId {
                term: 3,
                node_id: 0,
            },
            index,
        ))
    }

    fn metrics(state: ServerState, term: u64) -> Metrics {
        let mut m = Metrics::new_initial(0);
        m.state = state;
        m.current_term = term;
        m.vote.leader_id.term = term;
        m.current_leader = Some(0);
        m
    }

    #[test]
    fn the_only_voter_leads_without_acknowledgements() {
        let mut m = metrics(ServerState::Leader, 2);
        let alone: std::collections::BTreeSet<NodeId> = [0].into();
        m.membership_config = std::sync::Arc::new(openraft::StoredMembership::new(
            None,
            openraft::Membership::new_with_defaults(vec![alone], []),
        ));
        let mut roles = RoleWatch::new(Duration::from_millis(300));
        let t0 = TokioInstant::now();
        assert_eq!(
            roles.role(&server_of(&m), &m, t0),
            RaftRole::Leader { term: 2 }
        );
        let later = t0 + Duration::from_secs(10);
        assert_eq!(
            roles.role(&server_of(&m), &m, later),
            RaftRole::Leader { term: 2 }
        );
    }

    #[test]
    fn a_leader_without_a_majority_steps_down_and_comes_back() {
        let step = Duration::from_millis(300);
        let mut roles = RoleWatch::new(step);
        let t0 = TokioInstant::now();
        let mut m = metrics(ServerState::Leader, 3);
        // Fresh leader, no acknowledgement yet: leads for the step-down time.
        assert_eq!(
            roles.role(&server_of(&m), &m, t0),
            RaftRole::Leader { term: 3 }
        );
        let later = t0 + Duration::from_millis(301);
        assert_eq!(roles.role(&server_of(&m), &m, later), RaftRole::Candidate);
        m.last_quorum_acked = Some(later.into());
        assert_eq!(
            roles.role(&server_of(&m), &m, later + Duration::from_millis(100)),
            RaftRole::Leader { term: 3 }
        );
        assert_eq!(
            roles.role(&server_of(&m), &m, later + Duration::from_millis(400)),
            RaftRole::Candidate
        );
    }

    #[test]
    fn a_follower_that_answers_but_does_not_move_is_stuck() {
        let after = Duration::from_millis(1_000);
        let mut watch = StuckWatch::new(after);
        let t0 = TokioInstant::now();
        let mut m = metrics(ServerState::Leader, 3);
        m.last_log_index = Some(42);
        m.replication = Some(
            [(0, at(42)), (1, at(42)), (2, at(39))]
                .into_iter()
                .collect(),
        );
        m.heartbeat = Some(
            [(1, Some(t0.into())), (2, Some(t0.into()))]
                .into_iter()
                .collect(),
        );
        assert_eq!(watch.stuck(&m, t0), None);
        let later = t0 + Duration::from_millis(1_100);
        // Down (no heartbeat acknowledged lately): not stuck, just gone.
        assert_eq!(watch.stuck(&m, later), None);
        let acked_at = |t: TokioInstant| {
            Some(
                [(1, Some(t.into())), (2, Some(t.into()))]
                    .into_iter()
                    .collect(),
            )
        };
        // Back (a pause or a partition ended): it lags by all it missed and
        // gets a whole period to catch up, whatever the time it was away.
        m.heartbeat = acked_at(later);
        assert_eq!(watch.stuck(&m, later), None);
        let much_later = later + Duration::from_millis(900);
        m.heartbeat = acked_at(much_later);
        assert_eq!(watch.stuck(&m, much_later), None);
        // Answering for a period without moving: stuck.
        let stuck_at = later + Duration::from_millis(1_100);
        m.heartbeat = acked_at(stuck_at);
        let stuck = watch.stuck(&m, stuck_at).map(|p| p.node);
        assert_eq!(stuck, Some(2));
        // Reported once per period.
        assert_eq!(watch.stuck(&m, stuck_at + Duration::from_millis(10)), None);
        // Moving again: fine.
        m.replication = Some([(1, at(42)), (2, at(40))].into_iter().collect());
        let moving_at = stuck_at + Duration::from_millis(2_000);
        m.heartbeat = acked_at(moving_at);
        assert_eq!(watch.stuck(&m, moving_at), None);
    }

    #[test]
    fn a_follower_that_acknowledges_no_heartbeat_is_silent() {
        let within = Duration::from_millis(1_000);
        let t0 = TokioInstant::now();
        let mut m = metrics(ServerState::Leader, 3);
        m.last_log_index = Some(5);
        m.replication = Some([(0, None), (1, None), (2, None)].into_iter().collect());
        m.heartbeat = Some([(1, Some(t0.into())), (2, None)].into_iter().collect());
        let led_long = Some(t0 - within);
        // Never heard: silent; heard just now: not.
        assert_eq!(silent_followers(&m, t0, within, led_long), vec![2]);
        // A fresh leader has not had the time to hear anyone.
        let fresh = Some(t0 - within / 2);
        assert_eq!(
            silent_followers(&m, t0, within, fresh),
            Vec::<NodeId>::new()
        );
        let later = t0 + Duration::from_millis(1_100);
        assert_eq!(silent_followers(&m, later, within, fresh), vec![1, 2]);
        m.state = ServerState::Follower;
        m.replication = None;
        assert_eq!(
            silent_followers(&m, later, within, led_long),
            Vec::<NodeId>::new()
        );
    }

    #[test]
    fn the_lead_is_handed_to_the_most_up_to_date_follower_that_answers() {
        let t0 = TokioInstant::now();
        let mut m = metrics(ServerState::Leader, 3);
        m.last_log_index = Some(42);
        m.replication = Some(
            [(0, at(42)), (1, at(40)), (2, at(42))]
                .into_iter()
                .collect(),
        );
        let long_ago = t0 - Duration::from_secs(5);
        m.heartbeat = Some(
            [(1, Some(t0.into())), (2, Some(long_ago.into()))]
                .into_iter()
                .collect(),
        );
        let within = Duration::from_secs(2);
        // Node 2 has more of the log but is gone.
        assert_eq!(hand_off_target(&m, t0, within), Some(1));
        m.heartbeat = Some([(2, Some(t0.into()))].into_iter().collect());
        assert_eq!(hand_off_target(&m, t0, within), Some(2));
        m.heartbeat = None;
        assert_eq!(hand_off_target(&m, t0, within), None);
    }

    #[test]
    fn a_stopped_core_redirects_to_nobody() {
        let mut roles = RoleWatch::new(Duration::from_millis(300));
        let m = metrics(ServerState::Shutdown, 3);
        assert_eq!(
            roles.role(&server_of(&m), &m, TokioInstant::now()),
            RaftRole::Follower { leader: None }
        );
    }

    #[test]
    fn status_shows_each_followers_lag() {
        let fields = status_fields(
            7,
            &[
                PeerProgress {
                    node: 1,
                    matched: Some(41),
                    lag: 1,
                },
                PeerProgress {
                    node: 2,
                    matched: None,
                    lag: 42,
                },
            ],
        );
        assert_eq!(
            fields,
            vec![
                ("term".to_string(), "7".to_string()),
                ("peer.1".to_string(), "matched:41,lag:1".to_string()),
                ("peer.2".to_string(), "matched:-,lag:42".to_string()),
            ]
        );
    }

    /// openraft publishes the server metrics of a new role before the full
    /// ones: the role is the server metrics', at once, and the full
    /// metrics' acknowledgement counts only once they show the same vote.
    #[test]
    fn a_new_leadership_is_seen_before_the_full_metrics_show_it() {
        let step = Duration::from_millis(300);
        let mut roles = RoleWatch::new(step);
        let t0 = TokioInstant::now();
        let mut old = metrics(ServerState::Follower, 3);
        old.last_quorum_acked = Some(t0.into());
        let mut leading = metrics(ServerState::Leader, 4);
        leading.vote.leader_id.node_id = 0;
        let server = server_of(&leading);
        let later = t0 + Duration::from_millis(400);
        // The stale full metrics' acknowledgement (term 3, long ago) does
        // not make the fresh leader step down.
        assert_eq!(
            roles.role(&server, &old, later),
            RaftRole::Leader { term: 4 }
        );
        let much_later = later + Duration::from_millis(301);
        assert_eq!(roles.role(&server, &old, much_later), RaftRole::Candidate);
        leading.last_quorum_acked = Some(much_later.into());
        assert_eq!(
            roles.role(&server, &leading, much_later),
            RaftRole::Leader { term: 4 }
        );
    }
}
