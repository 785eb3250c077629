//! Whether a client's input ends right after the bytes just read: a node
//! thawed after a stop can find a request and the client's close in the
//! same socket buffer. An acquire or a watch read from such a connection
//! is not served (its answer could not be delivered, and a grant sent to a
//! closed socket would leave the key held by nobody until its lease ran
//! out); releases and the other changes the client asked for still are.

use std::future::Future;
use std::task::{Context, Poll, Waker};

use baton_proto::Request;
use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt};

/// Room made in the input buffer for the look.
const LOOK_CHUNK: usize = 1024;

/// Reads once more without waiting, after a read that drained the socket:
/// true when the input ends there (the client closed its side, or the
/// socket failed). Bytes that came meanwhile are taken in and served as
/// usual. Cheap: after a read that drained it, the socket is known not
/// ready unless it saw the end, so this makes no system call otherwise.
pub(super) fn ended_now<R: AsyncRead + Unpin>(reader: &mut R, input: &mut BytesMut) -> bool {
    if input.capacity() - input.len() < LOOK_CHUNK {
        input.reserve(LOOK_CHUNK);
    }
    // Reading is cancel-safe: a read not ready leaves nothing behind.
    let read = std::pin::pin!(reader.read_buf(input));
    match read.poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Pending | Poll::Ready(Ok(1..)) => false,
        Poll::Ready(Ok(0)) => true,
        Poll::Ready(Err(error)) => {
            tracing::debug!(%error, "read failed");
            true
        }
    }
}

/// Whether `request`, read from a connection whose input has ended, is
/// left undone: the requests whose only effect is an answer to come
/// (a grant, a watched state), which nobody would read.
pub(super) fn skipped_after_end(request: &Request) -> bool {
    matches!(request, Request::Acquire { .. } | Request::Watch { .. })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    #[tokio::test]
    async fn the_end_is_seen_with_the_last_bytes_and_not_before() {
        let (mut client, mut node) = tokio::io::duplex(1024);
        let mut input = BytesMut::new();
        assert!(!ended_now(&mut node, &mut input), "nothing sent yet");
        client.write_all(b"A k 1 30\n").await.unwrap();
        assert!(!ended_now(&mut node, &mut input), "still open");
        assert_eq!(&input[..], b"A k 1 30\n");
        client.write_all(b"R k 7\n").await.unwrap();
        drop(client);
        assert!(!ended_now(&mut node, &mut input), "bytes came first");
        assert_eq!(&input[..], b"A k 1 30\nR k 7\n");
        assert!(ended_now(&mut node, &mut input));
    }

    #[test]
    fn only_acquires_and_watches_are_left_undone() {
        let key = baton_core::Key::new(b"k").unwrap();
        let acquire = Request::Acquire {
            key: key.clone(),
            wait_ms: 1,
            lease_ms: 1,
            options: baton_proto::AcquireOptions::default(),
        };
        assert!(skipped_after_end(&acquire));
        let release = Request::Release { key, token: 7 };
        assert!(!skipped_after_end(&release));
        assert!(!skipped_after_end(&Request::Status));
    }
}
