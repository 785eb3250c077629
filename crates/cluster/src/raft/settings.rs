//! How to run one Raft node: its id and seeds, its data directory, its
//! timings, its keys; and the openraft configuration and the time bounds
//! derived from them.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use openraft::{Config, SnapshotPolicy};

use super::net::limits::MAX_PAYLOAD_ENTRIES;
use super::shell::StartError;
use super::storage::log_store::{LogWrites, DEFAULT_SEGMENT_BYTES};
use super::types::NodeId;
use crate::peer::ClusterKeys;

/// The longest [`RaftSettings::step_down_after`] made of election timeouts.
const STEP_DOWN_MAX_MS: u64 = 1_000;

/// How to run one Raft node.
#[derive(Debug, Clone)]
pub struct RaftSettings {
    /// This node's id: its position in `peers` for a seed, or
    /// [`super::members::joined_id`] of its address for a node that joins
    /// (the data directory's recorded id wins, see [`super::storage::identity`]).
    pub me: NodeId,
    /// The seeds: every node's client address in a fresh cluster, the same
    /// list everywhere. Once the log holds a membership, that is used.
    pub peers: Vec<String>,
    /// This node joins a running cluster (`baton member add`): it never
    /// sets up a cluster of its own, and waits for a leader to reach it.
    pub join: bool,
    pub data_dir: PathBuf,
    pub heartbeat_ms: u64,
    /// Followers call an election after this long without a leader, plus
    /// a random part of as much again.
    pub election_timeout_ms: u64,
    /// Entries applied between two snapshots (each snapshot purges the log).
    pub snapshot_every: u64,
    pub segment_bytes: u64,
    /// The cluster key(s): peers prove they hold one (see `crate::peer`).
    pub keys: ClusterKeys,
    /// When the log's `append` returns; simulations await each write.
    pub log_writes: LogWrites,
}

impl RaftSettings {
    pub fn new(
        me: NodeId,
        peers: Vec<String>,
        data_dir: PathBuf,
        keys: ClusterKeys,
    ) -> RaftSettings {
        RaftSettings {
            keys,
            me,
            peers,
            join: false,
            data_dir,
            heartbeat_ms: 50,
            election_timeout_ms: 300,
            snapshot_every: 10_000,
            segment_bytes: DEFAULT_SEGMENT_BYTES,
            log_writes: LogWrites::Overlapped,
        }
    }

    /// These settings with the id the data directory belongs to: the one
    /// recorded there, or (on its first run) `me`, then recorded.
    pub fn settled(mut self) -> Result<RaftSettings, StartError> {
        self.me = super::storage::identity::settle(&self.data_dir, self.me)?;
        Ok(self)
    }

    /// The seeds this node starts with: none for a node that joins.
    pub(super) fn seeds(&self) -> Vec<String> {
        if self.join {
            Vec::new()
        } else {
            self.peers.clone()
        }
    }

    /// A leader that has not heard from a majority for this long stops
    /// serving (see [`super::node::observe`]): three election timeouts, at most
    /// `STEP_DOWN_MAX_MS` (but never less than one election timeout).
    /// One was too eager: under a burst (a million locks granted as fast
    /// as the pipeline allows, three nodes on one core) followers answer
    /// more than 300 ms late, and the leader stepped down and back within
    /// milliseconds, answering `M` meanwhile. Safety does not depend on
    /// it: a leader without a majority commits nothing.
    pub fn step_down_after(&self) -> Duration {
        let three = self.election_timeout_ms.saturating_mul(3);
        Duration::from_millis(three.min(STEP_DOWN_MAX_MS).max(self.election_timeout_ms))
    }

    /// How long requests in the log of an ended leadership wait for their
    /// entry: what is left of the protocol's 3 s once the step-down took
    /// its time (with a margin for the checks and the delivery), at most
    /// [`super::engine::ORPHAN_WAIT_MS`], at least 0.3 s.
    pub fn orphan_wait_ms(&self) -> u64 {
        let step_down = self.step_down_after().as_millis() as u64;
        super::engine::ANSWER_BUDGET_MS
            .saturating_sub(step_down)
            .clamp(300, super::engine::ORPHAN_WAIT_MS)
    }

    /// A live follower whose replication has not moved for this long while
    /// it lags is stuck (see [`super::node::observe::StuckWatch`]).
    pub fn stuck_after(&self) -> Duration {
        Duration::from_millis((self.election_timeout_ms * 4).max(1_000))
    }

    /// A follower that has acknowledged no heartbeat for this long is
    /// shown unreachable (`/v1/cluster`, `baton_peer_up`): many heartbeats,
    /// and more than an election timeout, so a slow answer is not a death.
    pub fn silent_after(&self) -> Duration {
        Duration::from_millis(
            (self.election_timeout_ms * 2)
                .max(self.heartbeat_ms * 10)
                .max(1_000),
        )
    }

    /// How often a leader re-checks that a majority still answers.
    pub fn quorum_check_every(&self) -> Duration {
        Duration::from_millis(self.heartbeat_ms.clamp(10, 100))
    }

    pub(super) fn openraft_config(&self) -> Result<Config, io::Error> {
        let config = Config {
            cluster_name: "baton".to_string(),
            heartbeat_interval: self.heartbeat_ms,
            election_timeout_min: self.election_timeout_ms,
            election_timeout_max: self.election_timeout_ms * 2,
            snapshot_policy: SnapshotPolicy::LogsSinceLast(self.snapshot_every),
            max_in_snapshot_log_to_keep: self.snapshot_every / 10,
            // A node that was cut off (or paused, or restarted) first asks
            // whether it could win: it cannot depose a leader a majority
            // still follows, so its return costs the others no election.
            enable_pre_vote: Some(true),
            // A follower whose data directory was wiped comes back with an
            // empty log. Without this the leader keeps sending from where
            // that follower used to be, forever and silently (openraft
            // only debug-asserts on it); with it the leader starts that
            // follower's replication over, by snapshot once the log is
            // purged.
            allow_log_reversion: Some(true),
            // A leader restarted within an election timeout would
            // otherwise lead on in its old term without a new first
            // entry: the engine serves only once it applied its own first
            // entry of the term, which may lie in the snapshot, so such a
            // leader never served again (found by the simulation). The
            // table is not fsynced at apply either, which openraft names
            // as unsafe with this on.
            enable_leader_restore: Some(false),
            // Followers cap request frames from this (see `limits`).
            max_payload_entries: MAX_PAYLOAD_ENTRIES,
            ..Config::default()
        };
        config
            .validate()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_off_leader_answers_within_the_rule_at_any_election_timeout() {
        for election_timeout_ms in [150, 300, 1_000, 2_000] {
            let mut settings = RaftSettings::new(
                0,
                vec!["a:1".into()],
                PathBuf::new(),
                ClusterKeys::from_text(&"k".repeat(32)).expect("key"),
            );
            settings.election_timeout_ms = election_timeout_ms;
            let worst = settings.step_down_after().as_millis() as u64
                + settings.quorum_check_every().as_millis() as u64
                + settings.orphan_wait_ms();
            assert!(worst < 3_000, "{election_timeout_ms} ms: {worst} ms");
        }
    }

    #[test]
    fn openraft_sends_no_more_entries_than_followers_accept() {
        let settings = RaftSettings::new(
            0,
            vec!["a:1".into()],
            PathBuf::new(),
            ClusterKeys::from_text(&"k".repeat(32)).expect("key"),
        );
        let config = settings.openraft_config().expect("valid");
        assert_eq!(config.max_payload_entries, MAX_PAYLOAD_ENTRIES);
    }
}
