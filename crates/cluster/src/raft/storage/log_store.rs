//! The durable Raft log of a node: entries, vote, committed id and purge
//! point, as records in checksummed segment files under `<data-dir>/log`.
//!
//! Our own segment log rather than a log crate: the log of a lock server is
//! short (snapshots purge it every few thousand entries), so the whole
//! unpurged log lives in memory and the files only need to replay it after
//! a restart. The files are written by a thread of their own
//! (`log_writer`): `append` puts the entries in memory, where the
//! replication to followers reads them, queues their records and returns;
//! openraft hears that they are durable from the writer. Writes queued
//! during an fsync share the next one (group commit).
//!
//! Every state change is a record appended to the newest segment. A new
//! segment starts with the vote, committed id and purge point, so older
//! segments may be deleted once every entry in them is purged.
//!
//! At start, only a torn tail of the newest segment is cut (a crash in the
//! middle of the last write). A damaged record anywhere else, or one with
//! intact records after it, is corruption: the node refuses to start and
//! says which file and where, since cutting would drop fsynced records.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::fs;
use std::io;
use std::ops::RangeBounds;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use baton_server::durable::at;
use openraft::storage::{IOFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::OptionalSend;
use serde::{Deserialize, Serialize};

pub use crate::raft::storage::log_writer::LogWrites;
use crate::raft::storage::log_writer::{
    push, Change, Closed, Done, Header, Job, LogWriter, Segments,
};
use crate::raft::storage::segment::{self, Tail};
use crate::raft::types::{Entry, LogId, TypeConfig, Vote};

/// A segment past this size is closed and a new one started.
pub const DEFAULT_SEGMENT_BYTES: u64 = 8 * 1024 * 1024;

/// One change to the log's state, as written to a segment.
#[derive(Debug, Serialize, Deserialize)]
enum Record {
    Entry(Entry),
    Vote(Vote),
    Committed(Option<LogId>),
    Purged(LogId),
    TruncateAfter(Option<LogId>),
}

/// The same layout as [`Record`], borrowing, so writes need no clone.
#[derive(Serialize)]
pub(crate) enum RecordRef<'a> {
    Entry(&'a Entry),
    Vote(&'a Vote),
    Committed(&'a Option<LogId>),
    Purged(&'a LogId),
    TruncateAfter(&'a Option<LogId>),
}

/// What the log holds, in memory; the segment files only rebuild it.
#[derive(Debug, Default)]
struct Mem {
    entries: BTreeMap<u64, Entry>,
    vote: Option<Vote>,
    committed: Option<LogId>,
    purged: Option<LogId>,
}

impl Mem {
    fn replay(&mut self, record: Record) {
        match record {
            Record::Entry(entry) => {
                let index = entry.log_id.index;
                // An entry replaces any it conflicts with, and all after it.
                let _ = self.entries.split_off(&index);
                self.entries.insert(index, entry);
            }
            Record::Vote(vote) => self.vote = Some(vote),
            Record::Committed(committed) => self.committed = committed,
            Record::Purged(log_id) => self.purge(log_id),
            Record::TruncateAfter(last) => {
                let _ = self.entries.split_off(&next_index(last.as_ref()));
            }
        }
    }

    fn purge(&mut self, log_id: LogId) {
        self.entries = self.entries.split_off(&(log_id.index + 1));
        if self.purged.is_none_or(|p| p.index < log_id.index) {
            self.purged = Some(log_id);
        }
    }
}

fn next_index(last: Option<&LogId>) -> u64 {
    last.map_or(0, |l| l.index + 1)
}

fn lock(mem: &Mutex<Mem>) -> MutexGuard<'_, Mem> {
    // Every writer leaves `Mem` whole before anything can panic.
    mem.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The refusal of a damaged segment.
fn corrupt(path: &Path, offset: usize, what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!(
            "raft log segment {} is corrupt at byte {offset}: {what}; refusing to start. \
             Moved away, the data directory of one node of a healthy cluster is restored \
             by the leader",
            path.display()
        ),
    )
}

/// Replays segment `seq` of `dir` into `mem`, cutting its torn tail if it
/// is the `newest`; the segment, now closed, with its highest entry index.
fn replay_segment(dir: &Path, seq: u64, newest: bool, mem: &mut Mem) -> io::Result<Closed> {
    let path = segment::path(dir, seq);
    let bytes = fs::read(&path).map_err(at(&path))?;
    let scan = segment::scan(&bytes);
    // Checked before anything is replayed or cut.
    check_tail(&path, &scan, newest)?;
    let max_index = replay_records(&path, &scan.records, mem)?;
    if scan.tail == Tail::Torn {
        let cut = bytes.len() - scan.good_len;
        if scan.tail_is_zeros(&bytes) {
            // The part of a preallocated segment nothing was written to.
            tracing::debug!(segment = %path.display(), at = scan.good_len, cut, "trimming a segment's unused space");
        } else {
            tracing::warn!(segment = %path.display(), at = scan.good_len, cut, "cutting a torn log tail");
        }
        segment::cut(dir, seq, scan.good_len).map_err(at(&path))?;
    }
    Ok(Closed { seq, max_index })
}

/// Refuses a segment whose bad tail cannot be a torn write: one with intact
/// records after it, or one in a segment older than the `newest`.
fn check_tail(path: &Path, scan: &segment::Scan<'_>, newest: bool) -> io::Result<()> {
    match scan.tail {
        Tail::Clean => Ok(()),
        Tail::Corrupt => Err(corrupt(
            path,
            scan.good_len,
            "a damaged record with intact records after it, so not a torn write",
        )),
        Tail::Torn if !newest => Err(corrupt(
            path,
            scan.good_len,
            "a damaged record in a segment older than the newest, so not a torn write",
        )),
        Tail::Torn => Ok(()),
    }
}

/// Decodes and replays one segment's records into `mem`; the highest entry
/// index among them. A record that does not decode is corruption.
fn replay_records(path: &Path, records: &[&[u8]], mem: &mut Mem) -> io::Result<Option<u64>> {
    let mut max_index = None;
    let mut offset = 0;
    for payload in records {
        let record: Record = postcard::from_bytes(payload).map_err(|e| {
            corrupt(
                path,
                offset,
                &format!("a record that does not decode ({e})"),
            )
        })?;
        offset += segment::HEADER + payload.len();
        if let Record::Entry(entry) = &record {
            max_index = max_index.max(Some(entry.log_id.index));
        }
        mem.replay(record);
    }
    Ok(max_index)
}

/// The node's Raft log store.
#[derive(Debug)]
pub struct LogStore {
    mem: Arc<Mutex<Mem>>,
    writer: LogWriter,
    /// A committed id saved but not yet queued: it goes out with the next
    /// write, which saves the writer a wake-up and a write per commit.
    unwritten_committed: Option<Option<LogId>>,
}

/// Reads entries and the vote for replication, from memory.
#[derive(Debug, Clone)]
pub struct LogReader {
    mem: Arc<Mutex<Mem>>,
}

impl LogStore {
    /// Opens (or creates) the log in `dir`, replaying its segments. A torn
    /// tail of the newest segment is cut off; a bad record anywhere else,
    /// or followed by intact ones, is corruption, and refused. Every error
    /// names the file.
    pub fn open(dir: &Path, segment_bytes: u64) -> io::Result<LogStore> {
        LogStore::open_with(dir, segment_bytes, LogWrites::Overlapped)
    }

    /// The vote on disk (the newest one this node made or heard).
    pub fn vote(&self) -> Option<Vote> {
        lock(&self.mem).vote
    }

    /// Refuses a snapshot whose last entry is of a later term than the
    /// vote: a node votes in a term before it takes any entry of it, and
    /// the vote only rises, so such a pair means the log was lost or cut
    /// (a deleted or zeroed segment). Started on it, the node could vote
    /// again in a term it voted in; and were every node so, each would
    /// refuse the others' messages as implausible for ever.
    pub fn check_covers(&self, snapshot_last: Option<LogId>, dir: &Path) -> io::Result<()> {
        let vote_term = self.vote().map_or(0, |v| v.leader_id.term);
        let Some(last) = snapshot_last.filter(|l| l.leader_id.term > vote_term) else {
            return Ok(());
        };
        Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "the raft log in {} is missing or damaged: its vote is of term {vote_term}, \
                 older than the term {} of the snapshot's last entry; refusing to start. \
                 Emptied, the data directory of one node of a healthy cluster is restored \
                 by the leader",
                dir.display(),
                last.leader_id.term
            ),
        ))
    }

    /// [`LogStore::open`], with `writes` saying when an append returns.
    pub fn open_with(dir: &Path, segment_bytes: u64, writes: LogWrites) -> io::Result<LogStore> {
        fs::create_dir_all(dir).map_err(at(dir))?;
        let seqs = segment::list(dir).map_err(at(dir))?;
        let mut mem = Mem::default();
        let mut closed = Vec::with_capacity(seqs.len());
        for (i, &seq) in seqs.iter().enumerate() {
            let newest = i + 1 == seqs.len();
            closed.push(replay_segment(dir, seq, newest, &mut mem)?);
        }
        // Appending to a fresh segment leaves the replayed ones untouched.
        let seq = seqs.last().map_or(1, |s| s + 1);
        let file =
            segment::create(dir, seq, segment_bytes).map_err(at(&segment::path(dir, seq)))?;
        let mut segments = Segments {
            dir: dir.to_path_buf(),
            file,
            seq,
            len: 0,
            max_index: None,
            closed,
            segment_bytes,
            header: Header {
                vote: mem.vote,
                committed: mem.committed,
                purged: mem.purged,
            },
        };
        segments.write_header()?;
        segments.delete_purged()?;
        Ok(LogStore {
            mem: Arc::new(Mutex::new(mem)),
            writer: LogWriter::start(segments, writes)?,
            unwritten_committed: None,
        })
    }

    /// The start of a write: the committed id saved since the last one
    /// goes first, as it was saved first.
    fn start_write(&mut self) -> io::Result<(Vec<u8>, Change)> {
        let mut bytes = Vec::new();
        let mut change = Change::default();
        if let Some(committed) = self.unwritten_committed.take() {
            push(&RecordRef::Committed(&committed), &mut bytes)?;
            change.committed = Some(committed);
        }
        Ok((bytes, change))
    }

    fn reader(&self) -> LogReader {
        LogReader {
            mem: self.mem.clone(),
        }
    }

    /// Number of segment files on disk (tests check purging removes them).
    pub fn segment_count(&self) -> usize {
        self.writer.segment_count()
    }

    /// Waits until every write queued so far is on disk.
    pub async fn sync(&mut self) -> io::Result<()> {
        let (bytes, change) = self.start_write()?;
        self.writer.write_and_wait(bytes, true, change).await
    }
}

impl Drop for LogStore {
    fn drop(&mut self) {
        // What a restart replays less of if lost; written, not synced.
        if let Ok((bytes, change)) = self.start_write() {
            if !bytes.is_empty() {
                let job = Job {
                    bytes,
                    sync: false,
                    change,
                    done: Done::Nothing,
                };
                let _ = self.writer.submit(job);
            }
        }
    }
}

impl RaftLogReader<TypeConfig> for LogReader {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, io::Error> {
        Ok(lock(&self.mem)
            .entries
            .range(range)
            .map(|(_, e)| e.clone())
            .collect())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, io::Error> {
        Ok(lock(&self.mem).vote)
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, io::Error> {
        self.reader().try_get_log_entries(range).await
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, io::Error> {
        Ok(lock(&self.mem).vote)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogReader;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, io::Error> {
        let mem = lock(&self.mem);
        let last = mem.entries.last_key_value().map(|(_, e)| e.log_id);
        Ok(LogState {
            last_purged_log_id: mem.purged,
            last_log_id: last.or(mem.purged),
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.reader()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), io::Error> {
        let (mut bytes, mut change) = self.start_write()?;
        push(&RecordRef::Vote(vote), &mut bytes)?;
        change.vote = Some(*vote);
        self.writer.write_and_wait(bytes, true, change).await?;
        lock(&self.mem).vote = Some(*vote);
        Ok(())
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), io::Error> {
        // Neither synced nor written now: a committed id that is lost
        // only means replaying less on restart. The next write (every one
        // is synced) carries it.
        self.unwritten_committed = Some(committed);
        lock(&self.mem).committed = committed;
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, io::Error> {
        Ok(lock(&self.mem).committed)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: IOFlushed<TypeConfig>,
    ) -> Result<(), io::Error>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let entries: Vec<Entry> = entries.into_iter().collect();
        let (mut bytes, mut change) = self.start_write()?;
        for entry in &entries {
            push(&RecordRef::Entry(entry), &mut bytes)?;
            change.max_index = change.max_index.max(Some(entry.log_id.index));
        }
        // In memory first, so replication to the followers reads them
        // while the writer syncs; openraft counts this node's copy only
        // once the callback says it is durable.
        {
            let mut mem = lock(&self.mem);
            for entry in entries {
                mem.replay(Record::Entry(entry));
            }
        }
        self.writer.submit(Job {
            bytes,
            sync: true,
            change,
            done: Done::Flushed(callback),
        })
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogId>) -> Result<(), io::Error> {
        let (mut bytes, change) = self.start_write()?;
        push(&RecordRef::TruncateAfter(&last_log_id), &mut bytes)?;
        lock(&self.mem).replay(Record::TruncateAfter(last_log_id));
        self.writer.write_and_wait(bytes, true, change).await
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), io::Error> {
        // Durable before any file goes, or a restart would find a hole:
        // the writer deletes segments only after the record is synced.
        let (mut bytes, mut change) = self.start_write()?;
        push(&RecordRef::Purged(&log_id), &mut bytes)?;
        change.purged = Some(log_id);
        self.writer.write_and_wait(bytes, true, change).await?;
        lock(&self.mem).purge(log_id);
        Ok(())
    }
}
