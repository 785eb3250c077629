//! Cutting a byte stream into lines of bounded length, without copying and
//! without buffering more than one line's worth.

use bytes::{Buf, BytesMut};

/// What the next bytes of the stream are.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Next {
    /// A whole line: its LF is at this index of the buffer.
    Line(usize),
    /// `max` bytes arrived with no LF. They are gone already, and the rest
    /// of the line will be skipped as it arrives.
    TooLong,
    /// No whole line yet.
    NeedMore,
}

/// Line framing state shared by both codecs.
#[derive(Debug)]
pub(crate) struct Lines {
    /// Longest line, LF (and CR) included.
    max: usize,
    /// How many buffered bytes are known to hold no LF, so that bytes
    /// arriving one at a time are not scanned again and again.
    scanned: usize,
    /// Skipping the rest of a too-long line, up to and including its LF.
    discarding: bool,
}

impl Lines {
    pub(crate) fn new(max: usize) -> Lines {
        Lines {
            max,
            scanned: 0,
            discarding: false,
        }
    }

    pub(crate) fn max(&self) -> usize {
        self.max
    }

    /// Whether the bytes of a too-long line are being thrown away up to
    /// its LF: the line is still unfinished although nothing is buffered.
    pub(crate) fn discarding(&self) -> bool {
        self.discarding
    }

    /// Finds the next line. After [`Next::Line`] the caller must consume
    /// the line with [`Lines::consume`] before calling again.
    pub(crate) fn next(&mut self, src: &mut BytesMut) -> Next {
        if self.discarding {
            match src.iter().position(|&b| b == b'\n') {
                Some(lf) => {
                    src.advance(lf + 1);
                    self.discarding = false;
                }
                None => {
                    src.clear();
                    return Next::NeedMore;
                }
            }
        }
        let window = src.len().min(self.max);
        let from = self.scanned.min(window);
        if let Some(offset) = src[from..window].iter().position(|&b| b == b'\n') {
            self.scanned = 0;
            return Next::Line(from + offset);
        }
        if src.len() >= self.max {
            src.advance(self.max);
            self.scanned = 0;
            self.discarding = true;
            return Next::TooLong;
        }
        self.scanned = window;
        Next::NeedMore
    }

    /// Drops the line whose LF is at `lf`.
    pub(crate) fn consume(src: &mut BytesMut, lf: usize) {
        src.advance(lf + 1);
    }

    /// The content of the line ending at `lf`: no LF, and no CR right
    /// before it.
    pub(crate) fn content(src: &[u8], lf: usize) -> &[u8] {
        let line = &src[..lf];
        line.strip_suffix(b"\r").unwrap_or(line)
    }

    /// At end of stream: `item`, the last whole line's, or none; a partial
    /// line is not a line and is dropped.
    pub(crate) fn at_eof<T>(&mut self, src: &mut BytesMut, item: Option<T>) -> Option<T> {
        if item.is_none() {
            self.drop_partial(src);
        }
        item
    }

    /// At end of stream a partial line is not a line: drop it.
    fn drop_partial(&mut self, src: &mut BytesMut) {
        src.clear();
        self.scanned = 0;
        self.discarding = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_lines_within_the_limit() {
        let mut lines = Lines::new(8);
        let mut src = BytesMut::from(&b"ab\r\ncd"[..]);
        assert_eq!(lines.next(&mut src), Next::Line(3));
        assert_eq!(Lines::content(&src, 3), b"ab");
        Lines::consume(&mut src, 3);
        assert_eq!(lines.next(&mut src), Next::NeedMore);
        src.extend_from_slice(b"\n");
        assert_eq!(lines.next(&mut src), Next::Line(2));
    }

    #[test]
    fn only_one_cr_is_dropped() {
        assert_eq!(Lines::content(b"a\r\r\n", 3), b"a\r");
        assert_eq!(Lines::content(b"\r\n", 1), b"");
        assert_eq!(Lines::content(b"a\rb\n", 3), b"a\rb");
    }

    #[test]
    fn a_too_long_line_is_reported_once_then_skipped() {
        let mut lines = Lines::new(4);
        let mut src = BytesMut::from(&b"abcdefg"[..]);
        assert_eq!(lines.next(&mut src), Next::TooLong);
        assert_eq!(lines.next(&mut src), Next::NeedMore);
        assert!(src.is_empty());
        src.extend_from_slice(b"hij\nok\n");
        assert_eq!(lines.next(&mut src), Next::Line(2));
        assert_eq!(&src[..2], b"ok");
    }

    #[test]
    fn the_limit_counts_the_lf() {
        let mut lines = Lines::new(4);
        let mut src = BytesMut::from(&b"abc\n"[..]);
        assert_eq!(lines.next(&mut src), Next::Line(3));
        let mut src = BytesMut::from(&b"abcd\n"[..]);
        assert_eq!(lines.next(&mut src), Next::TooLong);
        assert_eq!(lines.next(&mut src), Next::NeedMore);
        assert!(src.is_empty());
    }
}
