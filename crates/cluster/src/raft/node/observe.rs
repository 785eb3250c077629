//! What the shell reads from openraft's metrics: the role this node serves
//! in (a leader that has not heard from a majority for an election timeout
//! steps down), each follower's replication for `S`, a follower whose
//! replication is stuck, and a consensus core that died.
//!
//! openraft keeps such a leader in its `Leader` state and only refuses new
//! proposals once its lease (the longest election timeout) has run out; the
//! requests it already holds would wait for a majority that may never come
//! back. The step-down here is what ends them: the engine answers its
//! waiters and, shortly after, its requests in flight, with `M`.

use std::time::Duration;

use openraft::async_runtime::WatchReceiver;
use openraft::errors::Fatal;
use openraft::metrics::RaftServerMetrics;
use openraft::type_config::alias::WatchReceiverOf;
use openraft::{Instant, RaftMetrics, ServerState, TokioInstant};

use crate::raft::engine::RaftRole;
use crate::raft::storage::state_machine::TableHost;
use crate::raft::types::RaftOf;
use crate::raft::types::{NodeId, TypeConfig};

type Metrics = RaftMetrics<TypeConfig>;

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
    pub fn role(&mut self, metrics: &Metrics, now: TokioInstant) -> RaftRole {
        match metrics.state {
            ServerState::Leader => {
                let term = metrics.current_term;
                let since = match self.leading_since {
                    Some((t, at)) if t == term => at,
                    _ => {
                        self.leading_since = Some((term, now));
                        now
                    }
                };
                let acked = metrics.last_quorum_acked.map_or(since, |a| *a);
                // A node that is the only voter is its own majority: it
                // hears no acknowledgement because it needs none.
                let mut voters = metrics.membership_config.membership().voter_ids();
                let alone = voters.next() == Some(metrics.id) && voters.next().is_none();
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
                leader: metrics.current_leader,
            },
        }
    }
}

trait SaturatingSince {
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

/// Follows openraft's role, re-checking the leader's quorum every `tick`
/// (its metrics do not change while nobody answers), and calls `apply`
/// with each role and the metrics it came from. Returns once the core is
/// gone.
///
/// Woken by the server metrics (role, leader, vote, membership), which
/// change only with them, not by the full metrics: openraft publishes
/// those after every step of its loop, several times a commit, and each
/// wake-up cost a task switch and a turn of the lock node for nothing.
pub async fn follow_role<H: TableHost>(
    raft: RaftOf<H>,
    step_down_after: Duration,
    tick: Duration,
    mut apply: impl FnMut(RaftRole, &Metrics),
) {
    let mut server = raft.server_metrics();
    let mut all = raft.metrics();
    let mut roles = RoleWatch::new(step_down_after);
    loop {
        // A copy, so that `apply` (which takes the server's lock) runs with
        // no guard of the watch held: `S` reads the watch under that lock
        // (`MetricsView`), and a guard held across it, with openraft's
        // sender waiting to write, would deadlock the two.
        let metrics = all.borrow_and_update().clone();
        let role = roles.role(&metrics, TokioInstant::now());
        apply(role, &metrics);
        tokio::select! {
            changed = server.changed() => {
                if changed.is_err() || catch_up(&mut all, &mut server).await.is_err() {
                    return;
                }
            }
            () = tokio::time::sleep(tick) => {}
        }
    }
}

/// Waits until the full metrics show what the server metrics just did.
/// openraft sends the server metrics first and the full ones right after,
/// in the same step, but a task on another worker thread can run in
/// between. Errs once the core is gone.
async fn catch_up(
    all: &mut WatchReceiverOf<TypeConfig, Metrics>,
    server: &mut WatchReceiverOf<TypeConfig, RaftServerMetrics<TypeConfig>>,
) -> Result<(), ()> {
    loop {
        let shown = {
            let server = server.borrow_and_update();
            shows(&all.borrow_watched(), &server)
        };
        if shown {
            return Ok(());
        }
        all.changed().await.map_err(|_| ())?;
    }
}

/// Whether `all` holds the role, leader, vote and membership of `server`.
fn shows(all: &Metrics, server: &RaftServerMetrics<TypeConfig>) -> bool {
    all.state == server.state
        && all.current_leader == server.current_leader
        && all.vote == server.vote
        && all.membership_config.log_id() == server.membership_config.log_id()
}

/// Resolves when the consensus core stops for any reason but a requested
/// shutdown, with the reason: a storage error (disk full, a file that can
/// no longer be written) or a panic. Such a node can neither lead nor
/// follow, so it should exit and be restarted.
///
/// openraft records why it stopped in its full metrics just before the
/// core goes, which closes every metrics channel; this waits on the
/// server metrics, which change only with the role, so that it is not
/// woken at every step of the core.
pub async fn core_died<H: TableHost>(raft: RaftOf<H>) -> String {
    let mut server = raft.server_metrics();
    let all = raft.metrics();
    while server.changed().await.is_ok() {}
    let state = all.borrow_watched().running_state.clone();
    match state {
        Err(Fatal::Stopped) => std::future::pending().await,
        Err(fatal) => fatal.to_string(),
        Ok(()) => {
            "the Raft core task ended unexpectedly (a panic: see the message before this one)"
                .to_string()
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

/// openraft's metrics as the lock node reads them when asked (`S`,
/// `/metrics`, `/v1/cluster`): a borrow of the watch, which wakes nothing.
pub struct MetricsView(WatchReceiverOf<TypeConfig, Metrics>);

impl MetricsView {
    pub fn new(watch: WatchReceiverOf<TypeConfig, Metrics>) -> MetricsView {
        MetricsView(watch)
    }

    /// The current term and the followers' replication (empty off the lead).
    pub fn progress(&self) -> (u64, Vec<PeerProgress>) {
        let metrics = self.0.borrow_watched();
        (metrics.current_term, replication(&metrics))
    }

    pub fn indexes(&self) -> LogIndexes {
        LogIndexes::of(&self.0.borrow_watched())
    }
}

impl std::fmt::Debug for MetricsView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MetricsView")
    }
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

    fn metrics(state: ServerState, term: u64) -> Metrics {
        let mut m = Metrics::new_initial(0);
        m.state = state;
        m.current_term = term;
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
        assert_eq!(roles.role(&m, t0), RaftRole::Leader { term: 2 });
        let later = t0 + Duration::from_secs(10);
        assert_eq!(roles.role(&m, later), RaftRole::Leader { term: 2 });
    }

    #[test]
    fn a_leader_without_a_majority_steps_down_and_comes_back() {
        let step = Duration::from_millis(300);
        let mut roles = RoleWatch::new(step);
        let t0 = TokioInstant::now();
        let mut m = metrics(ServerState::Leader, 3);
        // Fresh leader, no acknowledgement yet: leads for the step-down time.
        assert_eq!(roles.role(&m, t0), RaftRole::Leader { term: 3 });
        let later = t0 + Duration::from_millis(301);
        assert_eq!(roles.role(&m, later), RaftRole::Candidate);
        m.last_quorum_acked = Some(later.into());
        assert_eq!(
            roles.role(&m, later + Duration::from_millis(100)),
            RaftRole::Leader { term: 3 }
        );
        assert_eq!(
            roles.role(&m, later + Duration::from_millis(400)),
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
        let at = |index: u64| {
            Some(openraft::LogId::new(
                openraft::impls::leader_id_adv::LeaderId {
                    term: 3,
                    node_id: 0,
                },
                index,
            ))
        };
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
    fn a_stopped_core_redirects_to_nobody() {
        let mut roles = RoleWatch::new(Duration::from_millis(300));
        let m = metrics(ServerState::Shutdown, 3);
        assert_eq!(
            roles.role(&m, TokioInstant::now()),
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

    /// The server metrics of a new role reach the role follower before the
    /// full ones on another worker thread: it waits for the full metrics
    /// that show the role, rather than applying the old one.
    #[tokio::test]
    async fn a_role_change_waits_for_the_full_metrics_that_show_it() {
        use openraft::async_runtime::WatchSender;
        use openraft::type_config::TypeConfigExt;
        let initial = Metrics::new_initial(0);
        let server_of = |m: &Metrics| RaftServerMetrics::<TypeConfig> {
            id: m.id,
            vote: m.vote,
            state: m.state,
            current_leader: m.current_leader,
            membership_config: m.membership_config.clone(),
            committed_membership_config: m.committed_membership_config.clone(),
        };
        let (all_tx, mut all) = TypeConfig::watch_channel(initial.clone());
        let (server_tx, mut server) = TypeConfig::watch_channel(server_of(&initial));
        all.borrow_and_update();
        let mut leading = initial.clone();
        leading.state = ServerState::Leader;
        leading.current_leader = Some(0);
        server_tx.send(server_of(&leading)).expect("sent");
        let caught_up =
            tokio::spawn(async move { catch_up(&mut all, &mut server).await.map(|()| all) });
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(!caught_up.is_finished(), "applied the old full metrics");
        all_tx.send(leading).expect("sent");
        let all = caught_up.await.expect("ran").expect("core alive");
        assert_eq!(all.borrow_watched().state, ServerState::Leader);
        drop(all_tx);
        drop(server_tx);
    }

    /// Once the core is gone (its channels closed), waiting ends with an
    /// error instead of hanging.
    #[tokio::test]
    async fn catching_up_with_a_gone_core_ends() {
        use openraft::type_config::TypeConfigExt;
        let initial = Metrics::new_initial(0);
        let (all_tx, mut all) = TypeConfig::watch_channel(initial.clone());
        let mut leading = initial.clone();
        leading.state = ServerState::Leader;
        let (server_tx, mut server) = TypeConfig::watch_channel(RaftServerMetrics::<TypeConfig> {
            id: 0,
            vote: initial.vote,
            state: ServerState::Leader,
            current_leader: None,
            membership_config: initial.membership_config.clone(),
            committed_membership_config: initial.committed_membership_config.clone(),
        });
        drop(all_tx);
        assert!(catch_up(&mut all, &mut server).await.is_err());
        drop(server_tx);
    }

    /// The attack, straight at openraft (no link, no bounds): a
    /// granted vote of term 2^64 - 1, then an election, whose next term
    /// overflows. The core panics (debug builds check the overflow); what
    /// matters here is that the death is seen, so that batond exits
    /// (`core_died` is what its main loop waits on).
    #[tokio::test]
    async fn a_panic_of_the_consensus_core_is_seen() {
        use crate::raft::test_host;
        let dir = tempfile::tempdir().expect("dir");
        let peers = vec!["n0:1".to_string(), "n1:1".to_string()];
        let settings = test_host::settings(0, &peers, dir.path());
        let (raft, _host) = test_host::node(&settings).await;
        let vote = openraft::impls::Vote {
            leader_id: openraft::impls::leader_id_adv::LeaderId {
                term: u64::MAX,
                node_id: 1,
            },
            committed: false,
        };
        let request = openraft::raft::VoteRequest {
            vote,
            last_log_id: Some(openraft::LogId::new(vote.leader_id, 1_000)),
            leadership_transfer: false,
        };
        let granted = raft.vote(request).await.expect("answered");
        assert!(granted.vote_granted, "{granted:?}");
        let died = core_died(raft.clone());
        let _ = raft.trigger().elect(false).await;
        let reason = tokio::time::timeout(Duration::from_secs(10), died)
            .await
            .expect("the dead core is seen");
        assert!(!reason.is_empty());
        println!("core died: {reason}");
    }
}
