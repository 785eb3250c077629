//! The server under test: either one already running at a given address,
//! or a child process started on a free 127.0.0.1 port (optionally pinned)
//! that announces `listening <addr>` on stdout and is killed at the end.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::time::{timeout_at, Instant};

use crate::error::BenchError;
use crate::pin;

/// How long a spawned server may take to print its address.
const STARTUP: Duration = Duration::from_secs(10);

/// How to reach a target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Launch {
    External(SocketAddr),
    Spawn {
        program: PathBuf,
        args: Vec<OsString>,
    },
}

/// A reachable server, and the child process if the bench started it.
#[derive(Debug)]
pub struct Server {
    addr: SocketAddr,
    child: Option<Child>,
}

impl Server {
    pub async fn start(launch: &Launch, pin_cpu: Option<usize>) -> Result<Self, BenchError> {
        match launch {
            Launch::External(addr) => {
                if !addr.ip().is_loopback() {
                    return Err(BenchError::NotLoopback(*addr));
                }
                Ok(Self {
                    addr: *addr,
                    child: None,
                })
            }
            Launch::Spawn { program, args } => spawn(program, args, pin_cpu).await,
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Kills a spawned server and waits for it to go.
    pub async fn stop(mut self) {
        if let Some(child) = self.child.as_mut() {
            // Already gone is fine: nothing is left to stop.
            let _ = child.kill().await;
        }
    }
}

async fn spawn(
    program: &Path,
    args: &[OsString],
    pin_cpu: Option<usize>,
) -> Result<Server, BenchError> {
    let name = program.display().to_string();
    let (command, command_args) = pin::wrap(program, args, pin_cpu);
    let mut cmd = Command::new(command);
    cmd.args(command_args)
        // The child sees its stdin close when the bench ends, however it ends.
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    if std::env::var_os("RUST_LOG").is_none() {
        // Per-connection log lines would drown the table.
        cmd.env("RUST_LOG", "warn");
    }
    let mut child = cmd.spawn().map_err(|source| BenchError::Spawn {
        program: name.clone(),
        source,
    })?;
    let startup = |problem| BenchError::Startup {
        program: name.clone(),
        problem,
    };
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| startup("no stdout pipe"))?;
    let mut stdout = BufReader::new(stdout);
    let deadline = Instant::now() + STARTUP;
    let mut line = String::new();
    let addr = loop {
        line.clear();
        let read = timeout_at(deadline, stdout.read_line(&mut line))
            .await
            .map_err(|_| startup("no `listening <addr>` line within 10 s"))?
            .map_err(|_| startup("its stdout could not be read"))?;
        if read == 0 {
            return Err(startup("it exited before printing `listening <addr>`"));
        }
        if let Some(addr) = line.trim_end().strip_prefix("listening ") {
            break addr
                .parse::<SocketAddr>()
                .map_err(|_| startup("the `listening` line holds no socket address"))?;
        }
    };
    if !addr.ip().is_loopback() {
        return Err(BenchError::NotLoopback(addr));
    }
    // Keep reading so a chatty server never blocks on a full pipe; ends
    // when the child exits.
    tokio::spawn(async move {
        let _ = tokio::io::copy(&mut stdout, &mut tokio::io::sink()).await;
    });
    Ok(Server {
        addr,
        child: Some(child),
    })
}
