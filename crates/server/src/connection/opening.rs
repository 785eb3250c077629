//! The start of a connection: its first bytes say whether it is a cluster
//! peer, a TLS client or a plaintext client (see `sniff`); a peer goes to
//! the peer acceptor, a TLS client through its handshake, and a client of
//! the wrong kind for the node gets one line and is closed at once.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;
use tokio_rustls::server::TlsStream;
use tokio_util::sync::CancellationToken;

use super::{Connection, HELLO_TIMEOUT};
use crate::accept::ServerStream;
use crate::deadline::Expired;
use crate::node::LockNode;
use crate::sniff::{self, Kind};
use crate::tls::Prefixed;

/// Written to a connection the node closed for a newcomer (see `evict`).
pub(super) const EVICTED: &[u8] =
    b"E ? ? closed: the node is at its connection limit and this connection's line was unfinished\n";

/// How long a refused connection may take to read its one line.
const REFUSE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

/// A client connection, ready for requests.
pub(super) enum Opened<S> {
    Plain(S),
    Tls(Box<TlsStream<Prefixed<S>>>),
}

impl<N: LockNode, S: ServerStream> Connection<N, S> {
    /// The stream back if it carries a client of the right kind, with the
    /// requests it already sent taken in. A peer's connection goes to the
    /// peer acceptor, with what was read of it.
    pub(super) async fn open(
        &mut self,
        mut stream: S,
        shutdown: &CancellationToken,
    ) -> Option<Opened<S>> {
        let acceptor = self.node.peer_acceptor.clone();
        let kind = self
            .sniff(&mut stream, acceptor.as_ref().map(|a| a.hello()), shutdown)
            .await?;
        let tls = self.node.config.tls.clone();
        match (kind, tls) {
            (Kind::Peer, _) => {
                let already_read = self.input.split();
                if let Some(acceptor) = acceptor {
                    acceptor.accept(stream, already_read);
                }
                None
            }
            (Kind::Tls, Some(tls)) => {
                let head = self.input.split();
                let accepted = tokio::select! {
                    accepted = tls.accept(stream, head) => accepted,
                    () = shutdown.cancelled() => return None,
                };
                match accepted {
                    Ok(stream) => {
                        self.flush_writes = true;
                        Some(Opened::Tls(Box::new(stream)))
                    }
                    Err(error) => {
                        tls.log_failure(&error);
                        None
                    }
                }
            }
            (Kind::Tls, None) => {
                refuse(&mut stream, sniff::TLS_NOT_SPOKEN).await;
                None
            }
            (Kind::Plain, Some(_)) => {
                refuse(&mut stream, sniff::TLS_REQUIRED).await;
                None
            }
            (Kind::Plain, None) => {
                // A connection made and closed while the node was paused:
                // tokio's readiness of a socket it has just taken may not
                // show the close yet, so the kernel is asked as well.
                self.input_ended = super::input_end::ended_now(&mut stream, &mut self.input)
                    || stream.input_closed() == Some(true);
                self.on_input();
                Some(Opened::Plain(stream))
            }
            (Kind::Undecided, _) => None,
        }
    }

    /// Reads until the first bytes tell what the connection is; `None` if
    /// it leaves first, or stays silent past its line timeout, or stops
    /// partway through the peer hello for [`HELLO_TIMEOUT`].
    async fn sniff(
        &mut self,
        stream: &mut S,
        hello: Option<&'static [u8]>,
        shutdown: &CancellationToken,
    ) -> Option<Kind> {
        let silent_until = self.deadlines.line_deadline();
        let mut hello_until = None;
        loop {
            if !self.input.is_empty() {
                match sniff::classify(&self.input, hello) {
                    Kind::Undecided => {}
                    kind => return Some(kind),
                }
                hello_until.get_or_insert_with(|| Instant::now() + HELLO_TIMEOUT);
            }
            let until = match (silent_until, hello_until) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let expired = async {
                match until {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = shutdown.cancelled() => {
                    // A plaintext client is told why (a TLS one could not read it).
                    if self.registered.watch.evicted() && self.node.config.tls.is_none() {
                        refuse(stream, EVICTED).await;
                    }
                    return None;
                }
                () = expired => {
                    tracing::debug!("closed a connection silent past its deadline");
                    if self.node.config.tls.is_none() && hello_until.is_none() {
                        refuse(stream, Expired::Line.farewell()).await;
                    }
                    return None;
                }
                read = stream.read_buf(&mut self.input) => match read {
                    Ok(0) | Err(_) => return None,
                    Ok(_) => {}
                },
            }
        }
    }
}

/// Writes `line` and closes, quickly. What the client sends meanwhile is
/// read and dropped until it closes too: closing with unread bytes would
/// reset the connection, and the reset can destroy the line unread.
async fn refuse<S: AsyncRead + AsyncWrite + Unpin>(stream: &mut S, line: &[u8]) {
    let refuse = async {
        stream.write_all(line).await?;
        stream.shutdown().await?;
        let mut sink = [0u8; 1024];
        while stream.read(&mut sink).await? > 0 {}
        Ok::<(), std::io::Error>(())
    };
    let _ = tokio::time::timeout(REFUSE_TIMEOUT, refuse).await;
}
