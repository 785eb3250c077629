//! The framing of the Raft log's segment files: each record is its length,
//! its CRC-32 and its bytes, so that a record torn by a crash mid-write is
//! recognised on restart and cut off rather than replayed.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Bytes before each record's payload: length, then checksum (both u32 LE).
const HEADER: usize = 8;

/// Appends one framed record holding `payload` to `out`.
pub(crate) fn frame(payload: &[u8], out: &mut Vec<u8>) -> io::Result<()> {
    let len = u32::try_from(payload.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "log record too large"))?;
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    out.extend_from_slice(payload);
    Ok(())
}

/// The records of one segment's bytes, in order.
#[derive(Debug)]
pub(crate) struct Scan<'a> {
    pub records: Vec<&'a [u8]>,
    /// Bytes up to the end of the last whole record.
    pub good_len: usize,
    /// Whether bytes after `good_len` were a torn or corrupt record.
    pub torn: bool,
}

pub(crate) fn scan(bytes: &[u8]) -> Scan<'_> {
    let mut records = Vec::new();
    let mut at = 0;
    let torn = loop {
        let rest = &bytes[at..];
        if rest.is_empty() {
            break false;
        }
        if rest.len() < HEADER {
            break true;
        }
        let len = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        let crc = u32::from_le_bytes([rest[4], rest[5], rest[6], rest[7]]);
        let Some(payload) = rest.get(HEADER..HEADER + len) else {
            break true;
        };
        if crc32fast::hash(payload) != crc {
            break true;
        }
        records.push(payload);
        at += HEADER + len;
    };
    Scan {
        records,
        good_len: at,
        torn,
    }
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

/// Creates segment `seq` (it must not exist) and makes its name durable.
pub(crate) fn create(dir: &Path, seq: u64) -> io::Result<File> {
    let file = OpenOptions::new()
        .create_new(true)
        .append(true)
        .open(path(dir, seq))?;
    sync_dir(dir)?;
    Ok(file)
}

/// Cuts a torn tail off segment `seq`, durably.
pub(crate) fn cut(dir: &Path, seq: u64, len: usize) -> io::Result<()> {
    let file = OpenOptions::new().write(true).open(path(dir, seq))?;
    file.set_len(len as u64)?;
    file.sync_all()
}

/// Writes `bytes` at the end of `file` and, if asked, waits until they are
/// on disk.
pub(crate) fn write(file: &mut File, bytes: &[u8], sync: bool) -> io::Result<()> {
    file.write_all(bytes)?;
    if sync {
        file.sync_data()?;
    }
    Ok(())
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
        for payload in [&b"one"[..], b"", b"three"] {
            frame(payload, &mut out).unwrap();
        }
        let scan = scan(&out);
        assert_eq!(scan.records, vec![&b"one"[..], b"", b"three"]);
        assert_eq!(scan.good_len, out.len());
        assert!(!scan.torn);
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
            assert!(scan.torn);
        }
        let mut flipped = out.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        let scan = scan(&flipped);
        assert_eq!(scan.records.len(), 1);
        assert!(scan.torn);
    }
}
