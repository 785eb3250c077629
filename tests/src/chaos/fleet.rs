//! The nodes of one chaos run, per mode, and the promises each mode makes
//! (as docs/cluster.md and docs/protocol.md state them) in the checker's terms.

use std::net::SocketAddr;
use std::time::Duration;

use tempfile::TempDir;
use tokio::time::Instant;

use crate::chaos::history::{FaultKind, Rules, Unsaved};
use crate::cluster::{field, probe_status};
use crate::daemon::Batond;
use crate::port::free_addr;

/// How a fleet runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// One `batond`, no data directory: locks die with it, tokens still rise.
    Single,
    /// One `batond --data-dir`: held locks survive restarts too.
    SingleDataDir,
    /// Three nodes, `--mode priority`.
    Priority,
    /// Three nodes, `--mode raft`, a data directory each.
    Raft,
}

/// Acknowledged changes a kill can undo on a node that saves its state
/// asynchronously: docs/cluster.md says at most every 100 ms (priority
/// replication is faster still); this leaves room for a loaded machine.
const UNSAVED_WINDOW: Duration = Duration::from_millis(500);

/// How late an `M` to an acquire must come to count as possibly applied
/// later (Raft; see [`Rules::moved_may_apply`]): a follower redirects in
/// a millisecond or two; a leader that had the request in its log answers
/// when the entry applies after it stepped down, or after the orphan wait.
const MOVED_MAY_APPLY: Duration = Duration::from_millis(20);

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Single => "single",
            Mode::SingleDataDir => "single --data-dir",
            Mode::Priority => "priority",
            Mode::Raft => "raft",
        }
    }

    pub fn nodes(self) -> usize {
        match self {
            Mode::Single | Mode::SingleDataDir => 1,
            Mode::Priority | Mode::Raft => 3,
        }
    }

    /// How many nodes the schedule may have down at once: every node but
    /// one in a priority cluster; in Raft, the majority too, since a leader
    /// without one must still answer in time.
    pub fn max_down(self) -> usize {
        match self {
            Mode::Single | Mode::SingleDataDir => 1,
            Mode::Priority | Mode::Raft => 2,
        }
    }

    /// The promises of this mode beyond those of every mode.
    pub fn rules(self) -> Rules {
        let moved_may_apply = matches!(self, Mode::Raft).then_some(MOVED_MAY_APPLY);
        let (holds, unsaved) = match self {
            // A restart without a data directory forgets every lock: holds
            // are not promised across it, releases trivially stay applied.
            Mode::Single => (false, None),
            // Locks survive restarts, but the last changes before a kill -9
            // may not be on disk yet.
            Mode::SingleDataDir => (
                true,
                Some(Unsaved {
                    window: UNSAVED_WINDOW,
                    kinds: vec![FaultKind::Kill],
                }),
            ),
            // "Lost grants at a crash": replication is asynchronous, so the
            // active's last changes before a kill or a pause may never
            // reach the standby that takes over; no quorum, no holds.
            Mode::Priority => (
                false,
                Some(Unsaved {
                    window: UNSAVED_WINDOW,
                    kinds: vec![FaultKind::Kill, FaultKind::Pause],
                }),
            ),
            // Every change committed by a majority before it is answered.
            Mode::Raft => (true, None),
        };
        Rules {
            holds,
            unsaved,
            answer_slack: Duration::from_millis(500),
            clock_tolerance: Duration::from_millis(20),
            moved_may_apply,
        }
    }
}

/// The running nodes of a run.
#[derive(Debug)]
pub struct Fleet {
    pub mode: Mode,
    pub nodes: Vec<Batond>,
    pub peers: Vec<SocketAddr>,
    // Kept for the nodes' lifetime: restarts reuse the directories.
    _dirs: Vec<TempDir>,
}

fn temp_dir() -> TempDir {
    match tempfile::Builder::new().prefix("baton-chaos-").tempdir() {
        Ok(dir) => dir,
        Err(e) => panic!("cannot create a data directory: {e}"),
    }
}

fn distinct_addrs(n: usize) -> Vec<SocketAddr> {
    let mut addrs: Vec<SocketAddr> = Vec::new();
    for _ in 0..100 * n {
        if addrs.len() == n {
            break;
        }
        let addr = free_addr();
        if !addrs.contains(&addr) {
            addrs.push(addr);
        }
    }
    assert_eq!(addrs.len(), n, "cannot find {n} distinct free ports");
    addrs
}

impl Fleet {
    /// Starts the nodes (blocking: call it off the async workers).
    pub fn start(mode: Mode) -> Fleet {
        let dirs: Vec<TempDir> = match mode {
            Mode::Single | Mode::Priority => Vec::new(),
            Mode::SingleDataDir => vec![temp_dir()],
            Mode::Raft => (0..3).map(|_| temp_dir()).collect(),
        };
        let data = |i: usize| dirs[i].path().to_string_lossy().into_owned();
        let nodes: Vec<Batond> = match mode {
            Mode::Single => vec![Batond::start(&[])],
            Mode::SingleDataDir => vec![Batond::start(&["--data-dir", &data(0)])],
            Mode::Priority | Mode::Raft => {
                let peers = distinct_addrs(mode.nodes());
                let list = peers
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(",");
                let flag = if mode == Mode::Raft {
                    "raft"
                } else {
                    "priority"
                };
                peers
                    .iter()
                    .enumerate()
                    .map(|(i, addr)| {
                        let mut args = vec!["--peers".to_owned(), list.clone()];
                        args.extend(["--mode".to_owned(), flag.to_owned()]);
                        if mode == Mode::Raft {
                            args.extend(["--data-dir".to_owned(), data(i)]);
                        }
                        let args: Vec<&str> = args.iter().map(String::as_str).collect();
                        Batond::start_at(*addr, &args)
                    })
                    .collect()
            }
        };
        let peers = nodes.iter().map(Batond::addr).collect();
        Fleet {
            mode,
            nodes,
            peers,
            _dirs: dirs,
        }
    }

    /// Waits until some node serves (role single, active or leader).
    pub async fn wait_ready(&self, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            for addr in &self.peers {
                if let Some(status) = probe_status(*addr, Duration::from_millis(500)).await {
                    if matches!(field(&status, "role"), "single" | "active" | "leader") {
                        return;
                    }
                }
            }
            if Instant::now() >= deadline {
                panic!(
                    "chaos {}: no node serving within {within:?} of the start",
                    self.mode.name()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
