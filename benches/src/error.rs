//! Why a benchmark run stops early. Every variant aborts the run: a figure
//! measured against a misbehaving server or a broken setup is not reported.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

/// A failed benchmark run or setup.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("cannot connect to {addr}: {source}")]
    Connect { addr: SocketAddr, source: io::Error },
    #[error("connection {conn}: {source}")]
    Io { conn: usize, source: io::Error },
    #[error("connection {conn}: the server closed the connection")]
    Closed { conn: usize },
    #[error("connection {conn}: {problem}: {line:?}")]
    Protocol {
        conn: usize,
        problem: &'static str,
        line: String,
    },
    #[error("lock safety violated: {0}")]
    Violation(#[from] Violation),
    #[error("outstanding requests not answered within {0:?} after the run ended")]
    Drain(Duration),
    #[error("cannot start {program}: {source}")]
    Spawn { program: String, source: io::Error },
    #[error("{program} did not report its address: {problem}")]
    Startup {
        program: String,
        problem: &'static str,
    },
    #[error("{0} is not a loopback address; the bench only talks to 127.0.0.1")]
    NotLoopback(SocketAddr),
    #[error("a load task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
    #[error("smoke check failed: {0}")]
    Smoke(String),
    #[error("cannot {what}: {source}")]
    Setup { what: String, source: io::Error },
    #[error("{what} is not ready: {detail}")]
    NotReady { what: String, detail: String },
    /// A peer system's client library reported an error.
    #[error("{target}: {message}")]
    Peer {
        target: &'static str,
        message: String,
    },
    #[error("{0}")]
    Scenario(String),
}

impl BenchError {
    /// A response the driver did not expect at this point.
    pub fn protocol(conn: usize, problem: &'static str, line: &[u8]) -> Self {
        Self::Protocol {
            conn,
            problem,
            line: String::from_utf8_lossy(line).into_owned(),
        }
    }
}

/// A grant that a correct lock server could not have produced.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Violation {
    #[error("client {client} was granted token {token} while client {holder} still held token {holder_token}")]
    Overlap {
        client: usize,
        token: u64,
        holder: usize,
        holder_token: u64,
    },
    #[error("client {client} was granted token {token}, not above the previous token {previous}")]
    TokenNotRising {
        client: usize,
        token: u64,
        previous: u64,
    },
    #[error("client {client} was granted token {token} while {holders} grants already held a key of {permits} permits")]
    OverPermits {
        client: usize,
        token: u64,
        holders: usize,
        permits: usize,
    },
    #[error("client {client} was granted token {token}, which an earlier grant already had")]
    TokenReused { client: usize, token: u64 },
}
