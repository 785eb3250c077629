//! The servers under test as processes: start one (or a cluster of them)
//! pinned like every other target, know their PIDs, kill one on purpose for
//! the failover figure, and stop all of them and remove their data at the
//! end, whatever happened in between.

use std::ffi::OsString;
use std::fs::File;
use std::io::Write as _;
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

/// What every spawned process shares: its CPU, where data and logs go, and
/// a file that lists the PIDs so a wrapper script can clean up after a
/// driver that was itself killed.
#[derive(Clone, Debug, Default)]
pub struct SpawnSettings {
    pub pin_cpu: Option<usize>,
    pub work_dir: Option<PathBuf>,
    pub pid_file: Option<PathBuf>,
    /// Flags added to every `batond` started (a scenario's, such as the
    /// floods' `--max-locks`); empty for the others.
    pub batond_args: Vec<std::ffi::OsString>,
}

impl SpawnSettings {
    /// A fresh directory for one server's data and logs.
    pub fn fresh_dir(&self, name: &str) -> Result<PathBuf, BenchError> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static DIRS: AtomicU64 = AtomicU64::new(0);
        let base = self.work_dir.clone().unwrap_or_else(std::env::temp_dir);
        let n = DIRS.fetch_add(1, Ordering::Relaxed);
        let dir = base.join(format!("baton-bench-{}-{name}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|source| BenchError::Setup {
            what: format!("create {}", dir.display()),
            source,
        })?;
        Ok(dir)
    }
}

/// One process of a server under test.
#[derive(Debug)]
pub struct Node {
    pub addr: SocketAddr,
    child: Option<Child>,
    pid: Option<u32>,
}

impl Node {
    /// A server the bench did not start.
    pub fn external(addr: SocketAddr) -> Self {
        Self {
            addr,
            child: None,
            pid: None,
        }
    }
}

/// A reachable server: its nodes, which one serves clients, and the
/// directory the bench made for it.
#[derive(Debug)]
pub struct Server {
    nodes: Vec<Node>,
    serving: usize,
    dir: Option<PathBuf>,
}

impl Server {
    pub fn new(nodes: Vec<Node>, serving: usize, dir: Option<PathBuf>) -> Self {
        Self {
            nodes,
            serving,
            dir,
        }
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.nodes[self.serving].addr
    }

    /// The PID of the serving process, if the bench started it.
    pub fn pid(&self) -> Option<u32> {
        self.nodes[self.serving].pid
    }

    /// The PIDs of the other processes the bench started for this server
    /// (standbys, followers).
    pub fn other_pids(&self) -> Vec<u32> {
        self.nodes
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != self.serving)
            .filter_map(|(_, node)| node.pid)
            .collect()
    }

    pub fn addrs(&self) -> Vec<SocketAddr> {
        self.nodes.iter().map(|node| node.addr).collect()
    }

    /// Sends SIGKILL to the serving process (no chance to hand off), and
    /// returns the addresses of the others.
    pub fn kill_serving(&mut self) -> Result<Vec<SocketAddr>, BenchError> {
        let node = &mut self.nodes[self.serving];
        let child = node.child.as_mut().ok_or_else(|| BenchError::Setup {
            what: "kill a server the bench did not start".into(),
            source: std::io::ErrorKind::Unsupported.into(),
        })?;
        child.start_kill().map_err(|source| BenchError::Setup {
            what: "kill -9 the serving node".into(),
            source,
        })?;
        let serving = self.serving;
        Ok(self
            .nodes
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != serving)
            .map(|(_, node)| node.addr)
            .collect())
    }

    /// Kills every process the bench started, waits for them, and removes
    /// their data.
    pub async fn stop(mut self) {
        for node in &mut self.nodes {
            if let Some(child) = node.child.as_mut() {
                // Already gone is fine: nothing is left to stop.
                let _ = child.kill().await;
            }
        }
        if let Some(dir) = self.dir.take() {
            // Best effort: a leftover temp dir is not worth failing a bench.
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// A started process and, when asked for, the address it announced.
#[derive(Debug)]
pub struct Spawned {
    pub child: Child,
    pub announced: Option<SocketAddr>,
}

impl Spawned {
    pub fn into_node(self, addr: SocketAddr) -> Node {
        let pid = self.child.id();
        Node {
            addr,
            child: Some(self.child),
            pid,
        }
    }
}

/// Starts `program` pinned per `settings`. With `log: None` it must print
/// `listening <addr>` on stdout (batond, the echo server); otherwise its
/// output goes to that file and the caller checks readiness itself.
pub async fn spawn(
    program: &Path,
    args: &[OsString],
    settings: &SpawnSettings,
    log: Option<&Path>,
) -> Result<Spawned, BenchError> {
    let name = program.display().to_string();
    let (command, command_args) = pin::wrap(program, args, settings.pin_cpu);
    let mut cmd = Command::new(command);
    // The child sees its stdin close when the bench ends, however it ends.
    cmd.args(command_args)
        .stdin(Stdio::piped())
        .kill_on_drop(true);
    match log {
        None => {
            cmd.stdout(Stdio::piped()).stderr(Stdio::inherit());
        }
        Some(path) => {
            let file = |path: &Path| {
                File::create(path).map_err(|source| BenchError::Setup {
                    what: format!("create {}", path.display()),
                    source,
                })
            };
            cmd.stdout(file(path)?)
                .stderr(file(&path.with_extension("err"))?);
        }
    }
    if std::env::var_os("RUST_LOG").is_none() {
        // Per-connection log lines would drown the table.
        cmd.env("RUST_LOG", "warn");
    }
    let mut child = cmd.spawn().map_err(|source| BenchError::Spawn {
        program: name.clone(),
        source,
    })?;
    record_pid(settings, child.id());
    if log.is_some() {
        return Ok(Spawned {
            child,
            announced: None,
        });
    }
    let addr = read_announcement(&mut child, &name).await?;
    Ok(Spawned {
        child,
        announced: Some(addr),
    })
}

fn record_pid(settings: &SpawnSettings, pid: Option<u32>) {
    if let (Some(path), Some(pid)) = (&settings.pid_file, pid) {
        // The list only helps a wrapper clean up after a crash; the bench
        // itself kills what it started either way.
        if let Ok(mut file) = File::options().create(true).append(true).open(path) {
            let _ = writeln!(file, "{pid}");
        }
    }
}

async fn read_announcement(child: &mut Child, name: &str) -> Result<SocketAddr, BenchError> {
    let startup = |problem| BenchError::Startup {
        program: name.to_string(),
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
    Ok(addr)
}

/// The last lines of a daemon's log, for an error message.
pub fn log_tail(path: &Path) -> String {
    let mut tail = String::new();
    for path in [path.to_path_buf(), path.with_extension("err")] {
        if let Ok(text) = std::fs::read_to_string(&path) {
            let lines: Vec<&str> = text.lines().collect();
            let from = lines.len().saturating_sub(5);
            tail.push_str(&lines[from..].join(" | "));
        }
    }
    tail
}
