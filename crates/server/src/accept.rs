//! Where a server's connections come from: the real network's listener in
//! `batond`, a simulated network's under turmoil, an in-memory one in
//! tests. The server is written against these two traits only, so the
//! simulations and paused-time tests run the very code `batond` runs (as
//! mini-redis runs its real `server::run` under turmoil).

use std::future::Future;
use std::io;
use std::net::SocketAddr;

use tokio::io::{AsyncRead, AsyncWrite, DuplexStream};
use tokio::net::{TcpListener, TcpStream};

/// One accepted connection.
pub trait ServerStream: AsyncRead + AsyncWrite + Send + Unpin + 'static {
    /// The halves a connection task reads and writes at once.
    type Read: AsyncRead + Send + Unpin + 'static;
    type Write: AsyncWrite + Send + Unpin + 'static;
    fn into_split(self) -> (Self::Read, Self::Write);
    /// Answers go out at once, not batched by the kernel (a no-op where
    /// there is no kernel).
    fn set_nodelay(&self);
    /// The address of the other end, for the logs and the peer gate.
    fn peer_addr(&self) -> io::Result<SocketAddr>;
    /// Whether the client has closed its sending side with nothing left
    /// to read, asked of the kernel without waiting; `None` where there is
    /// no kernel to ask.
    fn input_closed(&self) -> Option<bool> {
        None
    }
}

/// A source of connections: a bound listener.
pub trait Accept: Send + Sync + 'static {
    type Stream: ServerStream;
    fn accept(&self) -> impl Future<Output = io::Result<(Self::Stream, SocketAddr)>> + Send;
    /// The address actually bound (useful with port 0).
    fn local_addr(&self) -> io::Result<SocketAddr>;
}

impl ServerStream for TcpStream {
    type Read = tokio::net::tcp::OwnedReadHalf;
    type Write = tokio::net::tcp::OwnedWriteHalf;

    fn into_split(self) -> (Self::Read, Self::Write) {
        TcpStream::into_split(self)
    }

    fn set_nodelay(&self) {
        let _ = TcpStream::set_nodelay(self, true);
    }

    fn peer_addr(&self) -> io::Result<SocketAddr> {
        TcpStream::peer_addr(self)
    }

    fn input_closed(&self) -> Option<bool> {
        use nix::errno::Errno;
        use nix::sys::socket::{recv, MsgFlags};
        use std::os::fd::AsRawFd;
        let mut byte = [0u8; 1];
        let flags = MsgFlags::MSG_PEEK | MsgFlags::MSG_DONTWAIT;
        Some(match recv(self.as_raw_fd(), &mut byte, flags) {
            Ok(0) => true,
            Ok(_) | Err(Errno::EAGAIN | Errno::EINTR) => false,
            // A failed socket: nothing sent on it would arrive either.
            Err(_) => true,
        })
    }
}

impl Accept for TcpListener {
    type Stream = TcpStream;

    fn accept(&self) -> impl Future<Output = io::Result<(TcpStream, SocketAddr)>> + Send {
        TcpListener::accept(self)
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        TcpListener::local_addr(self)
    }
}

/// An in-memory connection (`tokio::io::duplex`), for tests on paused
/// time: no socket, so no address.
impl ServerStream for DuplexStream {
    type Read = tokio::io::ReadHalf<DuplexStream>;
    type Write = tokio::io::WriteHalf<DuplexStream>;

    fn into_split(self) -> (Self::Read, Self::Write) {
        tokio::io::split(self)
    }

    fn set_nodelay(&self) {}

    fn peer_addr(&self) -> io::Result<SocketAddr> {
        Err(io::Error::new(
            io::ErrorKind::AddrNotAvailable,
            "an in-memory connection has no address",
        ))
    }
}
