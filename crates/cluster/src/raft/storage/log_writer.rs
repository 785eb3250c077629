//! The Raft log's writer thread: it owns the open segment file, writes the
//! records [`LogStore`](crate::raft::storage::log_store::LogStore) hands it, in order, and
//! tells each sender when its records are durable.
//!
//! Why a thread of its own: openraft runs a leader's `append` inline in its
//! core task and only sends the entries to the followers once `append`
//! returns. With the fsync inside `append`, the followers' receive, fsync
//! and answer waited for the leader's fsync: two fsyncs in a row per commit
//! instead of two at once. Now `append` queues the records and returns, the
//! entries go out to the followers while this thread syncs them, and the
//! leader counts itself in a majority only once its callback says they are
//! durable (openraft's rule: a log entry counts once flushed).
//!
//! Group commit happens here: every job queued while an fsync runs is
//! written with the next one, under one fsync.
//!
//! After a failed write or fsync, every later job fails too: what reached
//! the disk is unknown, so nothing more is acknowledged from it.

use std::fs::{self, File};
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;

use baton_server::durable::at;
use openraft::storage::IOFlushed;
use serde::Serialize;

use crate::raft::storage::segment;
use crate::raft::types::{LogId, TypeConfig, Vote};

/// Jobs a writer may have queued before `submit` waits for room: a bound on
/// the memory queued writes can take, and back-pressure on a core that
/// appends faster than the disk syncs.
const QUEUE_JOBS: usize = 4096;

/// Bytes written under one fsync at most; later jobs wait for the next.
const BATCH_BYTES: usize = 8 * 1024 * 1024;

/// The state records a new segment starts with, as of the records written
/// so far.
#[derive(Debug, Clone, Default)]
pub(crate) struct Header {
    pub vote: Option<Vote>,
    pub committed: Option<LogId>,
    pub purged: Option<LogId>,
}

/// What a job changes besides appending its bytes.
#[derive(Debug, Default)]
pub(crate) struct Change {
    pub vote: Option<Vote>,
    pub committed: Option<Option<LogId>>,
    pub purged: Option<LogId>,
    /// The highest entry index among the job's records.
    pub max_index: Option<u64>,
}

/// Who learns that a job is durable (or failed).
pub(crate) enum Done {
    /// openraft's notice for an append.
    Flushed(IOFlushed<TypeConfig>),
    /// A caller waiting on the answer.
    Reply(tokio::sync::oneshot::Sender<io::Result<()>>),
    /// Nobody: a write that needs no durability of its own.
    Nothing,
    /// A thread blocked until the jobs before this one are done (see
    /// [`LogWrites::Awaited`]).
    Barrier(mpsc::SyncSender<()>),
}

/// When `append` returns, as to the disk.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LogWrites {
    /// At once: the writer thread syncs while the entries go out to the
    /// followers, and openraft hears when they are durable (`batond`).
    #[default]
    Overlapped,
    /// Once the writer thread has written and synced them, the calling
    /// thread blocked meanwhile. For deterministic simulations: a real
    /// thread's time must not pass on their simulated clock, where a slow
    /// or loaded machine would show as a slow disk.
    Awaited,
}

/// One write for the thread: framed records, whether they must be synced,
/// and what they change.
pub(crate) struct Job {
    pub bytes: Vec<u8>,
    pub sync: bool,
    pub change: Change,
    pub done: Done,
}

impl Job {
    fn complete(self, result: &io::Result<()>) {
        let result = match result {
            Ok(()) => Ok(()),
            Err(error) => Err(io::Error::new(error.kind(), error.to_string())),
        };
        match self.done {
            Done::Flushed(callback) => callback.io_completed(result),
            // A caller that stopped waiting has nothing to learn.
            Done::Reply(reply) => drop(reply.send(result)),
            Done::Nothing => {}
            Done::Barrier(waiting) => drop(waiting.send(())),
        }
    }
}

/// Frames `record` (postcard, then length and checksum) onto `out`.
pub(crate) fn push(record: &impl Serialize, out: &mut Vec<u8>) -> io::Result<()> {
    let payload = postcard::to_allocvec(record)
        .map_err(|error| io::Error::new(io::ErrorKind::InvalidData, error))?;
    segment::frame(&payload, out)
}

/// A closed segment and the highest entry index ever written to it.
#[derive(Debug)]
pub(crate) struct Closed {
    pub seq: u64,
    pub max_index: Option<u64>,
}

/// The open segment and the bookkeeping to rotate and delete segments.
#[derive(Debug)]
pub(crate) struct Segments {
    pub dir: PathBuf,
    pub file: File,
    pub seq: u64,
    pub len: u64,
    pub max_index: Option<u64>,
    pub closed: Vec<Closed>,
    pub segment_bytes: u64,
    pub header: Header,
}

impl Segments {
    /// Writes `bytes` to the open segment, with an fsync if `sync`.
    fn write(&mut self, bytes: &[u8], sync: bool) -> io::Result<()> {
        segment::write_at(&self.file, self.len, bytes, sync)
            .map_err(at(&segment::path(&self.dir, self.seq)))?;
        self.len += bytes.len() as u64;
        Ok(())
    }

    /// Waits until everything written to the open segment is on disk.
    fn sync(&mut self) -> io::Result<()> {
        baton_server::sync_metrics::FSYNC_RAFT_LOG
            .time(|| self.file.sync_data())
            .map_err(at(&segment::path(&self.dir, self.seq)))?;
        Ok(())
    }

    fn apply(&mut self, change: &Change) {
        if let Some(vote) = change.vote {
            self.header.vote = Some(vote);
        }
        if let Some(committed) = change.committed {
            self.header.committed = committed;
        }
        if let Some(purged) = change.purged {
            if self.header.purged.is_none_or(|p| p.index < purged.index) {
                self.header.purged = Some(purged);
            }
        }
        self.max_index = self.max_index.max(change.max_index);
    }

    /// Starts a new segment once the open one is full, carrying over the
    /// state records older segments held.
    fn rotate_if_full(&mut self) -> io::Result<()> {
        if self.len < self.segment_bytes {
            return Ok(());
        }
        self.file
            .sync_data()
            .map_err(at(&segment::path(&self.dir, self.seq)))?;
        let seq = self.seq + 1;
        // Allocated as large as it may grow before the next rotation:
        // every write up to then lands in allocated space.
        let file = segment::create(&self.dir, seq, self.segment_bytes)
            .map_err(at(&segment::path(&self.dir, seq)))?;
        self.closed.push(Closed {
            seq: self.seq,
            max_index: self.max_index,
        });
        self.file = file;
        self.seq = seq;
        self.len = 0;
        self.max_index = None;
        self.write_header()
    }

    /// Writes the vote, committed id and purge point, synced.
    pub(crate) fn write_header(&mut self) -> io::Result<()> {
        let mut bytes = Vec::new();
        if let Some(vote) = &self.header.vote {
            push(
                &crate::raft::storage::log_store::RecordRef::Vote(vote),
                &mut bytes,
            )?;
        }
        push(
            &crate::raft::storage::log_store::RecordRef::Committed(&self.header.committed),
            &mut bytes,
        )?;
        if let Some(purged) = &self.header.purged {
            push(
                &crate::raft::storage::log_store::RecordRef::Purged(purged),
                &mut bytes,
            )?;
        }
        self.write(&bytes, true)
    }

    /// Deletes the oldest closed segments whose entries are all purged.
    pub(crate) fn delete_purged(&mut self) -> io::Result<()> {
        let Some(purged) = self.header.purged.map(|p| p.index) else {
            return Ok(());
        };
        let gone = self
            .closed
            .iter()
            .take_while(|c| c.max_index.is_none_or(|max| max <= purged))
            .count();
        if gone == 0 {
            return Ok(());
        }
        for closed in self.closed.drain(..gone) {
            let path = segment::path(&self.dir, closed.seq);
            fs::remove_file(&path).map_err(at(&path))?;
        }
        segment::sync_dir(&self.dir).map_err(at(&self.dir))?;
        Ok(())
    }

    fn count(&self) -> usize {
        self.closed.len() + 1
    }
}

/// The handle to the writer thread. Dropping it lets the thread write what
/// is queued, then waits for it to end, so the files are whole when the
/// store is reopened.
#[derive(Debug)]
pub(crate) struct LogWriter {
    jobs: Option<mpsc::SyncSender<Job>>,
    thread: Option<JoinHandle<()>>,
    segments: Arc<AtomicUsize>,
    writes: LogWrites,
}

impl LogWriter {
    /// Starts the thread, which takes `segments` over.
    pub(crate) fn start(segments: Segments, writes: LogWrites) -> io::Result<LogWriter> {
        let (jobs, queue) = mpsc::sync_channel(QUEUE_JOBS);
        let count = Arc::new(AtomicUsize::new(segments.count()));
        let shared = Arc::clone(&count);
        let thread = std::thread::Builder::new()
            .name("raft-log-writer".into())
            .spawn(move || {
                crate::raft::storage::writer_policy::batch_this_thread();
                run(segments, &queue, &shared)
            })?;
        Ok(LogWriter {
            jobs: Some(jobs),
            thread: Some(thread),
            segments: count,
            writes,
        })
    }

    /// Queues `job`; its `done` hears the outcome. Waits for room when the
    /// queue is full, and, with [`LogWrites::Awaited`], until it is done.
    pub(crate) fn submit(&self, job: Job) -> io::Result<()> {
        let jobs = self.jobs.as_ref().ok_or_else(stopped)?;
        jobs.send(job).map_err(|_| stopped())?;
        if self.writes == LogWrites::Awaited {
            // Jobs complete in order: the barrier's turn comes after it.
            let (done, waiting) = mpsc::sync_channel(1);
            let barrier = Job {
                bytes: Vec::new(),
                sync: false,
                change: Change::default(),
                done: Done::Barrier(done),
            };
            jobs.send(barrier).map_err(|_| stopped())?;
            waiting.recv().map_err(|_| stopped())?;
        }
        Ok(())
    }

    /// Queues `bytes` and waits until they are written (synced if `sync`),
    /// with every job queued before them.
    pub(crate) async fn write_and_wait(
        &self,
        bytes: Vec<u8>,
        sync: bool,
        change: Change,
    ) -> io::Result<()> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.submit(Job {
            bytes,
            sync,
            change,
            done: Done::Reply(reply),
        })?;
        answer.await.map_err(|_| stopped())?
    }

    /// Number of segment files on disk, as of the last job done.
    pub(crate) fn segment_count(&self) -> usize {
        self.segments.load(Ordering::Acquire)
    }
}

fn stopped() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "the raft log writer stopped")
}

impl Drop for LogWriter {
    fn drop(&mut self) {
        drop(self.jobs.take());
        if let Some(thread) = self.thread.take() {
            // A panic in the thread was already reported by the panic hook.
            let _ = thread.join();
        }
    }
}

/// The thread: batches of jobs, each batch one write and at most one
/// fsync, until every sender is gone.
fn run(mut segments: Segments, queue: &mpsc::Receiver<Job>, count: &AtomicUsize) {
    let mut failed: Option<io::Error> = None;
    while let Ok(first) = queue.recv() {
        let batch = gather(first, queue);
        let result = match &failed {
            Some(error) => Err(io::Error::new(error.kind(), error.to_string())),
            None => write_batch(&mut segments, &batch),
        };
        count.store(segments.count(), Ordering::Release);
        if let Err(error) = &result {
            if failed.is_none() {
                tracing::error!(%error, "raft log write failed; nothing more is acknowledged");
                failed = Some(io::Error::new(error.kind(), error.to_string()));
            }
        }
        for job in batch {
            job.complete(&result);
        }
    }
}

/// `first` and the jobs queued behind it, up to [`BATCH_BYTES`].
fn gather(first: Job, queue: &mpsc::Receiver<Job>) -> Vec<Job> {
    let mut bytes = first.bytes.len();
    let mut batch = vec![first];
    while bytes < BATCH_BYTES {
        let Ok(job) = queue.try_recv() else { break };
        bytes += job.bytes.len();
        batch.push(job);
    }
    batch
}

/// Writes a batch's records, then one fsync if any job asks for it, then
/// rotates and deletes segments as the batch's changes allow.
fn write_batch(segments: &mut Segments, batch: &[Job]) -> io::Result<()> {
    for job in batch {
        segments.write(&job.bytes, false)?;
    }
    if batch.iter().any(|job| job.sync) {
        segments.sync()?;
    }
    let mut purged = false;
    for job in batch {
        segments.apply(&job.change);
        purged |= job.change.purged.is_some();
    }
    // A batch that wrote nothing (a wait for earlier writes) leaves the
    // segment as it is.
    if batch.iter().any(|job| !job.bytes.is_empty()) {
        segments.rotate_if_full()?;
    }
    if purged {
        segments.delete_purged()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test

    use super::*;
    use std::path::Path;

    /// A writer on segment 1 of `dir`, opened as `file` opens it.
    fn writer_on(dir: &Path, file: fn(&Path) -> File, writes: LogWrites) -> LogWriter {
        let path = segment::path(dir, 1);
        drop(segment::create(dir, 1, 0).unwrap());
        let segments = Segments {
            dir: dir.to_path_buf(),
            file: file(&path),
            seq: 1,
            len: 0,
            max_index: None,
            closed: Vec::new(),
            segment_bytes: 1 << 20,
            header: Header::default(),
        };
        LogWriter::start(segments, writes).unwrap()
    }

    /// A writer whose segment file was opened read-only: every write fails.
    fn failing_writer(dir: &Path) -> LogWriter {
        writer_on(dir, |path| File::open(path).unwrap(), LogWrites::Overlapped)
    }

    #[test]
    fn an_awaited_write_is_done_when_submit_returns() {
        let dir = tempfile::tempdir().unwrap();
        let writable = |path: &Path| fs::OpenOptions::new().write(true).open(path).unwrap();
        let writer = writer_on(dir.path(), writable, LogWrites::Awaited);
        for _ in 0..20 {
            let (reply, mut answer) = tokio::sync::oneshot::channel();
            let job = Job {
                bytes: b"record".to_vec(),
                sync: true,
                change: Change::default(),
                done: Done::Reply(reply),
            };
            writer.submit(job).unwrap();
            assert!(matches!(answer.try_recv(), Ok(Ok(()))), "not done yet");
        }
    }

    #[tokio::test]
    async fn after_a_failed_write_nothing_more_is_acknowledged() {
        let dir = tempfile::tempdir().unwrap();
        let writer = failing_writer(dir.path());
        let first = writer
            .write_and_wait(b"record".to_vec(), true, Change::default())
            .await;
        assert!(first.is_err(), "{first:?}");
        // An fsync alone would succeed on a read-only file; it must not be
        // taken as proof that anything is durable.
        let second = writer
            .write_and_wait(Vec::new(), true, Change::default())
            .await;
        assert!(second.is_err(), "{second:?}");
    }
}
