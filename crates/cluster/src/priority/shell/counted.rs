//! A stream that counts the bytes read from it. A peer link's frames can
//! be large (a table piece, a batch of commands) and a busy node's frames
//! queue on the link: bytes coming in while no frame is whole yet show the
//! sender runs, which the failure detector must not mistake for silence.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// `inner`, with a count of the bytes read from it.
#[derive(Debug)]
pub(super) struct Counted<S> {
    inner: S,
    read: u64,
}

impl<S> Counted<S> {
    pub(super) fn new(inner: S) -> Counted<S> {
        Counted { inner, read: 0 }
    }

    /// Bytes read so far.
    pub(super) fn read(&self) -> u64 {
        self.read
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Counted<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let poll = Pin::new(&mut self.inner).poll_read(cx, buf);
        let added = buf.filled().len().saturating_sub(before);
        self.read = self.read.saturating_add(added as u64);
        poll
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Counted<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn counts_what_is_read_and_passes_writes_through() {
        let (near, mut far) = tokio::io::duplex(64);
        let mut counted = Counted::new(near);
        far.write_all(b"hello").await.expect("write");
        let mut got = [0u8; 3];
        counted.read_exact(&mut got).await.expect("read");
        assert_eq!(counted.read(), 3, "only what the buffer took");
        let mut rest = [0u8; 2];
        counted.read_exact(&mut rest).await.expect("read");
        assert_eq!(counted.read(), 5);
        counted.write_all(b"back").await.expect("write back");
        let mut back = [0u8; 4];
        far.read_exact(&mut back).await.expect("read back");
        assert_eq!(&back, b"back");
    }
}
