//! Tests of the durable Raft log: what survives a reopen, torn tails,
//! truncation, purging, and the snapshot file.

use std::fs;
use std::ops::RangeInclusive;
use std::path::Path;

use baton_core::{Command, Key, LockTable};
use openraft::impls::leader_id_adv::LeaderId;
use openraft::impls::Vote;
use openraft::storage::{IOFlushed, RaftLogReader, RaftLogStorage};
use openraft::{EntryPayload, LogId};

use crate::raft::storage::log_store::LogStore;
use crate::raft::storage::segment;
use crate::raft::storage::snapshot_store::{self, SnapshotStore, StoredSnapshot};
use crate::raft::types::{Entry, Proposal, SnapshotMeta, Tagged};

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

/// Entries `indexes` of `term`, one grant each.
fn entries(term: u64, indexes: RangeInclusive<u64>) -> Vec<Entry> {
    indexes.map(|i| entry(term, i)).collect()
}

/// The (term, index) pairs of [`entries`].
fn ids(term: u64, indexes: RangeInclusive<u64>) -> Vec<(u64, u64)> {
    indexes.map(|i| (term, i)).collect()
}

fn run<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap_or_else(|e| panic!("{e}"))
        .block_on(f)
}

/// Appends and waits until the entries are durable (an append only
/// queues them for the writer thread).
async fn append(log: &mut LogStore, entries: Vec<Entry>) {
    log.append(entries, IOFlushed::noop())
        .await
        .unwrap_or_else(|e| panic!("append: {e}"));
    log.sync().await.unwrap_or_else(|e| panic!("sync: {e}"));
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

/// A log in `dir` (1 MiB segments) holding entries 1 to 3 of term 1,
/// closed.
fn three_entries_written(dir: &Path) {
    run(async {
        let mut log = open(dir, 1 << 20);
        append(&mut log, entries(1, 1..=3)).await;
    });
}

#[test]
fn entries_vote_and_committed_survive_a_reopen() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    run(async {
        let mut log = open(dir.path(), 1 << 20);
        append(&mut log, entries(1, 1..=5)).await;
        let vote = Vote::new(3, 1);
        log.save_vote(&vote).await.unwrap_or_else(|e| panic!("{e}"));
        log.save_committed(Some(log_id(1, 4)))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        drop(log);
        let mut log = open(dir.path(), 1 << 20);
        assert_eq!(indexes(&mut log).await, ids(1, 1..=5));
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
        append(&mut log, entries(1, 1..=5)).await;
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
    three_entries_written(dir.path());
    let (last, mut bytes) = newest_segment(dir.path());
    // The segment is preallocated: tear the last record written, not
    // the zeros after it.
    let cut = segment::scan(&bytes).good_len - 3;
    bytes.truncate(cut);
    fs::write(&last, &bytes).unwrap_or_else(|e| panic!("{e}"));
    run(async {
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
        assert_eq!(indexes(&mut log).await, ids(1, 16..=20));
        drop(log);
        let mut log = open(dir.path(), 1);
        assert_eq!(indexes(&mut log).await, ids(1, 16..=20));
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
fn a_snapshot_saved_in_pieces_is_the_encoding_of_the_whole() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let store = SnapshotStore::new(dir.path()).unwrap_or_else(|e| panic!("{e}"));
    // Lengths of one, two and three varint bytes.
    for len in [5, 300, 70_000] {
        let stored = StoredSnapshot {
            meta: SnapshotMeta {
                last_log_id: Some(log_id(3, 42)),
                last_membership: Default::default(),
            },
            data: (0..len).map(|i| (i % 251) as u8).collect(),
        };
        store.save(&stored).unwrap_or_else(|e| panic!("{e}"));
        let whole = postcard::to_allocvec(&stored).unwrap_or_else(|e| panic!("{e}"));
        let file = fs::read(store.path()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(&file[..8], b"BATONSN1");
        assert_eq!(file[8..12], crc32fast::hash(&whole).to_le_bytes());
        assert_eq!(&file[12..], &whole[..], "len {len}");
    }
}

#[test]
fn the_snapshot_file_round_trips_the_table() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let store = SnapshotStore::new(dir.path()).unwrap_or_else(|e| panic!("{e}"));
    assert!(store.load().unwrap_or_else(|e| panic!("{e}")).is_none());
    let stored = stored_snapshot();
    store.save(&stored).unwrap_or_else(|e| panic!("{e}"));
    let loaded = store
        .load()
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|| panic!("no snapshot"));
    assert_eq!(loaded.meta, stored.meta);
    let back = snapshot_store::decode_table(&loaded.data).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        LockTable::restore(&back, 100),
        LockTable::restore(&held_table().snapshot(100), 100)
    );
    assert!(snapshot_store::decode_table(b"\xff\xff\xff").is_err());
}

/// The newest segment's path and bytes.
fn newest_segment(dir: &Path) -> (std::path::PathBuf, Vec<u8>) {
    let seqs = segment::list(dir).unwrap_or_else(|e| panic!("{e}"));
    let path = segment::path(dir, *seqs.last().unwrap_or_else(|| panic!("no segment")));
    let bytes = fs::read(&path).unwrap_or_else(|e| panic!("{e}"));
    (path, bytes)
}

/// Where each record of `bytes` starts.
fn record_starts(bytes: &[u8]) -> Vec<usize> {
    let scan = segment::scan(bytes);
    let mut at = 0;
    scan.records
        .iter()
        .map(|r| {
            let start = at;
            at += segment::HEADER + r.len();
            start
        })
        .collect()
}

#[test]
fn a_bit_flip_before_intact_records_is_refused_naming_the_file_and_not_cut() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    run(async {
        let mut log = open(dir.path(), 1 << 20);
        append(&mut log, entries(1, 1..=3)).await;
        let vote = Vote::new(4, 1);
        log.save_vote(&vote).await.unwrap_or_else(|e| panic!("{e}"));
        append(&mut log, entries(4, 4..=6)).await;
        drop(log);
    });
    let (path, bytes) = newest_segment(dir.path());
    let starts = record_starts(&bytes);
    // Every record but the last, each at a payload byte and in its header.
    for (n, &start) in starts[..starts.len() - 1].iter().enumerate() {
        for at in [start + 2, start + segment::HEADER] {
            let mut flipped = bytes.clone();
            flipped[at] ^= 0x04;
            fs::write(&path, &flipped).unwrap_or_else(|e| panic!("{e}"));
            let error = LogStore::open(dir.path(), 1 << 20)
                .err()
                .unwrap_or_else(|| panic!("record {n}: a damaged log opened"));
            let message = error.to_string();
            assert!(message.contains(&path.display().to_string()), "{message}");
            assert!(message.contains(&format!("byte {start}")), "{message}");
            assert_eq!(
                fs::read(&path).unwrap_or_else(|e| panic!("{e}")),
                flipped,
                "record {n}: the damaged segment was changed"
            );
        }
    }
    // Repaired, it opens with everything, the vote included.
    fs::write(&path, &bytes).unwrap_or_else(|e| panic!("{e}"));
    run(async {
        let mut log = open(dir.path(), 1 << 20);
        assert_eq!(indexes(&mut log).await.len(), 6);
        assert_eq!(log.read_vote().await.ok().flatten(), Some(Vote::new(4, 1)));
    });
}

#[test]
fn a_damaged_final_record_is_a_torn_tail_and_cut() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    three_entries_written(dir.path());
    let (path, mut bytes) = newest_segment(dir.path());
    let last = *record_starts(&bytes)
        .last()
        .unwrap_or_else(|| panic!("no record"));
    bytes[last + segment::HEADER + 1] ^= 0x01;
    fs::write(&path, &bytes).unwrap_or_else(|e| panic!("{e}"));
    run(async {
        let mut log = open(dir.path(), 1 << 20);
        assert_eq!(indexes(&mut log).await, vec![(1, 1), (1, 2)]);
        assert_eq!(
            fs::metadata(&path).unwrap_or_else(|e| panic!("{e}")).len(),
            last as u64
        );
    });
}

#[test]
fn zeros_after_the_last_record_are_cut_not_replayed() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    three_entries_written(dir.path());
    // A crash after the file grew but before its data reached the disk.
    let (path, mut bytes) = newest_segment(dir.path());
    bytes.resize(bytes.len() + 4096, 0);
    fs::write(&path, &bytes).unwrap_or_else(|e| panic!("{e}"));
    run(async {
        let mut log = open(dir.path(), 1 << 20);
        assert_eq!(indexes(&mut log).await, vec![(1, 1), (1, 2), (1, 3)]);
    });
}

/// Segments are allocated whole when created, so that appends leave the
/// file's size alone; a reopen trims the space nothing was written to, so
/// an older segment never ends in zeros.
#[test]
fn a_segment_is_allocated_whole_and_its_unused_space_trimmed_at_reopen() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    run(async {
        let mut log = open(dir.path(), 1 << 20);
        append(&mut log, entries(1, 1..=3)).await;
        let (path, bytes) = newest_segment(dir.path());
        assert_eq!(bytes.len(), 1 << 20, "the segment was not allocated whole");
        let written = segment::scan(&bytes).good_len;
        assert!(written > 0 && segment::scan(&bytes).tail_is_zeros(&bytes));
        drop(log);
        let mut log = open(dir.path(), 1 << 20);
        assert_eq!(indexes(&mut log).await, vec![(1, 1), (1, 2), (1, 3)]);
        let trimmed = fs::metadata(&path).unwrap_or_else(|e| panic!("{e}")).len();
        assert_eq!(trimmed, written as u64);
        append(&mut log, vec![entry(1, 4)]).await;
        drop(log);
        let mut log = open(dir.path(), 1 << 20);
        assert_eq!(indexes(&mut log).await.len(), 4);
    });
}

#[test]
fn a_damaged_older_segment_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    run(async {
        let mut log = open(dir.path(), 1);
        for i in 1..=4 {
            append(&mut log, vec![entry(1, i)]).await;
        }
        drop(log);
    });
    let seqs = segment::list(dir.path()).unwrap_or_else(|e| panic!("{e}"));
    let path = segment::path(dir.path(), seqs[0]);
    let mut bytes = fs::read(&path).unwrap_or_else(|e| panic!("{e}"));
    bytes.truncate(bytes.len() - 1);
    fs::write(&path, &bytes).unwrap_or_else(|e| panic!("{e}"));
    let error = LogStore::open(dir.path(), 1)
        .err()
        .unwrap_or_else(|| panic!("a log with a damaged older segment opened"));
    assert!(
        error.to_string().contains(&path.display().to_string()),
        "{error}"
    );
}

/// A table with `held` granted for 500 ms.
fn held_table() -> LockTable {
    let mut table = LockTable::new();
    let key = Key::new(b"held").unwrap_or_else(|e| panic!("{e}"));
    table.apply(&Command::Grant { key, lease_ms: 500 }, 0);
    table
}

/// [`held_table`] at 100 ms as the snapshot of log index 9, term 2.
fn stored_snapshot() -> StoredSnapshot {
    let table = held_table().snapshot(100);
    StoredSnapshot {
        meta: SnapshotMeta {
            last_log_id: Some(log_id(2, 9)),
            last_membership: Default::default(),
        },
        data: snapshot_store::encode_table(&table).unwrap_or_else(|e| panic!("{e}")),
    }
}

#[test]
fn a_damaged_snapshot_is_refused_naming_the_file() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let store = SnapshotStore::new(dir.path()).unwrap_or_else(|e| panic!("{e}"));
    store
        .save(&stored_snapshot())
        .unwrap_or_else(|e| panic!("{e}"));
    let path = store.path().to_path_buf();
    let bytes = fs::read(&path).unwrap_or_else(|e| panic!("{e}"));
    // The postcard body alone would decode with many of these flips.
    for at in 8..bytes.len() {
        let mut flipped = bytes.clone();
        flipped[at] ^= 0x01;
        fs::write(&path, &flipped).unwrap_or_else(|e| panic!("{e}"));
        let error = store
            .load()
            .err()
            .unwrap_or_else(|| panic!("a snapshot flipped at byte {at} loaded"));
        assert!(
            error.to_string().contains(&path.display().to_string()),
            "{error}"
        );
    }
}

#[test]
fn a_snapshot_from_before_the_checksum_still_loads() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let store = SnapshotStore::new(dir.path()).unwrap_or_else(|e| panic!("{e}"));
    let stored = stored_snapshot();
    // The old format: the postcard encoding alone.
    let old = postcard::to_allocvec(&stored).unwrap_or_else(|e| panic!("{e}"));
    fs::write(store.path(), &old).unwrap_or_else(|e| panic!("{e}"));
    let loaded = store
        .load()
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|| panic!("no snapshot"));
    assert_eq!(loaded.meta, stored.meta);
    assert_eq!(loaded.data, stored.data);
}
