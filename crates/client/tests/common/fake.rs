//! A scripted fake node for the client's tests: it answers `S` as a single
//! node, grants every `A`, releases every `R` and renews every `K`, or
//! redirects everything but `S` to another address, and it can be frozen
//! (it keeps reading and answers nothing, like a SIGSTOPped process whose
//! kernel still takes the bytes). It records every line it reads.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

const STATUS: &[u8] =
    b"S role=single mode=single self=127.0.0.1:1 active=- token=0 locks=0 waiters=0\n";

/// What the fake answers to everything but `S`.
#[derive(Debug, Clone, Copy)]
pub enum Script {
    /// Grants, releases and renews, like a node serving.
    Serve,
    /// `M <op> <key> <addr>`, like a standby, after the pause given.
    Redirect(SocketAddr, Duration),
}

#[derive(Debug)]
struct Shared {
    script: Script,
    frozen: AtomicBool,
    next_token: AtomicU64,
    lines: Mutex<Vec<String>>,
}

/// A fake node on a loopback port; it stops with the test's runtime.
#[derive(Debug, Clone)]
pub struct FakeNode {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
}

impl FakeNode {
    pub async fn start(script: Script) -> FakeNode {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared {
            script,
            frozen: AtomicBool::new(false),
            next_token: AtomicU64::new(1),
            lines: Mutex::new(Vec::new()),
        });
        let accepting = Arc::clone(&shared);
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                tokio::spawn(serve(socket, Arc::clone(&accepting)));
            }
        });
        FakeNode { addr, shared }
    }

    /// From now on nothing is answered, on every connection.
    pub fn freeze(&self) {
        self.shared.frozen.store(true, Ordering::SeqCst);
    }

    /// Every line read so far, in order.
    pub fn lines(&self) -> Vec<String> {
        self.shared.lines.lock().unwrap().clone()
    }
}

async fn serve(socket: tokio::net::TcpStream, shared: Arc<Shared>) {
    let (read, mut write) = socket.into_split();
    let mut lines = BufReader::new(read).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        shared.lines.lock().unwrap().push(line.clone());
        if shared.frozen.load(Ordering::SeqCst) {
            continue;
        }
        if let Script::Redirect(_, pause) = shared.script {
            if line != "S" {
                tokio::time::sleep(pause).await;
            }
        }
        let answer = answer(&line, &shared);
        if write.write_all(answer.as_bytes()).await.is_err() {
            return;
        }
    }
}

fn answer(line: &str, shared: &Shared) -> String {
    if line == "S" {
        return String::from_utf8_lossy(STATUS).into_owned();
    }
    let fields: Vec<&str> = line.split(' ').collect();
    let (op, key) = (fields[0], fields.get(1).copied().unwrap_or("?"));
    match (shared.script, op) {
        (Script::Redirect(to, _), _) => format!("M {op} {key} {to}\n"),
        (Script::Serve, "A") => {
            let token = shared.next_token.fetch_add(1, Ordering::SeqCst);
            format!("A {key} {token}\n")
        }
        (Script::Serve, "R" | "K") => format!("{op} {key}\n"),
        (Script::Serve, _) => format!("E {op} {key} not scripted\n"),
    }
}
