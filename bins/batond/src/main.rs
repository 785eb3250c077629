//! `batond`: the Baton lock server. Parses flags, sets up logging and the
//! open-file limit, locks the data directory if there is one, and runs a
//! node until SIGINT or SIGTERM, or until its state can no longer be saved.
//! SIGHUP reloads what can be reloaded (`reload.rs`).

mod addr;
mod config_file;
mod http;
mod logging;
mod members;
mod modes;
mod reload;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use baton_cluster::{priority, raft};
use baton_proto::Limits;
use baton_server::{DataDir, ServerConfig};
use clap::Parser;
use modes::{serve_priority, serve_raft, serve_single, Bound};

mod tls;

/// Baton lock server: exclusive locks with fencing tokens, FIFO waiters and
/// leases, over a pipelined text protocol.
///
/// Every flag may also be set in a TOML file given with --config, under
/// its long name without the dashes (`max-wait = "30"`, `peers = ["a:7411",
/// "b:7411"]`); a flag on the command line overrides the file.
///
/// A DURATION is seconds with up to 3 decimals (`30`, `0.5`) or a number
/// with a unit: `500ms`, `5s`, `1.5s`, `2m`, `1h` (as `baton` takes them).
#[derive(Debug, Parser)]
#[command(name = "batond", version)]
struct Flags {
    /// Read settings from this TOML file first (keys: the flags' long names,
    /// e.g. `max-wait = "30"`; see docs/batond.example.toml). Flags given on
    /// the command line override it.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Address clients connect to, host:port (port 0 picks a free port); a
    /// host name is resolved when binding.
    #[arg(long, default_value = "127.0.0.1:7411", value_parser = addr::host_port)]
    listen: String,
    /// Longest wait an acquire may ask for.
    #[arg(long = "max-wait", value_name = "DURATION", default_value = "86400", value_parser = parse_seconds)]
    max_wait_ms: u64,
    /// Longest lease an acquire or renew may ask for.
    #[arg(long = "max-lease", value_name = "DURATION", default_value = "86400", value_parser = parse_seconds)]
    max_lease_ms: u64,
    /// Client connections served at once; more are refused.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    max_connections: usize,
    /// Queued acquires per connection; more are answered with an error.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    max_pending: usize,
    /// Grants held at once, over every client; an acquire of a free key
    /// past it is answered `E A <key> too many locks`.
    #[arg(long, value_name = "N", default_value_t = baton_server::Quota::DEFAULT_MAX_LOCKS as u64, value_parser = clap::value_parser!(u64).range(1..))]
    max_locks: u64,
    /// Acquires queued at once, over every connection; one more that would
    /// wait is answered `E A <key> too many waiters`.
    #[arg(long, value_name = "N", default_value_t = baton_server::Quota::DEFAULT_MAX_WAITERS as u64, value_parser = clap::value_parser!(u64).range(0..))]
    max_waiters: u64,
    /// Watches (`W`) pending at once, over every connection; one more is
    /// answered `E W <key> too many watches`.
    #[arg(long, value_name = "N", default_value_t = baton_server::Quota::DEFAULT_MAX_WATCHES as u64, value_parser = clap::value_parser!(u64).range(0..))]
    max_watches: u64,
    /// Watches (`W`) pending at once on one connection; one more is
    /// answered `E W <key> too many watches`.
    #[arg(long, value_name = "N", default_value_t = baton_server::DEFAULT_MAX_WATCHES_PER_CONNECTION)]
    max_watches_per_connection: usize,
    /// How this node runs: alone, or in a priority or Raft cluster with --peers.
    #[arg(long, value_enum, default_value_t = Mode::Single)]
    mode: Mode,
    /// Every node's client address, the same list on every node; its order
    /// is the promotion priority (first = highest). Each is host:port; a
    /// host name is resolved at every dial, so a peer that comes back on a
    /// new IP is found.
    #[arg(long, value_name = "A,B,C", value_delimiter = ',', value_parser = addr::host_port)]
    peers: Vec<String>,
    /// Raft cluster: this node joins a running cluster instead of seeding
    /// a fresh one (start it, then `baton member add` its address). Its
    /// --peers may be left out.
    #[arg(long)]
    join: bool,
    /// The address this node has in --peers, when it is not --listen
    /// (a node bound to 0.0.0.0, say), host:port.
    #[arg(long, value_name = "ADDR", value_parser = addr::host_port)]
    advertise: Option<String>,
    /// Cluster: time between heartbeats.
    #[arg(long = "heartbeat-interval", value_name = "DURATION", default_value = "0.05", value_parser = parse_seconds)]
    heartbeat_interval_ms: u64,
    /// Cluster: a peer not heard for this long is dead. A Raft
    /// follower calls an election after this long plus a random part of as
    /// much again.
    #[arg(long = "failure-timeout", value_name = "DURATION", default_value = "0.3", value_parser = parse_seconds)]
    failure_timeout_ms: u64,
    /// Where this node keeps its state across restarts, one directory per
    /// node (it is locked): the Raft log, vote and snapshots (required with
    /// --mode raft), or the lock table and last token of a single or
    /// priority node (optional: without it a restart loses the held locks;
    /// tokens rise anyway).
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Cluster: the file holding the cluster key (make one with `baton
    /// keygen`; every node of the cluster uses the same). Peers prove to
    /// each other that they hold it, and their traffic is encrypted. Give
    /// it twice while rotating keys: the node dials with the first and
    /// accepts either.
    #[arg(long, value_name = "PATH", action = clap::ArgAction::Append)]
    cluster_key_file: Vec<PathBuf>,
    /// Raft cluster: log entries applied between two snapshots (each
    /// snapshot lets the log be purged).
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    snapshot_every: u64,
    /// Clients must authenticate (`U <user> <secret>`) as one of the users
    /// of this TOML file, and may then use only their keys. SIGHUP reloads it.
    #[arg(long, value_name = "PATH")]
    auth_file: Option<PathBuf>,
    #[command(flatten)]
    tls: tls::TlsFlags,
    /// Serve the operator's HTTP endpoint on this address: /health,
    /// /metrics (Prometheus), /v1/locks, /v1/cluster and the console at /ui
    /// (admin users only with --auth-file). Off unless given. host:port.
    #[arg(long, value_name = "ADDR", value_parser = addr::host_port)]
    http_listen: Option<String>,
    /// How log lines are written on stderr: text, or one JSON object per
    /// line. RUST_LOG sets what is logged (default: info, and warn for the
    /// Raft library, whose repeated warnings are summed up every 10 s
    /// unless RUST_LOG names openraft).
    #[arg(long, value_enum, default_value_t = logging::LogFormat::Text)]
    log_format: logging::LogFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Mode {
    Single,
    Priority,
    Raft,
}

/// What the flags say to run.
enum Plan {
    Single {
        config: ServerConfig,
        data_dir: Option<PathBuf>,
    },
    Priority {
        config: ServerConfig,
        settings: priority::PrioritySettings,
    },
    Raft {
        config: ServerConfig,
        settings: raft::RaftSettings,
    },
}

impl Flags {
    fn plan(self) -> Result<Plan, String> {
        let config = self.server_config()?;
        match self.mode {
            Mode::Single => {
                if !self.peers.is_empty() {
                    return Err("--peers needs --mode priority or --mode raft".into());
                }
                if !self.cluster_key_file.is_empty() {
                    return Err("--cluster-key-file needs --mode priority or --mode raft".into());
                }
                Ok(Plan::Single {
                    config,
                    data_dir: self.data_dir,
                })
            }
            Mode::Priority | Mode::Raft => self.cluster_plan(config),
        }
    }

    /// What every mode's server is told: the client port, its limits,
    /// users, TLS and timeouts.
    fn server_config(&self) -> Result<ServerConfig, String> {
        self.tls.check()?;
        let listen = addr::resolve_to_bind("--listen", &self.listen)?;
        // A node bound by name is known by that name (self= in S, its
        // place in --peers), unless it picks its port.
        let advertise = self.advertise.clone().or_else(|| {
            (addr::is_name(&self.listen) && listen.port() != 0).then(|| self.listen.clone())
        });
        Ok(ServerConfig {
            listen,
            limits: Limits {
                max_wait_ms: self.max_wait_ms,
                max_lease_ms: self.max_lease_ms,
            },
            max_connections: self.max_connections,
            max_pending: self.max_pending,
            max_watches_per_connection: self.max_watches_per_connection,
            quota: baton_server::Quota {
                max_locks: usize::try_from(self.max_locks).unwrap_or(usize::MAX),
                max_waiters: usize::try_from(self.max_waiters).unwrap_or(usize::MAX),
                max_watches: usize::try_from(self.max_watches).unwrap_or(usize::MAX),
            },
            advertise,
            auth: match &self.auth_file {
                Some(path) => Some(Arc::new(
                    baton_server::Auth::load(path).map_err(|e| e.to_string())?,
                )),
                None => None,
            },
            tls: self.tls.load()?,
            line_timeout: self.tls.line_timeout(),
            idle_timeout: self.tls.idle_timeout(),
        })
    }

    /// A priority or Raft node: its place in `--peers`, its key, timings.
    fn cluster_plan(self, config: ServerConfig) -> Result<Plan, String> {
        let me_addr = self
            .advertise
            .clone()
            .unwrap_or_else(|| addr::as_known(&self.listen));
        if self.join && self.mode != Mode::Raft {
            return Err("--join is for --mode raft (a priority cluster changes its --peers by rolling restart)".into());
        }
        if self.peers.len() > raft::members::MAX_SEEDS {
            return Err(format!(
                "--peers lists {} nodes, more than {}",
                self.peers.len(),
                raft::members::MAX_SEEDS
            ));
        }
        let me = match self.peers.iter().position(|p| *p == me_addr) {
            _ if self.join => raft::members::joined_id(&me_addr),
            Some(index) => index as u64,
            None => {
                return Err(format!(
                    "--peers must list this node's address {me_addr} (or give --advertise, or --join to join a running Raft cluster)"
                ))
            }
        };
        if self.heartbeat_interval_ms == 0 || self.failure_timeout_ms <= self.heartbeat_interval_ms
        {
            return Err(
                "--failure-timeout must be longer than --heartbeat-interval, which must be above 0"
                    .into(),
            );
        }
        let keys = cluster_keys(self.mode, &self.cluster_key_file)?;
        let mut seen = std::collections::HashSet::new();
        if let Some(dup) = self.peers.iter().find(|p| !seen.insert(*p)) {
            return Err(format!("--peers lists {dup} twice"));
        }
        if self.mode == Mode::Priority {
            let settings = priority::PrioritySettings {
                peers: self.peers,
                me: me as usize,
                heartbeat_ms: self.heartbeat_interval_ms,
                failure_timeout_ms: self.failure_timeout_ms,
                data_dir: self.data_dir,
                keys,
            };
            return Ok(Plan::Priority { config, settings });
        }
        let data_dir = self
            .data_dir
            .ok_or_else(|| "--mode raft needs --data-dir".to_string())?;
        if self.snapshot_every == 0 {
            return Err("--snapshot-every must be above 0".into());
        }
        let mut settings = raft::RaftSettings::new(me, self.peers, data_dir, keys);
        settings.join = self.join;
        settings.heartbeat_ms = self.heartbeat_interval_ms;
        settings.election_timeout_ms = self.failure_timeout_ms;
        settings.snapshot_every = self.snapshot_every;
        Ok(Plan::Raft { config, settings })
    }
}

/// The cluster's keys, which a cluster node cannot run without.
fn cluster_keys(mode: Mode, paths: &[PathBuf]) -> Result<baton_cluster::peer::ClusterKeys, String> {
    if paths.is_empty() {
        let mode = if mode == Mode::Raft {
            "raft"
        } else {
            "priority"
        };
        return Err(format!(
            "--mode {mode} needs --cluster-key-file PATH: make a key once with `baton keygen > cluster.key && chmod 600 cluster.key` and give every node of the cluster that same file"
        ));
    }
    baton_cluster::peer::ClusterKeys::load(paths).map_err(|error| error.to_string())
}

impl Plan {
    /// The data directory, if the node has one.
    fn data_dir(&self) -> Option<&Path> {
        match self {
            Plan::Single { data_dir, .. } => data_dir.as_deref(),
            Plan::Priority { settings, .. } => settings.data_dir.as_deref(),
            Plan::Raft { settings, .. } => Some(&settings.data_dir),
        }
    }

    /// Who holds the data directory, as its lock file says.
    fn holder(&self, addr: &str) -> String {
        let mode = match self {
            Plan::Single { .. } => "single",
            Plan::Priority { .. } => "priority",
            Plan::Raft { .. } => "raft",
        };
        format!("--mode {mode}, listening on {addr}")
    }

    fn listen(&self) -> SocketAddr {
        self.config().listen
    }

    fn config(&self) -> &ServerConfig {
        match self {
            Plan::Single { config, .. }
            | Plan::Priority { config, .. }
            | Plan::Raft { config, .. } => config,
        }
    }

    /// What SIGHUP reloads.
    fn reloadable(&self) -> Vec<Arc<dyn reload::Reload>> {
        let mut items: Vec<Arc<dyn reload::Reload>> = Vec::new();
        if let Some(auth) = &self.config().auth {
            items.push(auth.clone());
        }
        if let Some(tls) = &self.config().tls {
            items.push(tls.clone());
        }
        items
    }
}

/// A duration flag to milliseconds, in the grammar of every duration flag
/// (`baton`'s too): seconds (`30`, `0.5`) or a number with a unit (`500ms`).
fn parse_seconds(text: &str) -> Result<u64, String> {
    baton_proto::parse_flag_duration_ms(text).map_err(|e| e.to_string())
}

/// Prints `batond: <message>` to standard error, the binary's one line of
/// failure. A closed or full standard error loses the line but not the
/// exit code (eprintln! would panic, and the exit would be 101).
pub(crate) fn say(message: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "batond: {message}");
}

fn main() -> ExitCode {
    let flags = match config_file::parse::<Flags>() {
        Ok(flags) => flags,
        Err(code) => return code,
    };
    logging::init(flags.log_format);
    // The node's state (locks, tokens, the Raft log) is nobody else's to
    // read: what it creates is for its user only, whatever umask it got.
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
    // The default connection limit needs as many descriptors.
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => tracing::debug!(limit, "open-file limit"),
        Err(error) => tracing::warn!(%error, "could not raise the open-file limit"),
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            say(&format!("cannot start the async runtime: {error}"));
            return ExitCode::FAILURE;
        }
    };
    let http_listen = match flags
        .http_listen
        .as_deref()
        .map(|a| addr::resolve_to_bind("--http-listen", a))
    {
        Some(Err(message)) => {
            say(&message);
            return ExitCode::from(2);
        }
        resolved => resolved.and_then(Result::ok),
    };
    let plan = match flags.plan() {
        Ok(plan) => plan,
        Err(message) => {
            say(&message);
            return ExitCode::from(2);
        }
    };
    // A Raft node's loop is spawned on a worker: run by `block_on` on the
    // main thread, each wake-up between it and openraft's tasks crossed
    // threads (a futex call and a context switch), about 60 a cycle, and
    // spawning it raised Raft's cycles/s by a third. The single node and
    // the priority cluster gained nothing measurable from it, so they keep
    // `block_on`.
    let served = if matches!(plan, Plan::Raft { .. }) {
        runtime.block_on(async move {
            tokio::spawn(serve(plan, http_listen))
                .await
                .unwrap_or_else(|panicked| Err(format!("the node's task failed: {panicked}")))
        })
    } else {
        runtime.block_on(serve(plan, http_listen))
    };
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            say(&message);
            ExitCode::FAILURE
        }
    }
}

/// Runs the node the plan describes until it is told to stop, or can no
/// longer serve; the error is what `batond` prints before it exits non-zero.
async fn serve(plan: Plan, http: Option<SocketAddr>) -> Result<(), String> {
    // Watch for signals before anyone can learn the node is up.
    let shutdown = shutdown_signal().map_err(|e| format!("cannot watch for signals: {e}"))?;
    reload::on_sighup(plan.reloadable()).map_err(|e| format!("cannot watch for SIGHUP: {e}"))?;
    file_size_limit_fails_writes().map_err(|e| format!("cannot watch for SIGXFSZ: {e}"))?;
    // Locked before any mode reads it, held until the process ends.
    let data_dir = lock_data_dir(&plan)?;
    let bound = Bound {
        plan: &plan,
        data_dir: data_dir.as_ref(),
        http,
    };
    match &plan {
        Plan::Single { config, .. } => serve_single(config, bound, shutdown).await,
        Plan::Priority { config, settings } => {
            serve_priority(config, settings, bound, shutdown).await
        }
        Plan::Raft { config, settings } => serve_raft(config, settings, bound, shutdown).await,
    }
}

/// The plan's data directory, locked, if it has one.
fn lock_data_dir(plan: &Plan) -> Result<Option<DataDir>, String> {
    let Some(path) = plan.data_dir() else {
        return Ok(None);
    };
    DataDir::open(path, &plan.holder(&plan.listen().to_string()))
        .map(Some)
        .map_err(|e| e.to_string())
}

/// Scripts and tests wait for this line to know the node is up, and learn
/// the port when they asked for port 0.
fn announce(addr: SocketAddr) {
    print_line(&format!("listening {addr}"));
    tracing::info!(%addr, "batond serving");
}

/// One line on standard output. Whoever started the node may have stopped
/// reading its output (a script that closed the pipe): println! would
/// panic on EPIPE and take a serving node down with it. The log lines
/// beside each call say it all too.
pub(crate) fn print_line(line: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}").and_then(|()| out.flush());
}

fn shutdown_signal() -> std::io::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    Ok(async move {
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
        }
    })
}

/// A write past the file-size limit (`ulimit -f`, RLIMIT_FSIZE) raises
/// SIGXFSZ, whose default action kills the process without a word. Caught,
/// the write fails with EFBIG instead, and the node takes the path of any
/// other failed write: it stops granting and exits 1 naming the file.
fn file_size_limit_fails_writes() -> std::io::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    // Registered once, the handler stays for the life of the process; the
    // stream itself is not needed.
    signal(SignalKind::from_raw(nix::libc::SIGXFSZ)).map(drop)
}

#[cfg(test)]
mod tests {
    use super::parse_seconds;

    #[test]
    fn seconds_parse_like_the_protocol() {
        assert_eq!(parse_seconds("86400"), Ok(86_400_000));
        assert_eq!(parse_seconds("0.5"), Ok(500));
        assert_eq!(parse_seconds("2.125"), Ok(2125));
        for bad in ["", ".5", "1.", "1.2345", "-1", "1e3", "x"] {
            assert!(parse_seconds(bad).is_err(), "{bad}");
        }
        let huge = parse_seconds("99999999999999999999").expect_err("huge");
        assert!(huge.ends_with("too large"), "{huge}");
    }

    /// The same units as `baton`'s flags: `--max-wait 500ms` is half a second.
    #[test]
    fn seconds_take_the_units_baton_takes() {
        assert_eq!(parse_seconds("500ms"), Ok(500));
        assert_eq!(parse_seconds("2m"), Ok(120_000));
        assert_eq!(parse_seconds("1.5s"), Ok(1500));
        let err = parse_seconds("5parsecs").expect_err("refused");
        assert!(err.starts_with("`5parsecs` is not a duration"), "{err}");
    }
}
