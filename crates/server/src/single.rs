//! The single mode: one node serving on its own, its tokens starting above
//! the wall clock and, with a data directory, above the tokens it saved,
//! and its held locks kept across a restart.
//!
//! Why tokens keep rising (docs/cluster.md has the cluster's version of
//! the argument): a node starts at `max(wall_ms << 20, saved + 2^26)`.
//! `ms << 20` grows by about a million tokens a millisecond, faster than a
//! node grants, so whatever a node issued before it stopped is below the
//! clock floor of the next start. The saved token plus a margin covers
//! what the clock cannot: a wall clock set back, or margins stacked by
//! restarts quicker than the margin's worth of clock (4 s). The floor is
//! written to the data directory before the first grant, so a crash right
//! after a restart cannot take the next start below it.

use std::path::Path;
use std::sync::Arc;

use baton_core::{
    Event, Key, LegacyTableSnapshot, LockService, LockTable, Millis, Quota, TableSnapshot, Token,
    WaiterId, WatchId,
};
use baton_proto::{Mode, Role};
use serde::{Deserialize, Serialize};

use crate::clock::Clock;
use crate::config::ServerConfig;
use crate::delivery::Mailbox;
use crate::listener::{Server, ServerError};
use crate::locks::SharedLocks;
use crate::node::{Events, LockNode, NodeCounters, NodeEvent, NodeStatus, Served};
use crate::persister::Persister;
use crate::request::{Answer, Incoming, LockRequest};
use crate::state_file::{StateFile, StateFileError, StateFormat};
use crate::token_floor;
use crate::watching::{earliest, NodeWatches};

/// The single node's file in its data directory.
pub const STATE_FILE: &str = "single-state";

/// What a single node keeps in its data directory: its lock table, whose
/// `last_token` is the last token issued or the floor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SingleState {
    pub table: TableSnapshot,
}

/// A [`SingleState`] as nodes before protocol 1.2 wrote it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LegacySingleState {
    pub table: LegacyTableSnapshot,
}

impl From<LegacySingleState> for SingleState {
    fn from(old: LegacySingleState) -> SingleState {
        SingleState {
            table: old.table.into(),
        }
    }
}

impl StateFormat for SingleState {
    type Legacy = LegacySingleState;
}

/// A node on its own: always serves.
#[derive(Debug)]
pub struct SingleNode {
    service: LockService<Mailbox>,
    watches: NodeWatches,
    scratch: Vec<Event<Mailbox>>,
    /// The service's count of changes at version 1 (see [`Self::version`]).
    changes_at_start: u64,
}

impl Default for SingleNode {
    fn default() -> Self {
        SingleNode::starting_above(LockTable::new(), 0)
    }
}

impl SingleNode {
    /// A node with an empty table whose tokens start at 1 (embedding and
    /// tests; `batond` starts with [`start_single`]).
    pub fn new() -> SingleNode {
        SingleNode::default()
    }

    /// A node over `table` whose tokens start above `floor`; it counts its
    /// changes for [`Self::state_to_persist`] from version 1.
    pub fn starting_above(table: LockTable, floor: Token) -> SingleNode {
        let mut service = LockService::from_table(table);
        service.raise_token_floor(floor);
        service.track_changes();
        SingleNode {
            changes_at_start: service.changes(),
            service,
            watches: NodeWatches::default(),
            scratch: Vec::new(),
        }
    }

    /// Answers the watches of the keys whose holders or values changed.
    fn answer_watches(&mut self, now: Millis, events: &mut Events) {
        let changed = self.service.drain_changed_keys();
        let service = &self.service;
        self.watches
            .after_changes(changed, |key| service.query(key, now), events);
    }

    /// The state to write if the table changed since version `written`,
    /// with its version.
    pub fn state_to_persist(&self, written: u64, now: Millis) -> Option<(u64, SingleState)> {
        let version = self.version();
        (version != written).then(|| {
            let table = self.service.table().snapshot(now);
            (version, SingleState { table })
        })
    }

    /// The table's version: 1 at the start, one more per change since.
    fn version(&self) -> u64 {
        1 + (self.service.changes() - self.changes_at_start)
    }

    /// The service's events, for the node's caller.
    fn pass_on(&mut self, events: &mut Events) {
        events.extend(self.scratch.drain(..).map(NodeEvent::from));
    }
}

impl LockNode for SingleNode {
    fn handle(&mut self, incoming: Incoming<'_>, events: &mut Events) -> Served<Answer> {
        let (now, reply_to) = (incoming.now, incoming.reply_to);
        let scratch = &mut self.scratch;
        let answer = match incoming.request {
            LockRequest::Acquire(acquire) => {
                let acquire = acquire.to_acquire();
                Answer::Acquired(self.service.acquire(acquire, now, reply_to.clone()))
            }
            LockRequest::Release { key, token } => {
                Answer::Changed(self.service.release(key, token, now, scratch))
            }
            LockRequest::Renew {
                key,
                token,
                lease_ms,
            } => Answer::Changed(self.service.renew(key, token, lease_ms, now, scratch)),
            LockRequest::Query { key } => Answer::Queried(self.service.query(key, now)),
            LockRequest::SetValue { key, token, value } => {
                let value = value.cloned();
                Answer::Changed(self.service.set_value(key, token, value, now, scratch))
            }
            LockRequest::Watch { key, wait_ms, seen } => {
                let state = self.service.query(key, now);
                self.watches.watch(key, wait_ms, seen, state, now, reply_to)
            }
        };
        self.pass_on(events);
        self.answer_watches(now, events);
        Served::Done(answer)
    }

    fn cancel(&mut self, id: WaiterId) {
        self.service.cancel(id);
    }

    fn cancel_watch(&mut self, id: WatchId) {
        self.watches.cancel(id);
    }

    fn tick(&mut self, now: Millis, events: &mut Events) {
        self.service.tick(now, &mut self.scratch);
        self.pass_on(events);
        self.answer_watches(now, events);
        let service = &self.service;
        self.watches
            .tick(now, |key| service.query(key, now), events);
    }

    fn next_deadline(&self) -> Option<Millis> {
        earliest(self.service.next_deadline(), self.watches.next_deadline())
    }

    fn set_quota(&mut self, quota: Quota) {
        self.service.set_quota(quota);
        self.watches.set_max(quota.max_watches);
    }

    fn served_table(&self) -> Result<&LockTable, Option<String>> {
        Ok(self.service.table())
    }

    fn waiters_on(&self, key: &Key, now: Millis) -> u64 {
        self.service.query(key, now).waiters
    }

    fn counters(&self) -> NodeCounters {
        NodeCounters {
            expiries: self.service.expiries(),
            ..NodeCounters::default()
        }
    }

    fn status(&self) -> NodeStatus {
        let (table, waiters) = (self.service.table(), self.service.waiter_count());
        NodeStatus::of_table(Role::Single, Mode::Single, table, waiters)
    }
}

/// The writer of a single node's data directory.
pub type SinglePersister = Persister<SingleNode, SingleState>;

/// A single node, bound, with its state writer when it has a data directory.
#[derive(Debug)]
pub struct SingleRunning {
    pub server: Server<SingleNode>,
    pub persister: Option<Arc<SinglePersister>>,
}

/// Why a single node did not start.
#[derive(Debug, thiserror::Error)]
pub enum SingleStartError {
    #[error(transparent)]
    Bind(#[from] ServerError),
    #[error(transparent)]
    State(#[from] StateFileError),
}

/// Refuses a saved table with a token at or above
/// [`token_floor::TOKEN_CEILING`]: a damaged or forged file. Started on it,
/// the node would grant from a floor near the end of the token space, or
/// not at all. A lower saved token is kept however far it lies above the
/// clock: the clock may have been set back, and the saved token is then
/// all that keeps the next tokens above the old ones.
fn check_saved_tokens(
    file: &StateFile<SingleState>,
    table: &TableSnapshot,
) -> Result<(), StateFileError> {
    let highest = table
        .locks
        .iter()
        .map(|lock| lock.token)
        .fold(table.last_token, Token::max);
    if highest < token_floor::TOKEN_CEILING {
        return Ok(());
    }
    Err(StateFileError::Damaged {
        path: file.path().to_path_buf(),
        why: format!(
            "token {highest} is at or beyond {}, which no node issues before the year 2248",
            token_floor::TOKEN_CEILING
        ),
    })
}

/// Starts a single node: tokens above the wall clock and, with `data_dir`
/// (locked by the caller), the locks and tokens of the last run. The floor
/// is on disk before the node binds.
pub async fn start_single(
    config: ServerConfig,
    data_dir: Option<&Path>,
) -> Result<SingleRunning, SingleStartError> {
    let clock = Clock::new();
    let now = clock.now();
    let wall_ms = token_floor::wall_clock_ms();
    let Some(dir) = data_dir else {
        let floor = token_floor::restart_floor(wall_ms, None);
        let node = SingleNode::starting_above(LockTable::new(), floor);
        tracing::info!(floor, "tokens start above the wall-clock floor");
        let locks = Arc::new(SharedLocks::new(node, clock));
        let server = Server::bind_shared(config, locks, None).await?;
        return Ok(SingleRunning {
            server,
            persister: None,
        });
    };
    let file = StateFile::<SingleState>::open(dir, STATE_FILE)?;
    let saved = file.load()?;
    if let Some(state) = &saved {
        check_saved_tokens(&file, &state.table)?;
    }
    let (table, saved_token) = match &saved {
        Some(state) => {
            let table = LockTable::restore(&state.table, now);
            tracing::info!(
                locks = table.len(),
                last_token = table.last_token(),
                "recovered the state of the last run"
            );
            let last = table.last_token();
            (table, Some(last))
        }
        None => (LockTable::new(), None),
    };
    let floor = token_floor::restart_floor(wall_ms, saved_token);
    let node = SingleNode::starting_above(table, floor);
    tracing::info!(floor, "tokens start above this floor");
    // Durable before any grant: see the module doc.
    let (version, state) = node
        .state_to_persist(0, now)
        .unwrap_or_else(|| unreachable!("a fresh node has version 1"));
    file.store(&state)?;
    let locks = Arc::new(SharedLocks::new(node, clock));
    let server = Server::bind_shared(config, locks.clone(), None).await?;
    let persister = Persister::new(
        file,
        locks,
        |node: &SingleNode, written, now| node.state_to_persist(written, now),
        version,
    );
    persister.spawn(server.tasks());
    Ok(SingleRunning {
        server,
        persister: Some(persister),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::AcquireRef;
    use crate::test_support::key;
    use baton_core::{AcquireOptions, AcquireOutcome, LockMode};

    /// A plain acquire's options.
    static PLAIN: AcquireOptions = AcquireOptions {
        permits: 1,
        mode: LockMode::Exclusive,
        value: None,
    };

    fn plain(k: &Key, wait_ms: u64, lease_ms: u64) -> AcquireRef<'_> {
        let options = &PLAIN;
        AcquireRef {
            key: k,
            wait_ms,
            lease_ms,
            options,
        }
    }

    /// Asks `node` for `acquire` at `now`; nobody reads the answers.
    fn ask(
        node: &mut SingleNode,
        acquire: AcquireRef<'_>,
        now: Millis,
        events: &mut Events,
    ) -> Served<Answer> {
        let request = LockRequest::Acquire(acquire);
        let reply_to = &Mailbox::closed();
        node.handle(
            Incoming {
                request,
                now,
                reply_to,
            },
            events,
        )
    }

    fn grant(node: &mut SingleNode, k: &str, now: Millis) -> Token {
        grant_with(node, k, now, &mut Vec::new())
    }

    fn grant_with(node: &mut SingleNode, k: &str, now: Millis, events: &mut Events) -> Token {
        match ask(node, plain(&key(k), 0, 10_000), now, events) {
            Served::Done(Answer::Acquired(AcquireOutcome::Granted { token })) => token,
            other => panic!("expected a grant, got {other:?}"),
        }
    }

    #[test]
    fn a_tick_counts_every_lease_it_ends_also_one_handed_on() {
        let mut node = SingleNode::new();
        let mut events = Vec::new();
        for k in ["alone", "passed", "kept"] {
            let lease_ms = if k == "kept" { 10_000 } else { 20 };
            let _ = ask(&mut node, plain(&key(k), 1, lease_ms), 0, &mut events);
        }
        let passed = key("passed");
        let queued = ask(&mut node, plain(&passed, 10_000, 10_000), 0, &mut events);
        assert!(matches!(
            queued,
            Served::Done(Answer::Acquired(AcquireOutcome::Queued { .. }))
        ));
        node.tick(10, &mut events);
        assert_eq!(node.counters().expiries, 0, "no lease has ended yet");
        node.tick(30, &mut events);
        assert_eq!(node.counters().expiries, 2, "{events:?}");
        assert_eq!(node.status().locks, 2, "passed is held by its waiter");
        node.tick(40, &mut events);
        assert_eq!(node.counters().expiries, 2);
    }

    /// A writer's wait running out lets the reader queued behind it share
    /// the key: a grant in a tick, though no lease ended.
    #[test]
    fn a_wait_running_out_ends_no_lease_though_it_lets_a_reader_in() {
        let mut node = SingleNode::new();
        let mut events = Vec::new();
        let shared = AcquireOptions::shared();
        let k = key("k");
        for (wait_ms, options) in [(1, &shared), (10, &PLAIN), (10_000, &shared)] {
            let acquire = AcquireRef {
                wait_ms,
                options,
                ..plain(&k, 0, 10_000)
            };
            let _ = ask(&mut node, acquire, 0, &mut events);
        }
        node.tick(20, &mut events);
        let granted = events
            .iter()
            .filter(|e| matches!(e, NodeEvent::Granted { .. }));
        assert_eq!(granted.count(), 1, "{events:?}");
        assert_eq!(node.counters().expiries, 0, "{events:?}");
    }

    #[test]
    fn tokens_start_above_the_floor_and_status_shows_it() {
        let mut node = SingleNode::starting_above(LockTable::new(), 1 << 40);
        assert_eq!(node.status().token, 1 << 40);
        assert_eq!(grant(&mut node, "a", 0), (1 << 40) + 1);
        assert_eq!(node.status().token, (1 << 40) + 1);
    }

    #[test]
    fn every_change_and_only_a_change_is_a_new_version_to_save() {
        let mut node = SingleNode::starting_above(LockTable::new(), 100);
        let (v1, first) = node
            .state_to_persist(0, 0)
            .unwrap_or_else(|| panic!("nothing to save at start"));
        assert_eq!(first.table.last_token, 100);
        assert!(node.state_to_persist(v1, 0).is_none());
        let token = grant(&mut node, "a", 0);
        let (v2, state) = node
            .state_to_persist(v1, 5)
            .unwrap_or_else(|| panic!("a grant is a change"));
        assert_eq!(state.table.locks.len(), 1);
        assert_eq!(state.table.locks[0].token, token);
        let mut events = Vec::new();
        node.release_unreceived(&key("a"), token + 7, 1, &mut events);
        assert!(node.state_to_persist(v2, 1).is_none(), "a stale release");
        node.release_unreceived(&key("a"), token, 1, &mut events);
        assert!(node.state_to_persist(v2, 1).is_some());
    }

    #[tokio::test]
    async fn a_restart_on_the_data_dir_keeps_locks_and_starts_above_the_saved_token() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let config = ServerConfig {
            listen: ([127, 0, 0, 1], 0).into(),
            ..ServerConfig::default()
        };
        // A saved token far above the clock, as stacked margins leave it.
        let ahead = token_floor::wall_floor(token_floor::wall_clock_ms()) + (1 << 40);
        let mut table = LockTable::new();
        table.raise_token_floor(ahead);
        table.apply(
            &baton_core::Command::Grant {
                key: key("held"),
                lease_ms: 60_000,
            },
            0,
        );
        let file = StateFile::<SingleState>::open(dir.path(), STATE_FILE)
            .unwrap_or_else(|e| panic!("{e}"));
        file.store(&SingleState {
            table: table.snapshot(0),
        })
        .unwrap_or_else(|e| panic!("{e}"));

        let running = start_single(config, Some(dir.path()))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let floor = ahead + 1 + token_floor::TOKEN_MARGIN;
        let status = running.server.locks().with(|node, _, _| node.status());
        assert_eq!((status.token, status.locks), (floor, 1));
        // On disk before any grant, so a crash now cannot go below it.
        let saved = file
            .load()
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|| panic!("no state"));
        assert_eq!(saved.table.last_token, floor);
        assert_eq!(saved.table.locks[0].token, ahead + 1);
    }

    /// A single node on a fresh data directory, and its state writer.
    async fn started_on_a_data_dir() -> (tempfile::TempDir, SingleRunning, Arc<SinglePersister>) {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let config = ServerConfig {
            listen: ([127, 0, 0, 1], 0).into(),
            ..ServerConfig::default()
        };
        let mut running = start_single(config, Some(dir.path()))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let persister = running
            .persister
            .take()
            .unwrap_or_else(|| panic!("a data dir has a writer"));
        (dir, running, persister)
    }

    #[tokio::test]
    async fn a_failed_write_is_reported_and_every_later_write_fails() {
        let (dir, running, persister) = started_on_a_data_dir().await;
        assert!(persister.write_if_changed().await.is_ok(), "nothing new");
        let tmp = dir.path().join(format!("{STATE_FILE}.tmp"));
        std::fs::create_dir(&tmp).unwrap_or_else(|e| panic!("{e}"));
        let _ = running
            .server
            .locks()
            .with(|node, now, events| grant_with(node, "k", now, events));
        // The periodic writer meets the fault within a write interval.
        let error = tokio::time::timeout(std::time::Duration::from_secs(5), persister.failed())
            .await
            .unwrap_or_else(|_| panic!("the failed write was not reported"));
        assert!(error.to_string().contains(&tmp.display().to_string()));
        std::fs::remove_dir(&tmp).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            persister.write_if_changed().await.is_err(),
            "a stopping node writes no more"
        );
    }

    /// A stopping node drops its periodic writer wherever it waits, also
    /// in the middle of a write; the final write that follows must neither
    /// fail on the temporary file nor be overwritten by the older state.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_write_dropped_midway_does_not_race_the_next_one() {
        let (dir, running, persister) = started_on_a_data_dir().await;
        let file = StateFile::<SingleState>::open(dir.path(), STATE_FILE)
            .unwrap_or_else(|e| panic!("{e}"));
        for round in 0..50 {
            let locks = running.server.locks();
            let _ =
                locks.with(|node, now, events| grant_with(node, &format!("a{round}"), now, events));
            // Polled once: the write is under way when it is dropped.
            let dropped =
                tokio::time::timeout(std::time::Duration::ZERO, persister.write_if_changed()).await;
            assert!(!matches!(dropped, Ok(Err(_))), "round {round}: {dropped:?}");
            let newest =
                locks.with(|node, now, events| grant_with(node, &format!("b{round}"), now, events));
            if let Err(error) = persister.write_if_changed().await {
                panic!("round {round}: {error}");
            }
            let saved = file
                .load()
                .unwrap_or_else(|e| panic!("{e}"))
                .unwrap_or_else(|| panic!("no state"));
            assert_eq!(saved.table.last_token, newest, "round {round}");
        }
    }
}
