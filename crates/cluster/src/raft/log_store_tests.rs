//! Tests of the durable Raft log: what survives a reopen, torn tails,
//! truncation, purging, and the snapshot file.

use std::fs;
use std::path::Path;

use baton_core::{Command, Key, LockTable};
use openraft::impls::leader_id_adv::LeaderId;
use openraft::impls::Vote;
use openraft::storage::{IOFlushed, RaftLogReader, RaftLogStorage};
use openraft::{EntryPayload, LogId};

use super::log_store::LogStore;
use super::segment;
use super::snapshot_store::{self, SnapshotStore, StoredSnapshot};
use super::types::{Entry, Proposal, SnapshotMeta, Tagged};

fn log_id(term: u64, index: u64) -> LogId<LeaderId<u64, u64>> {
    LogId {
        leader_id: LeaderId { term, node_id: 0 },
        index,
    }
}

fn entry(term: u64, index: u64) -> Entry {
    let key = Key::new(format!("k{index}").as_bytes()).unwrap_or_else(|e| panic!("{e}"));
    Entry {
        log_id: log_id(term, index),
        payload: EntryPayload::Normal(Proposal {
            origin: 1,
            commands: vec![Tagged {
                tag: index,
                command: Command::Grant { key, lease_ms: 10 },
            }],
        }),
    }
}

fn run<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap_or_else(|e| panic!("{e}"))
        .block_on(f)
}

async fn append(log: &mut LogStore, entries: Vec<Entry>) {
    log.append(entries, IOFlushed::noop())
        .await
        .unwrap_or_else(|e| panic!("append: {e}"));
}

async fn indexes(log: &mut LogStore) -> Vec<(u64, u64)> {
    log.try_get_log_entries(0..)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .iter()
        .map(|e| (e.log_id.leader_id.term, e.log_id.index))
        .collect()
}

fn open(dir: &Path, segment_bytes: u64) -> LogStore {
    LogStore::open(dir, segment_bytes).unwrap_or_else(|e| panic!("open: {e}"))
}

#[test]
fn entries_vote_and_committed_survive_a_reopen() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    run(async {
        let mut log = open(dir.path(), 1 << 20);
        append(&mut log, (1..=5).map(|i| entry(1, i)).collect()).await;
        let vote = Vote::new(3, 1);
        log.save_vote(&vote).await.unwrap_or_else(|e| panic!("{e}"));
        log.save_committed(Some(log_id(1, 4)))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        drop(log);
        let mut log = open(dir.path(), 1 << 20);
        assert_eq!(
            indexes(&mut log).await,
            (1..=5).map(|i| (1, i)).collect::<Vec<_>>()
        );
        assert_eq!(log.read_vote().await.ok().flatten(), Some(vote));
        assert_eq!(
            log.read_committed().await.ok().flatten(),
            Some(log_id(1, 4))
        );
        let state = log.get_log_state().await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(state.last_log_id, Some(log_id(1, 5)));
        assert_eq!(state.last_purged_log_id, None);
    });
}

#[test]
fn truncation_and_conflicting_entries_replay_as_they_happened() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    run(async {
        let mut log = open(dir.path(), 1 << 20);
        append(&mut log, (1..=5).map(|i| entry(1, i)).collect()).await;
        log.truncate_after(Some(log_id(1, 3)))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        append(&mut log, vec![entry(2, 4)]).await;
        let expected = vec![(1, 1), (1, 2), (1, 3), (2, 4)];
        assert_eq!(indexes(&mut log).await, expected);
        drop(log);
        let mut log = open(dir.path(), 1 << 20);
        assert_eq!(indexes(&mut log).await, expected);
    });
}

#[test]
fn a_torn_tail_is_cut_and_the_rest_kept() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    run(async {
        let mut log = open(dir.path(), 1 << 20);
        append(&mut log, (1..=3).map(|i| entry(1, i)).collect()).await;
        drop(log);
        let seqs = segment::list(dir.path()).unwrap_or_else(|e| panic!("{e}"));
        let last = segment::path(
            dir.path(),
            *seqs.last().unwrap_or_else(|| panic!("no segment")),
        );
        let mut bytes = fs::read(&last).unwrap_or_else(|e| panic!("{e}"));
        let cut = bytes.len() - 3;
        bytes.truncate(cut);
        fs::write(&last, &bytes).unwrap_or_else(|e| panic!("{e}"));
        let mut log = open(dir.path(), 1 << 20);
        assert_eq!(indexes(&mut log).await, vec![(1, 1), (1, 2)]);
        append(&mut log, vec![entry(1, 3)]).await;
        drop(log);
        let mut log = open(dir.path(), 1 << 20);
        assert_eq!(indexes(&mut log).await, vec![(1, 1), (1, 2), (1, 3)]);
    });
}

#[test]
fn purging_drops_entries_and_deletes_old_segments() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    run(async {
        // Tiny segments: every append starts a new one.
        let mut log = open(dir.path(), 1);
        for i in 1..=20 {
            append(&mut log, vec![entry(1, i)]).await;
        }
        assert!(log.segment_count() > 10);
        log.purge(log_id(1, 15))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(log.segment_count() <= 7, "{} segments", log.segment_count());
        assert_eq!(
            indexes(&mut log).await,
            (16..=20).map(|i| (1, i)).collect::<Vec<_>>()
        );
        drop(log);
        let mut log = open(dir.path(), 1);
        assert_eq!(
            indexes(&mut log).await,
            (16..=20).map(|i| (1, i)).collect::<Vec<_>>()
        );
        let state = log.get_log_state().await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(state.last_purged_log_id, Some(log_id(1, 15)));
        // Purging everything leaves the last id known.
        log.purge(log_id(1, 20))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        drop(log);
        let mut log = open(dir.path(), 1);
        let state = log.get_log_state().await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(state.last_log_id, Some(log_id(1, 20)));
        assert!(indexes(&mut log).await.is_empty());
    });
}

#[test]
fn the_snapshot_file_round_trips_the_table() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let store = SnapshotStore::new(dir.path()).unwrap_or_else(|e| panic!("{e}"));
    assert!(store.load().unwrap_or_else(|e| panic!("{e}")).is_none());
    let mut table = LockTable::new();
    let key = Key::new(b"held").unwrap_or_else(|e| panic!("{e}"));
    table.apply(&Command::Grant { key, lease_ms: 500 }, 0);
    let data = snapshot_store::encode_table(&table.snapshot(100)).unwrap_or_else(|e| panic!("{e}"));
    let stored = StoredSnapshot {
        meta: SnapshotMeta {
            last_log_id: Some(log_id(2, 9)),
            last_membership: Default::default(),
        },
        data,
    };
    store.save(&stored).unwrap_or_else(|e| panic!("{e}"));
    let loaded = store
        .load()
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|| panic!("no snapshot"));
    assert_eq!(loaded.meta, stored.meta);
    let back = snapshot_store::decode_table(&loaded.data).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        LockTable::restore(&back, 100),
        LockTable::restore(&table.snapshot(100), 100)
    );
    assert!(snapshot_store::decode_table(b"\xff\xff\xff").is_err());
}
