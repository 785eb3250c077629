//! `Batond`: one real `batond` process under test, with its stderr kept in a
//! log file that is printed when a test panics while the node is alive. A
//! cluster node started without `--cluster-key-file` gets the test
//! process's key (see [`crate::key`]).

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tempfile::TempDir;

use crate::binary::batond_bin;
use crate::line_client::LineClient;

/// How long a node may take to print its `listening` line. Generous because
/// the test machine is small and shared.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// How many log lines to show when a test fails.
const LOG_TAIL_LINES: usize = 60;

/// A running (or exited) `batond`. Killed with SIGKILL on drop.
#[derive(Debug)]
pub struct Batond {
    child: Child,
    exit: Option<ExitStatus>,
    addr: SocketAddr,
    /// Caller's arguments without `--listen` (with the cluster key the
    /// harness added, if it did), reused by [`Batond::restart`].
    args: Vec<String>,
    dir: TempDir,
    log: PathBuf,
}

impl Batond {
    /// Starts a node with `args`, on `127.0.0.1:0` unless `args` has `--listen`.
    pub fn start(args: &[&str]) -> Batond {
        let mut args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        let listen = take_listen(&mut args).unwrap_or_else(|| "127.0.0.1:0".to_owned());
        Self::launch(&listen, args)
    }

    /// Starts a node listening on `addr`, with the other arguments `args`.
    pub fn start_at(addr: SocketAddr, args: &[&str]) -> Batond {
        let mut args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        take_listen(&mut args);
        Self::launch(&addr.to_string(), args)
    }

    fn launch(listen: &str, mut args: Vec<String>) -> Batond {
        let dir = match tempfile::Builder::new().prefix("batond-test-").tempdir() {
            Ok(d) => d,
            Err(e) => panic!("cannot create a temp dir for batond: {e}"),
        };
        let log = dir.path().join("batond.log");
        // A cluster node needs the cluster's key; kept in its own
        // directory, so a restart finds it again.
        crate::key::add_cluster_key(&mut args, dir.path());
        let (child, addr) = spawn_retrying(listen, &args, &log, Instant::now() + START_TIMEOUT);
        Batond {
            child,
            exit: None,
            addr,
            args,
            dir,
            log,
        }
    }

    /// Kills the node if it still runs and starts it again on the same
    /// address with the same arguments (same temp dir and log file).
    pub fn restart(&mut self) {
        if self.is_running() {
            self.kill();
        }
        let listen = self.addr.to_string();
        let deadline = Instant::now() + START_TIMEOUT;
        let (child, addr) = spawn_retrying(&listen, &self.args, &self.log, deadline);
        self.child = child;
        self.exit = None;
        self.addr = addr;
    }

    /// The client address the node printed.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// A directory private to this node, kept until it is dropped (for
    /// `--data-dir` and similar).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Opens a new line client to the node.
    pub async fn connect(&self) -> LineClient {
        LineClient::connect(self.addr).await
    }

    /// Whether the process has not exited yet.
    pub fn is_running(&mut self) -> bool {
        self.poll_exit().is_none()
    }

    /// SIGKILL, then reap.
    pub fn kill(&mut self) {
        if self.poll_exit().is_some() {
            return;
        }
        self.signal(Signal::SIGKILL);
        if self.wait_exit(START_TIMEOUT).is_none() {
            panic!("batond pid {} survived SIGKILL", self.pid());
        }
    }

    /// SIGTERM, then wait for the exit (panics after 10 s) and return its status.
    pub fn terminate(&mut self) -> ExitStatus {
        if let Some(status) = self.poll_exit() {
            return status;
        }
        self.signal(Signal::SIGTERM);
        match self.wait_exit(START_TIMEOUT) {
            Some(status) => status,
            None => panic!(
                "batond pid {} did not exit within {START_TIMEOUT:?} of SIGTERM",
                self.pid()
            ),
        }
    }

    /// SIGINT, then wait for the exit (panics after 10 s) and return its status.
    pub fn interrupt(&mut self) -> ExitStatus {
        if let Some(status) = self.poll_exit() {
            return status;
        }
        self.signal(Signal::SIGINT);
        match self.wait_exit(START_TIMEOUT) {
            Some(status) => status,
            None => panic!(
                "batond pid {} did not exit within {START_TIMEOUT:?} of SIGINT",
                self.pid()
            ),
        }
    }

    /// SIGSTOP, returning once every thread of the node is stopped: the
    /// signal is delivered asynchronously, and a test that writes to the node
    /// right after must not race it.
    pub fn stop_signal(&mut self) {
        self.signal(Signal::SIGSTOP);
        self.await_state("stopped", |stopped| stopped, Some(Signal::SIGSTOP));
    }

    /// SIGCONT, returning once the node runs again.
    pub fn cont(&mut self) {
        self.signal(Signal::SIGCONT);
        self.await_state("continued", |stopped| !stopped, Some(Signal::SIGCONT));
    }

    /// Polls `/proc` until `want(all threads stopped)` holds, sending `resend`
    /// again every 100 ms; panics after 5 s. Without `/proc` it returns at once.
    fn await_state(&mut self, what: &str, want: impl Fn(bool) -> bool, resend: Option<Signal>) {
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut next_resend = Instant::now() + Duration::from_millis(100);
        loop {
            match all_threads_stopped(self.child.id()) {
                None => return,
                Some(stopped) if want(stopped) => return,
                Some(_) => {}
            }
            if Instant::now() >= deadline {
                panic!("batond pid {} was not {what} within 5 s", self.pid());
            }
            if let Some(signal) = resend.filter(|_| Instant::now() >= next_resend) {
                self.signal(signal);
                next_resend = Instant::now() + Duration::from_millis(100);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Waits up to `timeout` for the process to exit.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.poll_exit() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The last `lines` lines the node wrote to stderr.
    pub fn log_tail(&self, lines: usize) -> String {
        log_tail(&self.log, lines)
    }

    fn poll_exit(&mut self) -> Option<ExitStatus> {
        if self.exit.is_none() {
            match self.child.try_wait() {
                Ok(status) => self.exit = status,
                Err(e) => panic!("cannot poll batond pid {}: {e}", self.child.id()),
            }
        }
        self.exit
    }

    fn signal(&mut self, signal: Signal) {
        if let Some(status) = self.poll_exit() {
            panic!("cannot send {signal} to batond: it already exited ({status})");
        }
        let pid = match i32::try_from(self.child.id()) {
            Ok(pid) => Pid::from_raw(pid),
            Err(_) => panic!("pid {} does not fit a pid_t", self.child.id()),
        };
        if let Err(e) = kill(pid, signal) {
            panic!("cannot send {signal} to batond pid {pid}: {e}");
        }
    }
}

impl Drop for Batond {
    fn drop(&mut self) {
        let running = self.exit.is_none() && matches!(self.child.try_wait(), Ok(None));
        if std::thread::panicking() {
            eprintln!(
                "---- batond {} (pid {}{}) stderr, last {LOG_TAIL_LINES} lines ----\n{}\n---- end of batond log ----",
                self.addr,
                self.child.id(),
                if running { "" } else { ", exited" },
                self.log_tail(LOG_TAIL_LINES),
            );
        }
        if running {
            // A stopped process still dies of SIGKILL, so no SIGCONT first.
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Whether every thread of `pid` is in the stopped state (`T`), from
/// `/proc/<pid>/task/*/stat`; `None` when `/proc` cannot tell.
fn all_threads_stopped(pid: u32) -> Option<bool> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut any = false;
    for task in tasks {
        let stat = std::fs::read_to_string(task.ok()?.path().join("stat")).ok()?;
        // The state follows the parenthesised command name, which may itself
        // contain spaces or parentheses.
        let state = stat.rsplit_once(") ")?.1.chars().next()?;
        if state != 'T' {
            return Some(false);
        }
        any = true;
    }
    Some(any)
}

/// Removes `--listen X` / `--listen=X` from `args`, returning X.
fn take_listen(args: &mut Vec<String>) -> Option<String> {
    if let Some(i) = args.iter().position(|a| a == "--listen") {
        if i + 1 >= args.len() {
            panic!("--listen given without a value in {args:?}");
        }
        let value = args.remove(i + 1);
        args.remove(i);
        return Some(value);
    }
    let i = args.iter().position(|a| a.starts_with("--listen="))?;
    let arg = args.remove(i);
    Some(arg["--listen=".len()..].to_owned())
}

/// Spawns until the node listens; a restart on a fixed port may briefly find
/// the port busy, so a node that exits before listening is started again
/// until `deadline`.
fn spawn_retrying(
    listen: &str,
    args: &[String],
    log: &Path,
    deadline: Instant,
) -> (Child, SocketAddr) {
    let fixed_port = !listen.ends_with(":0");
    loop {
        match spawn_once(listen, args, log, deadline) {
            Ok(started) => return started,
            Err(_) if fixed_port && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(why) => panic!(
                "batond {listen} {args:?} did not start: {why}\n---- batond stderr ----\n{}\n----",
                log_tail(log, LOG_TAIL_LINES)
            ),
        }
    }
}

fn spawn_once(
    listen: &str,
    args: &[String],
    log: &Path,
    deadline: Instant,
) -> Result<(Child, SocketAddr), String> {
    let stderr = open_log(log);
    let mut child = Command::new(batond_bin())
        .arg("--listen")
        .arg(listen)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(stderr))
        .spawn()
        .map_err(|e| format!("spawn failed: {e}"))?;
    let Some(stdout) = child.stdout.take() else {
        return Err("no stdout pipe".to_owned());
    };
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || read_stdout(stdout, tx));
    let wait = deadline.saturating_duration_since(Instant::now());
    let line = match rx.recv_timeout(wait) {
        Ok(line) => line,
        Err(mpsc::RecvTimeoutError::Timeout) => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "no `listening` line on stdout within {START_TIMEOUT:?}"
            ));
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            let status = child.wait().map_err(|e| format!("wait failed: {e}"))?;
            return Err(format!("exited ({status}) before printing `listening`"));
        }
    };
    let addr = line
        .strip_prefix("listening ")
        .and_then(|a| a.parse::<SocketAddr>().ok());
    match addr {
        Some(addr) if addr.ip().is_loopback() => Ok((child, addr)),
        _ => {
            let _ = child.kill();
            let _ = child.wait();
            // Not retried: the format is part of the contract.
            panic!("batond's first stdout line should be `listening 127.0.0.1:PORT`, got {line:?}")
        }
    }
}

/// Sends the first stdout line, then drains the rest so the node never blocks
/// on a full pipe.
fn read_stdout(stdout: impl Read, tx: mpsc::Sender<String>) {
    let mut reader = BufReader::new(stdout);
    let mut first = String::new();
    match reader.read_line(&mut first) {
        Ok(n) if n > 0 => {
            let line = first.strip_suffix('\n').unwrap_or(&first).to_owned();
            let _ = tx.send(line);
        }
        _ => return,
    }
    drop(tx);
    let _ = std::io::copy(&mut reader, &mut std::io::sink());
}

fn open_log(log: &Path) -> File {
    match OpenOptions::new().create(true).append(true).open(log) {
        Ok(f) => f,
        Err(e) => panic!("cannot open batond log {}: {e}", log.display()),
    }
}

fn log_tail(log: &Path, lines: usize) -> String {
    let text = match std::fs::read(log) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(e) => return format!("(cannot read {}: {e})", log.display()),
    };
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|a| (*a).to_owned()).collect()
    }

    #[test]
    fn takes_listen_with_separate_value() {
        let mut args = strings(&["--max-wait", "5", "--listen", "127.0.0.1:9", "-x"]);
        assert_eq!(take_listen(&mut args).as_deref(), Some("127.0.0.1:9"));
        assert_eq!(args, strings(&["--max-wait", "5", "-x"]));
    }

    #[test]
    fn takes_listen_with_equals() {
        let mut args = strings(&["--listen=127.0.0.1:9"]);
        assert_eq!(take_listen(&mut args).as_deref(), Some("127.0.0.1:9"));
        assert!(args.is_empty());
    }

    #[test]
    fn leaves_args_without_listen() {
        let mut args = strings(&["--max-lease", "3"]);
        assert_eq!(take_listen(&mut args), None);
        assert_eq!(args.len(), 2);
    }
}
