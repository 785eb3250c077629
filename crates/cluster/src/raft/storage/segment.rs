//! The framing of the Raft log's segment files: each record is its length,
//! its CRC-32 and its bytes, so that a record torn by a crash mid-write is
//! recognised on restart and cut off rather than replayed.
//!
//! Torn or corrupt: a crash can only tear the end of a file, the write
//! in flight. So a bad record with nothing intact after it is a torn tail,
//! cut off; a bad record followed by an intact one is damage to records
//! that were on disk (a bit flip, a bad sector), and the log is refused:
//! cutting there would drop fsynced records, a vote among them. A record
//! of length 0 is never written (every record encodes at least its kind),
//! so the zeros of a file extended but not written are a torn tail too.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

/// Bytes before each record's payload: length, then checksum (both u32 LE).
pub(crate) const HEADER: usize = 8;

/// Appends one framed record holding `payload` to `out`.
pub(crate) fn frame(payload: &[u8], out: &mut Vec<u8>) -> io::Result<()> {
    let len = u32::try_from(payload.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "log record too large"))?;
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    out.extend_from_slice(payload);
    Ok(())
}

/// What follows the last whole record of a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tail {
    /// Nothing: the file ends with a whole record.
    Clean,
    /// A torn write: bytes that hold no intact record, to be cut.
    Torn,
    /// A bad record with intact records after it: damage, not a crash.
    Corrupt,
}

/// The records of one segment's bytes, in order.
#[derive(Debug)]
pub(crate) struct Scan<'a> {
    pub records: Vec<&'a [u8]>,
    /// Bytes up to the end of the last whole record (where a bad one
    /// starts, if any).
    pub good_len: usize,
    pub tail: Tail,
}

impl Scan<'_> {
    /// Whether everything past the last whole record is zeros: the unused
    /// part of a preallocated segment (or of one extended but not written).
    pub fn tail_is_zeros(&self, bytes: &[u8]) -> bool {
        bytes
            .get(self.good_len..)
            .is_some_and(|tail| tail.iter().all(|&b| b == 0))
    }
}

pub(crate) fn scan(bytes: &[u8]) -> Scan<'_> {
    let mut records = Vec::new();
    let mut at = 0;
    while let Some(payload) = record_at(bytes, at) {
        records.push(payload);
        at += HEADER + payload.len();
    }
    let tail = if at == bytes.len() {
        Tail::Clean
    } else if intact_record_after(bytes, at) {
        Tail::Corrupt
    } else {
        Tail::Torn
    };
    Scan {
        records,
        good_len: at,
        tail,
    }
}

/// The payload of the intact record starting at `at`, if one does.
fn record_at(bytes: &[u8], at: usize) -> Option<&[u8]> {
    let rest = bytes.get(at..)?;
    let (len, rest) = rest.split_first_chunk::<4>()?;
    let (crc, rest) = rest.split_first_chunk::<4>()?;
    let len = u32::from_le_bytes(*len) as usize;
    let payload = rest.get(..len).filter(|p| !p.is_empty())?;
    (crc32fast::hash(payload) == u32::from_le_bytes(*crc)).then_some(payload)
}

/// Whether an intact record starts anywhere after the bad one at `bad`.
/// Where the bad record's length says the next one starts is tried first;
/// a damaged length field means trying every offset (a false match needs
/// a CRC-32 to come out right by chance). Bytes crafted so that every
/// offset reads as a long record could make that search quadratic: past a
/// budget of hashed bytes it stops and says yes, refusing the segment
/// rather than cutting what it could not check.
fn intact_record_after(bytes: &[u8], bad: usize) -> bool {
    let claimed_next = bytes
        .get(bad..bad + 4)
        .and_then(|len| len.try_into().ok())
        .map(|len: [u8; 4]| bad + HEADER + u32::from_le_bytes(len) as usize);
    if claimed_next.is_some_and(|next| record_at(bytes, next).is_some()) {
        return true;
    }
    let mut budget = bytes.len().saturating_mul(SEARCH_BUDGET_PER_BYTE);
    for at in bad + 1..bytes.len() {
        let Some(len) = plausible_len(bytes, at) else {
            continue;
        };
        if len > budget {
            tracing::warn!(
                at,
                "gave up searching a damaged log segment for intact records"
            );
            return true;
        }
        budget -= len;
        if record_at(bytes, at).is_some() {
            return true;
        }
    }
    false
}

/// Bytes hashed, per byte of the segment, while searching for intact
/// records after a bad one (tens of milliseconds for a full segment).
const SEARCH_BUDGET_PER_BYTE: usize = 64;

/// The length the header at `at` claims, if a record that long fits.
fn plausible_len(bytes: &[u8], at: usize) -> Option<usize> {
    let len = u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?) as usize;
    (len > 0 && at + HEADER + len <= bytes.len()).then_some(len)
}

/// The path of segment number `seq` in `dir`.
pub(crate) fn path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("{seq:016x}.seg"))
}

/// The segment numbers present in `dir`, ascending.
pub(crate) fn list(dir: &Path) -> io::Result<Vec<u64>> {
    let mut seqs = Vec::new();
    for entry in fs::read_dir(dir)? {
        let name = entry?.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(hex) = name.strip_suffix(".seg") {
            if let Ok(seq) = u64::from_str_radix(hex, 16) {
                seqs.push(seq);
            }
        }
    }
    seqs.sort_unstable();
    Ok(seqs)
}

/// Creates segment `seq` (it must not exist) with `bytes` of zeros
/// allocated (see [`preallocate`]), and makes its name durable. Records are
/// written at offsets from the start ([`write_at`]): the zeros past the
/// last one are a torn tail on replay, cut off without a warning (see
/// [`Scan::tail_is_zeros`]).
pub(crate) fn create(dir: &Path, seq: u64, bytes: u64) -> io::Result<File> {
    let file = OpenOptions::new()
        .create_new(true)
        .write(true)
        .open(path(dir, seq))?;
    if preallocate(&file, bytes)? {
        file.sync_all()?;
    }
    sync_dir(dir)?;
    Ok(file)
}

/// Allocates the first `bytes` of `file` (fallocate(2), which also sets
/// its size): an fdatasync after a write inside them need not write the
/// inode, whose size and extents it leaves alone, so it costs one device
/// write instead of two. False where the file system cannot (the file then
/// grows with each write, as before: slower, no less safe).
fn preallocate(file: &File, bytes: u64) -> io::Result<bool> {
    use nix::errno::Errno;
    use nix::fcntl::{fallocate, FallocateFlags};
    let len = i64::try_from(bytes)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "segment size too large"))?;
    if len == 0 {
        return Ok(false);
    }
    match fallocate(file, FallocateFlags::empty(), 0, len) {
        Ok(()) => Ok(true),
        Err(Errno::EOPNOTSUPP | Errno::ENOSYS | Errno::EINVAL) => Ok(false),
        Err(errno) => Err(io::Error::from(errno)),
    }
}

/// Writes `bytes` at `offset` of segment `file` and, if asked, waits until
/// they are on disk.
pub(crate) fn write_at(file: &File, offset: u64, bytes: &[u8], sync: bool) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    file.write_all_at(bytes, offset)?;
    if sync {
        baton_server::sync_metrics::FSYNC_RAFT_LOG.time(|| file.sync_data())?;
    }
    Ok(())
}

/// Cuts a torn tail off segment `seq`, durably.
pub(crate) fn cut(dir: &Path, seq: u64, len: usize) -> io::Result<()> {
    let file = OpenOptions::new().write(true).open(path(dir, seq))?;
    file.set_len(len as u64)?;
    file.sync_all()
}

/// Makes the creation, renaming or removal of files in `dir` durable.
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test
mod tests {
    use super::*;

    #[test]
    fn records_come_back_in_order() {
        let mut out = Vec::new();
        for payload in [&b"one"[..], b"x", b"three"] {
            frame(payload, &mut out).unwrap();
        }
        let scan = scan(&out);
        assert_eq!(scan.records, vec![&b"one"[..], b"x", b"three"]);
        assert_eq!(scan.good_len, out.len());
        assert_eq!(scan.tail, Tail::Clean);
    }

    #[test]
    fn a_torn_or_corrupt_tail_is_found_at_every_cut() {
        let mut out = Vec::new();
        frame(b"kept", &mut out).unwrap();
        let whole = out.len();
        frame(b"lost at the crash", &mut out).unwrap();
        for cut in whole + 1..out.len() {
            let scan = scan(&out[..cut]);
            assert_eq!(scan.records, vec![&b"kept"[..]], "cut at {cut}");
            assert_eq!(scan.good_len, whole);
            assert_eq!(scan.tail, Tail::Torn, "cut at {cut}");
        }
        // The final record damaged anywhere, length field included: with
        // nothing intact after it, it cannot be told from a torn write.
        for at in whole..out.len() {
            let mut flipped = out.clone();
            flipped[at] ^= 1;
            let scan = scan(&flipped);
            assert_eq!(scan.records, vec![&b"kept"[..]], "flip at {at}");
            assert_eq!(scan.tail, Tail::Torn, "flip at {at}");
        }
    }

    #[test]
    fn a_tail_crafted_to_make_the_search_quadratic_is_refused_not_searched_forever() {
        let mut out = Vec::new();
        frame(b"kept", &mut out).unwrap();
        let whole = out.len();
        // Every fourth offset claims a record of 1 MiB: without a budget,
        // half a million offsets times 1 MiB of hashing.
        for _ in 0..(2 << 20) / 4 {
            out.extend_from_slice(&[0x00, 0x00, 0x10, 0x00]);
        }
        let began = std::time::Instant::now();
        let scan = scan(&out);
        assert!(began.elapsed() < std::time::Duration::from_secs(20));
        assert_eq!((scan.records.len(), scan.good_len), (1, whole));
        assert_eq!(scan.tail, Tail::Corrupt);
    }

    #[test]
    fn zeros_after_the_last_record_are_a_torn_tail() {
        let mut out = Vec::new();
        frame(b"kept", &mut out).unwrap();
        let whole = out.len();
        out.resize(whole + 4096, 0);
        let scan = scan(&out);
        assert_eq!((scan.records.len(), scan.good_len), (1, whole));
        assert_eq!(scan.tail, Tail::Torn);
    }

    #[test]
    fn a_damaged_record_before_intact_ones_is_corruption_at_every_byte() {
        let mut out = Vec::new();
        frame(b"first", &mut out).unwrap();
        let start = out.len();
        frame(b"damaged in the middle", &mut out).unwrap();
        let end = out.len();
        frame(b"an intact record after it", &mut out).unwrap();
        frame(b"and another", &mut out).unwrap();
        // Every byte of the record: length, checksum and payload.
        for at in start..end {
            let mut flipped = out.clone();
            flipped[at] ^= 0x10;
            let scan = scan(&flipped);
            assert_eq!(scan.records, vec![&b"first"[..]], "flip at {at}");
            assert_eq!(scan.good_len, start, "flip at {at}");
            assert_eq!(scan.tail, Tail::Corrupt, "flip at {at}");
        }
    }
}
