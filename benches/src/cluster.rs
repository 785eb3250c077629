//! A Baton cluster on loopback: three `batond` nodes that list each other
//! as peers, all pinned to the server CPU, and the one that serves clients
//! (the priority active or the Raft leader) found from their `S` lines.
//! They share a cluster key made for the run, when this batond has
//! `--cluster-key-file`.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::time::{sleep, Instant};

use crate::error::BenchError;
use crate::server::{spawn, Server, SpawnSettings};
use crate::status;
use crate::target::ClusterMode;
use baton_tests::port::free_addrs as free_ports;

/// How long a fresh cluster may take to agree on who serves.
const ELECTION: Duration = Duration::from_secs(20);

/// The flag batond reads the cluster key from.
const KEY_FLAG: &str = "--cluster-key-file";

/// Starts `count` nodes in `mode` and waits until one of them serves.
pub async fn start(
    batond: &Path,
    mode: ClusterMode,
    count: usize,
    settings: &SpawnSettings,
) -> Result<Server, BenchError> {
    let addrs = free_ports(count).map_err(|source| BenchError::Setup {
        what: "pick ports for the cluster".into(),
        source,
    })?;
    let peers = addrs
        .iter()
        .map(SocketAddr::to_string)
        .collect::<Vec<_>>()
        .join(",");
    // The nodes' data (Raft) and the cluster key live here, removed with
    // the server.
    let dir = settings.fresh_dir(mode.flag())?;
    let key = if batond_has_flag(batond, KEY_FLAG) {
        match write_key_file(&dir) {
            Ok(key) => Some(key),
            Err(error) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(error);
            }
        }
    } else {
        // A batond from before cluster keys (a "before" run): it has no
        // such flag and needs none.
        None
    };
    let dir = Some(dir);
    let mut nodes = Vec::with_capacity(count);
    for (i, addr) in addrs.iter().enumerate() {
        let mut args: Vec<OsString> = vec![
            "--listen".into(),
            addr.to_string().into(),
            "--peers".into(),
            peers.clone().into(),
            "--mode".into(),
            mode.flag().into(),
        ];
        if let (ClusterMode::Raft, Some(dir)) = (mode, &dir) {
            args.push("--data-dir".into());
            args.push(dir.join(format!("node{i}")).into());
        }
        if let Some(key) = &key {
            args.push(KEY_FLAG.into());
            args.push(key.into());
        }
        args.extend(settings.batond_args.iter().cloned());
        let spawned = match spawn(batond, &args, settings, None).await {
            Ok(spawned) => spawned,
            Err(error) => {
                Server::new(nodes, 0, dir).stop().await;
                return Err(error);
            }
        };
        nodes.push(spawned.into_node(*addr));
    }
    match serving_node(&addrs, mode).await {
        Ok(serving) => Ok(Server::new(nodes, serving, dir)),
        Err(error) => {
            Server::new(nodes, 0, dir).stop().await;
            Err(error)
        }
    }
}

/// Polls every node's `S` until one reports the serving role.
pub async fn serving_node(addrs: &[SocketAddr], mode: ClusterMode) -> Result<usize, BenchError> {
    let deadline = Instant::now() + ELECTION;
    while Instant::now() < deadline {
        for (i, addr) in addrs.iter().enumerate() {
            let status = status::query(*addr, Duration::from_millis(500)).await;
            if status.as_ref().and_then(|s| s.get("role")) == Some(mode.serving_role()) {
                return Ok(i);
            }
        }
        sleep(Duration::from_millis(20)).await;
    }
    Err(BenchError::NotReady {
        what: format!("{} cluster", mode.flag()),
        detail: format!(
            "no node reported role={} within {ELECTION:?}",
            mode.serving_role()
        ),
    })
}

/// Whether this `batond` knows `--mode raft` (it lists it in `--help`).
pub fn batond_has_mode(batond: &Path, mode: ClusterMode) -> bool {
    batond_has_flag(batond, mode.flag())
}

/// Whether `batond --help` mentions `flag`.
fn batond_has_flag(batond: &Path, flag: &str) -> bool {
    std::process::Command::new(batond)
        .arg("--help")
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).contains(flag))
        .unwrap_or(false)
}

/// Writes a fresh random cluster key (the test kit's: 64 hex digits as
/// `baton keygen` prints) to a new file in `dir` only its owner can read.
fn write_key_file(dir: &Path) -> Result<PathBuf, BenchError> {
    use std::io::Write as _;
    let path = dir.join("cluster.key");
    let setup = |source| BenchError::Setup {
        what: format!("write the cluster key {}", path.display()),
        source,
    };
    let text = baton_tests::key::random_key_text()
        .map_err(|e| setup(std::io::Error::other(e.to_string())))?;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    options
        .open(&path)
        .and_then(|mut file| writeln!(file, "{text}"))
        .map_err(setup)?;
    Ok(path)
}
