//! The real server (`baton_server::run`, its connections and its timer)
//! on an in-memory listener, for tests on tokio's paused time: the
//! instants are exact and a long wait costs no real time.

#![allow(dead_code)] // each test binary uses its own part

use std::io;
use std::net::SocketAddr;

use baton_server::{Accept, Clock, ServerConfig, SingleNode};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream};
use tokio::sync::{mpsc, oneshot, Mutex};
use tokio::task::JoinHandle;

/// A listener whose connections come from [`Dial`].
#[derive(Debug)]
struct Listener(Mutex<mpsc::Receiver<DuplexStream>>);

impl Accept for Listener {
    type Stream = DuplexStream;

    async fn accept(&self) -> io::Result<(DuplexStream, SocketAddr)> {
        match self.0.lock().await.recv().await {
            Some(stream) => Ok((stream, SocketAddr::from(([127, 0, 0, 1], 1)))),
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(SocketAddr::from(([127, 0, 0, 1], 7411)))
    }
}

pub struct Dial(mpsc::Sender<DuplexStream>);

/// A client connection that sends a line and reads one.
pub struct Client(pub BufReader<DuplexStream>);

impl Dial {
    pub async fn connect(&self) -> Client {
        let (ours, theirs) = tokio::io::duplex(64 * 1024);
        self.0.send(theirs).await.expect("server runs");
        Client(BufReader::new(ours))
    }
}

impl Client {
    pub async fn send(&mut self, line: &str) {
        let stream = self.0.get_mut();
        stream.write_all(line.as_bytes()).await.expect("write");
        stream.write_all(b"\n").await.expect("write");
    }

    pub async fn line(&mut self) -> String {
        let mut line = String::new();
        self.0.read_line(&mut line).await.expect("read");
        line.trim_end().to_string()
    }

    pub async fn ask(&mut self, line: &str) -> String {
        self.send(line).await;
        self.line().await
    }
}

impl Client {
    /// Everything until the node closes the connection.
    pub async fn rest(&mut self) -> String {
        let mut all = String::new();
        tokio::io::AsyncReadExt::read_to_string(&mut self.0, &mut all)
            .await
            .expect("read");
        all
    }
}

/// Starts a single node with `config` on an in-memory listener; stops it
/// when the returned sender is dropped or sent to.
pub fn start(config: ServerConfig) -> (Dial, oneshot::Sender<()>, JoinHandle<()>) {
    let (dial, accepted) = mpsc::channel(16);
    let (stop, stopped) = oneshot::channel::<()>();
    let listener = Listener(Mutex::new(accepted));
    let server = tokio::spawn(async move {
        let shutdown = async move {
            let _ = stopped.await;
        };
        baton_server::run(listener, Clock::new(), SingleNode::new(), config, shutdown)
            .await
            .expect("served");
    });
    (Dial(dial), stop, server)
}

/// The token at the end of a grant line (`A <key> <token>`).
pub fn token(answer: &str) -> u64 {
    answer
        .rsplit(' ')
        .next()
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("no token in {answer:?}"))
}
