//! What an attacker who can reach a node's client port sends as a peer:
//! each attack opens its connection from a source address of its own on
//! 127.0.0.0/8, so the node's refusal log can be told apart per attack,
//! and reports whether the node closed it in time.
//!
//! The handshakes are made with `baton_cluster::peer::connect`, the same
//! code a node dials with, given another key or a stream that corrupts a
//! byte: no copy of the protocol to drift from the real one.

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use baton_cluster::peer::{self, ClusterKey};
use bytes::Bytes;
use futures_util::StreamExt;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpSocket, TcpStream};
use tokio::time::timeout;

/// How long the node may take to close a refused connection. Well under
/// the 5 s handshake timeout: a refusal is not a timeout.
pub const REFUSED_WITHIN: Duration = Duration::from_secs(3);
/// How long a connection that is never refused outright may stay open:
/// the handshake timeout and a margin for a slow machine.
pub const TIMED_OUT_WITHIN: Duration = Duration::from_secs(9);

/// Bytes of the Noise `NNpsk0` initiator message (an ephemeral key and
/// the tag of an empty payload), after its 2-byte length.
const INITIATOR_MESSAGE: usize = 48;
/// Largest frame the attacker accepts back (nothing should come).
const MAX_FRAME: usize = 64 * 1024;

/// A connection to `to` from `127.0.0.<last>`.
pub async fn connect_from(last: u8, to: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().expect("socket");
    let from = SocketAddr::from((Ipv4Addr::new(127, 0, 0, last), 0));
    socket
        .bind(from)
        .unwrap_or_else(|e| panic!("cannot bind {from}: {e}"));
    timeout(Duration::from_secs(5), socket.connect(to))
        .await
        .unwrap_or_else(|_| panic!("connect {to} from {from} timed out"))
        .unwrap_or_else(|e| panic!("cannot connect {to} from {from}: {e}"))
}

/// Whether the node closes `stream` (end of stream or reset) within
/// `within`, ignoring what it sends before.
pub async fn closed_within<S: AsyncRead + Unpin>(stream: &mut S, within: Duration) -> bool {
    let mut buf = [0u8; 1024];
    timeout(within, async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .is_ok()
}

/// Bytes that look like nothing, the same every run.
pub fn garbage(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect()
}

/// The hello line, then garbage. Returns whether the node closed the
/// connection in time.
pub async fn hello_and_garbage(from: u8, to: SocketAddr, hello: &[u8]) -> bool {
    let mut stream = connect_from(from, to).await;
    let mut bytes = hello.to_vec();
    bytes.extend(garbage(300, u64::from(from)));
    // A node that closed already may reset the write: that is a refusal.
    if stream.write_all(&bytes).await.is_err() {
        return true;
    }
    closed_within(&mut stream, TIMED_OUT_WITHIN).await
}

/// The handshake with `key`, not the cluster's. Panics unless the node
/// refuses it: the handshake must fail, and quickly.
pub async fn wrong_key(from: u8, to: SocketAddr, hello: &[u8], key: &ClusterKey) {
    let stream = connect_from(from, to).await;
    let first = Bytes::from_static(b"a link hello the node never reads");
    let dialled = timeout(
        REFUSED_WITHIN,
        peer::connect(stream, hello, key, first, MAX_FRAME),
    )
    .await;
    match dialled {
        Err(_) => panic!("a wrong-key handshake from 127.0.0.{from} was neither refused nor answered within {REFUSED_WITHIN:?}"),
        Ok(Ok(_)) => panic!("{to} completed a handshake made with a wrong key (from 127.0.0.{from})"),
        Ok(Err(_)) => {}
    }
}

/// The handshake with the right `key`, then a first frame with one bit
/// flipped on the wire. Panics unless the handshake succeeds (it is the
/// right key) and the node then closes the connection at once.
pub async fn bit_flipped_frame(from: u8, to: SocketAddr, hello: &[u8], key: &ClusterKey) {
    let stream = connect_from(from, to).await;
    // After the hello, the initiator message and the first record's
    // length: a byte of the record's ciphertext.
    let flip_at = hello.len() + 2 + INITIATOR_MESSAGE + 2 + 3;
    let corrupted = FlipAt {
        inner: stream,
        written: 0,
        at: flip_at,
    };
    let first = Bytes::from_static(b"a frame the node must refuse once a bit flips");
    let dialled = timeout(
        REFUSED_WITHIN,
        peer::connect(corrupted, hello, key, first, MAX_FRAME),
    )
    .await
    .unwrap_or_else(|_| panic!("the right-key handshake from 127.0.0.{from} did not finish"))
    .unwrap_or_else(|e| panic!("the right-key handshake from 127.0.0.{from} failed: {e}"));
    let mut framed = dialled;
    assert!(
        framed.get_ref().written > flip_at,
        "the corrupted byte was never sent"
    );
    let answer = timeout(REFUSED_WITHIN, framed.next()).await;
    match answer {
        Err(_) => panic!(
            "{to} kept a link whose first frame had a flipped bit open for {REFUSED_WITHIN:?}"
        ),
        Ok(Some(Ok(frame))) => panic!(
            "{to} answered a bit-flipped frame with a frame of {} bytes",
            frame.len()
        ),
        Ok(None | Some(Err(_))) => {}
    }
}

/// Sends `recording` (a real node's link, as a proxy saw it) on a fresh
/// connection. Returns whether the node closed it in time.
pub async fn replay(from: u8, to: SocketAddr, recording: &[u8]) -> bool {
    let mut stream = connect_from(from, to).await;
    if stream.write_all(recording).await.is_err() {
        return true;
    }
    closed_within(&mut stream, REFUSED_WITHIN).await
}

/// A version 1 hello and a version 1 frame (a 4-byte length and a
/// payload). Returns the node's first answer line, if any: to a node
/// that speaks version 2 only, the hello is an unknown client request.
pub async fn old_hello(from: u8, to: SocketAddr, hello: &[u8]) -> Option<String> {
    let mut stream = connect_from(from, to).await;
    let mut bytes = hello.to_vec();
    bytes.extend_from_slice(&[0, 0, 0, 4, 0, 1, 0xff, 0xff]);
    stream.write_all(&bytes).await.ok()?;
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    let read = timeout(REFUSED_WITHIN, async {
        while line.len() < 256 {
            match stream.read(&mut byte).await {
                Ok(1) if byte[0] == b'\n' => return true,
                Ok(1) => line.push(byte[0]),
                _ => return false,
            }
        }
        false
    })
    .await;
    matches!(read, Ok(true)).then(|| String::from_utf8_lossy(&line).into_owned())
}

/// A stream that flips the lowest bit of the byte at offset `at` of what
/// is written through it.
#[derive(Debug)]
struct FlipAt {
    inner: TcpStream,
    written: usize,
    at: usize,
}

impl AsyncWrite for FlipAt {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let flip = this.at.checked_sub(this.written).filter(|i| *i < buf.len());
        let result = match flip {
            Some(i) => {
                let mut copy = buf.to_vec();
                copy[i] ^= 1;
                Pin::new(&mut this.inner).poll_write(cx, &copy)
            }
            None => Pin::new(&mut this.inner).poll_write(cx, buf),
        };
        if let Poll::Ready(Ok(n)) = result {
            this.written += n;
        }
        result
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

impl AsyncRead for FlipAt {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}
