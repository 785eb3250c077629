//! One driver connection: batched writes, line reads, and every wait
//! bounded by the run's give-up instant so a stuck server ends the run with
//! an error instead of hanging it.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::time::{timeout, timeout_at, Instant};

use crate::error::BenchError;
use crate::lines::{Filled, LineReader};
use crate::window::Window;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A connection of the driver, numbered for error messages.
#[derive(Debug)]
pub struct Conn {
    pub id: usize,
    stream: TcpStream,
    pub lines: LineReader,
    /// Requests to send at the next `flush`.
    pub out: Vec<u8>,
}

impl Conn {
    pub async fn connect(id: usize, addr: SocketAddr) -> Result<Self, BenchError> {
        if !addr.ip().is_loopback() {
            return Err(BenchError::NotLoopback(addr));
        }
        let connect_error = |source| BenchError::Connect { addr, source };
        let stream = timeout(CONNECT_TIMEOUT, TcpStream::connect(addr))
            .await
            .map_err(|_| connect_error(std::io::ErrorKind::TimedOut.into()))?
            .map_err(connect_error)?;
        // Small request lines must leave at once, as a real client's would.
        stream.set_nodelay(true).map_err(connect_error)?;
        Ok(Self {
            id,
            stream,
            lines: LineReader::new(),
            out: Vec::with_capacity(4096),
        })
    }

    /// Writes everything queued in `out` with one write where possible.
    pub async fn flush(&mut self, give_up_at: Instant, drain: Duration) -> Result<(), BenchError> {
        if self.out.is_empty() {
            return Ok(());
        }
        let write = self.stream.write_all(&self.out);
        bounded(self.id, give_up_at, drain, write).await?;
        self.out.clear();
        Ok(())
    }

    /// Sends what is queued, waits for more response bytes (both bounded
    /// by the run's give-up instant), and turns each complete line into an
    /// item of `out` with `read`. A line `read` refuses, saying why, is a
    /// protocol error quoting it.
    pub async fn read_answers<A>(
        &mut self,
        window: &Window,
        out: &mut Vec<A>,
        mut read: impl FnMut(&[u8]) -> Result<A, &'static str>,
    ) -> Result<(), BenchError> {
        self.flush(window.give_up_at, window.drain).await?;
        self.fill(window.give_up_at, window.drain).await?;
        while let Some(line) = self.lines.next_line() {
            match read(line) {
                Ok(answer) => out.push(answer),
                Err(problem) => return Err(BenchError::protocol(self.id, problem, line)),
            }
        }
        Ok(())
    }

    /// Waits for more response bytes.
    pub async fn fill(&mut self, give_up_at: Instant, drain: Duration) -> Result<(), BenchError> {
        let read = self.lines.fill(&mut self.stream);
        let filled = bounded(self.id, give_up_at, drain, read).await?;
        match filled {
            Filled::Bytes => Ok(()),
            Filled::Eof => Err(BenchError::Closed { conn: self.id }),
            Filled::LineTooLong => {
                Err(BenchError::protocol(self.id, "response line too long", b""))
            }
        }
    }
}

/// One I/O step of connection `conn`, given up at `give_up_at` (the run's
/// drain of `drain` ran out).
async fn bounded<T>(
    conn: usize,
    give_up_at: Instant,
    drain: Duration,
    io: impl std::future::Future<Output = std::io::Result<T>>,
) -> Result<T, BenchError> {
    timeout_at(give_up_at, io)
        .await
        .map_err(|_| BenchError::Drain(drain))?
        .map_err(|source| BenchError::Io { conn, source })
}
