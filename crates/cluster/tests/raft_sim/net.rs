//! turmoil's simulated TCP as the server's accept source and the Raft
//! links' dialer: the node's own listener, connections and peer links run
//! unchanged on it.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use baton_cluster::raft::net::link::{BoxedStream, DialFuture, Dialer};
use baton_server::{Accept, ServerStream};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A simulated listener.
pub struct SimListener(pub turmoil::net::TcpListener);

impl std::fmt::Debug for SimListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("SimListener")
            .field(&self.0.local_addr())
            .finish()
    }
}

/// A simulated connection.
#[derive(Debug)]
pub struct SimStream(pub turmoil::net::TcpStream);

impl Accept for SimListener {
    type Stream = SimStream;

    async fn accept(&self) -> io::Result<(SimStream, SocketAddr)> {
        let (stream, addr) = self.0.accept().await?;
        Ok((SimStream(stream), addr))
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.0.local_addr()
    }
}

impl ServerStream for SimStream {
    type Read = turmoil::net::tcp::OwnedReadHalf;
    type Write = turmoil::net::tcp::OwnedWriteHalf;

    fn into_split(self) -> (Self::Read, Self::Write) {
        self.0.into_split()
    }

    fn set_nodelay(&self) {}

    fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.0.peer_addr()
    }
}

impl AsyncRead for SimStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for SimStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

/// Dials turmoil's simulated TCP.
#[derive(Debug)]
pub struct SimDialer;

impl Dialer for SimDialer {
    fn dial(&self, addr: &str) -> DialFuture {
        let addr = addr.to_string();
        Box::pin(async move {
            let stream = turmoil::net::TcpStream::connect(addr).await?;
            Ok(Box::new(stream) as BoxedStream)
        })
    }
}
