//! Splitting a byte stream into lines without copying them, so a burst of
//! responses is read with one syscall and handled in place.

use tokio::io::{AsyncRead, AsyncReadExt};

/// Longer lines mean the peer is not speaking the protocol.
pub const MAX_LINE: usize = 4096;

/// A read buffer that hands out complete lines (without LF).
#[derive(Debug)]
pub struct LineReader {
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

/// What one read from the socket gave.
#[derive(Debug, PartialEq, Eq)]
pub enum Filled {
    Bytes,
    Eof,
    /// `MAX_LINE` bytes without an LF.
    LineTooLong,
}

impl Default for LineReader {
    fn default() -> Self {
        Self::new()
    }
}

impl LineReader {
    pub fn new() -> Self {
        Self {
            buf: vec![0; 4 * MAX_LINE],
            start: 0,
            end: 0,
        }
    }

    /// The next complete line, without its LF.
    pub fn next_line(&mut self) -> Option<&[u8]> {
        let pending = &self.buf[self.start..self.end];
        let lf = pending.iter().position(|&b| b == b'\n')?;
        let line = self.start..self.start + lf;
        self.start += lf + 1;
        Some(&self.buf[line])
    }

    /// Reads once more from `source` into the free space.
    pub async fn fill<R: AsyncRead + Unpin>(&mut self, source: &mut R) -> std::io::Result<Filled> {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        } else if self.end == self.buf.len() {
            if self.end - self.start >= MAX_LINE {
                return Ok(Filled::LineTooLong);
            }
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        let read = source.read(&mut self.buf[self.end..]).await?;
        if read == 0 {
            return Ok(Filled::Eof);
        }
        self.end += read;
        Ok(Filled::Bytes)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test
mod tests {
    use super::*;

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
    }

    #[test]
    fn splits_lines_across_reads() {
        rt().block_on(async {
            let data = b"A k1 5\nR k1\nT k".to_vec();
            let mut source = &data[..];
            let mut lines = LineReader::new();
            assert_eq!(lines.fill(&mut source).await.unwrap(), Filled::Bytes);
            assert_eq!(lines.next_line(), Some(&b"A k1 5"[..]));
            assert_eq!(lines.next_line(), Some(&b"R k1"[..]));
            assert_eq!(lines.next_line(), None);
            let rest = b"2\n".to_vec();
            let mut source = &rest[..];
            lines.fill(&mut source).await.unwrap();
            assert_eq!(lines.next_line(), Some(&b"T k2"[..]));
            assert_eq!(lines.fill(&mut source).await.unwrap(), Filled::Eof);
        });
    }

    #[test]
    fn compacts_and_keeps_partial_lines_across_a_full_buffer() {
        rt().block_on(async {
            // Many short lines so the buffer wraps several times.
            let mut data = Vec::new();
            for i in 0..5000 {
                data.extend_from_slice(format!("R key{i}\n").as_bytes());
            }
            let mut source = &data[..];
            let mut lines = LineReader::new();
            let mut seen = 0;
            while lines.fill(&mut source).await.unwrap() == Filled::Bytes {
                while let Some(line) = lines.next_line() {
                    assert_eq!(line, format!("R key{seen}").as_bytes());
                    seen += 1;
                }
            }
            assert_eq!(seen, 5000);
        });
    }

    #[test]
    fn refuses_an_endless_line() {
        rt().block_on(async {
            let data = vec![b'x'; 5 * MAX_LINE];
            let mut source = &data[..];
            let mut lines = LineReader::new();
            let mut outcome = Filled::Bytes;
            for _ in 0..10 {
                outcome = lines.fill(&mut source).await.unwrap();
                assert_eq!(lines.next_line(), None);
                if outcome != Filled::Bytes {
                    break;
                }
            }
            assert_eq!(outcome, Filled::LineTooLong);
        });
    }
}
