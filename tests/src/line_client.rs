//! `LineClient`: a raw TCP client that writes request lines and reads response
//! lines verbatim, so tests see exactly the bytes the node sends.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::time::{timeout, Instant};

use crate::status::{parse_status, Status};

/// Default wait for a response line: long, since the machine is shared, but
/// bounded, so a missing answer fails the test instead of hanging it.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// One connection speaking the line protocol.
#[derive(Debug)]
pub struct LineClient {
    reader: BufReader<OwnedReadHalf>,
    writer: OwnedWriteHalf,
    /// Bytes of a line not complete yet; kept across calls because a timed
    /// out read may have consumed part of a line.
    partial: Vec<u8>,
    eof: bool,
    timeout: Duration,
    peer: SocketAddr,
}

/// What one read attempt found.
enum Read {
    Line(String),
    Eof,
    TimedOut,
}

impl LineClient {
    /// Connects to `addr`, panicking (with the address) on failure.
    pub async fn connect(addr: SocketAddr) -> LineClient {
        match Self::try_connect(addr).await {
            Ok(c) => c,
            Err(e) => panic!("cannot connect to {addr}: {e}"),
        }
    }

    /// Connects to `addr`, within the default timeout.
    pub async fn try_connect(addr: SocketAddr) -> std::io::Result<LineClient> {
        let stream = match timeout(DEFAULT_TIMEOUT, TcpStream::connect(addr)).await {
            Ok(s) => s?,
            Err(_) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "connect timed out",
                ))
            }
        };
        stream.set_nodelay(true)?;
        let (read, writer) = stream.into_split();
        Ok(LineClient {
            reader: BufReader::new(read),
            writer,
            partial: Vec::new(),
            eof: false,
            timeout: DEFAULT_TIMEOUT,
            peer: addr,
        })
    }

    /// Changes how long [`LineClient::recv`] waits.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// Sends `line` followed by LF.
    pub async fn send(&mut self, line: &str) {
        let mut bytes = Vec::with_capacity(line.len() + 1);
        bytes.extend_from_slice(line.as_bytes());
        bytes.push(b'\n');
        self.send_raw(&bytes).await;
    }

    /// Sends `bytes` as they are, in one write.
    pub async fn send_raw(&mut self, bytes: &[u8]) {
        if let Err(e) = self.try_send_raw(bytes).await {
            panic!("cannot write {} bytes to {}: {e}", bytes.len(), self.peer);
        }
    }

    /// Sends `bytes`, reporting a failed write instead of panicking.
    pub async fn try_send_raw(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        match timeout(DEFAULT_TIMEOUT, self.writer.write_all(bytes)).await {
            Ok(r) => r,
            Err(_) => Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "write timed out: the node is not reading",
            )),
        }
    }

    /// The next line, without its LF; panics on timeout or end of stream.
    pub async fn recv(&mut self) -> String {
        let wait = self.timeout;
        match self.read(wait).await {
            Read::Line(line) => line,
            Read::Eof => panic!("{}: connection closed while waiting for a line", self.peer),
            Read::TimedOut => panic!("{}: no line within {wait:?}", self.peer),
        }
    }

    /// The next line if one arrives within `wait`; panics on end of stream.
    pub async fn recv_timeout(&mut self, wait: Duration) -> Option<String> {
        match self.read(wait).await {
            Read::Line(line) => Some(line),
            Read::Eof => panic!("{}: connection closed while waiting for a line", self.peer),
            Read::TimedOut => None,
        }
    }

    /// Sends `line` and returns the next line received.
    pub async fn request(&mut self, line: &str) -> String {
        self.send(line).await;
        self.recv().await
    }

    /// Panics if any line (or end of stream) arrives within `wait`.
    pub async fn expect_silence(&mut self, wait: Duration) {
        match self.read(wait).await {
            Read::Line(line) => {
                panic!("{}: expected silence for {wait:?}, got {line:?}", self.peer)
            }
            Read::Eof => panic!(
                "{}: expected silence for {wait:?}, the connection closed",
                self.peer
            ),
            Read::TimedOut => {}
        }
    }

    /// Waits (default timeout) for the node to close the connection; panics
    /// if a line arrives first.
    pub async fn expect_eof(&mut self) {
        let wait = self.timeout;
        match self.read(wait).await {
            Read::Eof => {}
            Read::Line(line) => panic!("{}: expected end of stream, got {line:?}", self.peer),
            Read::TimedOut => panic!("{}: connection still open after {wait:?}", self.peer),
        }
    }

    /// Whether the node has closed the connection, checked within 100 ms.
    /// A line that arrives meanwhile is an error: it would be lost.
    pub async fn is_closed(&mut self) -> bool {
        match self.read(Duration::from_millis(100)).await {
            Read::Eof => true,
            Read::TimedOut => false,
            Read::Line(line) => panic!("{}: is_closed() received a line: {line:?}", self.peer),
        }
    }

    /// Sends `S` and returns its fields.
    pub async fn status(&mut self) -> Status {
        let line = self.request("S").await;
        parse_status(&line)
    }

    /// Polls `S` every 20 ms until `pred` holds, panicking after `wait` with
    /// the last status seen and `what` was awaited.
    pub async fn wait_status(
        &mut self,
        what: &str,
        wait: Duration,
        pred: impl Fn(&Status) -> bool,
    ) -> Status {
        let deadline = Instant::now() + wait;
        loop {
            let status = self.status().await;
            if pred(&status) {
                return status;
            }
            if Instant::now() >= deadline {
                panic!("{}: still not {what} after {wait:?}: {status:?}", self.peer);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Closes our side for writing; the node sees end of stream.
    pub async fn shutdown_write(&mut self) {
        let _ = self.writer.shutdown().await;
    }

    async fn read(&mut self, wait: Duration) -> Read {
        if self.eof {
            return Read::Eof;
        }
        let deadline = Instant::now() + wait;
        loop {
            let read =
                tokio::time::timeout_at(deadline, self.reader.read_until(b'\n', &mut self.partial))
                    .await;
            match read {
                Err(_) => return Read::TimedOut,
                // A reset counts as closed: that is what a client would see.
                Ok(Ok(0)) | Ok(Err(_)) => {
                    self.eof = true;
                    return Read::Eof;
                }
                Ok(Ok(_)) if self.partial.last() == Some(&b'\n') => {
                    self.partial.pop();
                    let bytes = std::mem::take(&mut self.partial);
                    return Read::Line(String::from_utf8_lossy(&bytes).into_owned());
                }
                // Bytes without LF then EOF: read_until returned early; loop
                // to observe the EOF.
                Ok(Ok(_)) => {}
            }
        }
    }
}
