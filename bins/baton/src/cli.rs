//! The command line: subcommands, options and the help text.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};

use crate::exit;
use crate::grant_flags::GrantFlags;
use crate::seconds::parse_seconds;

/// Command-line client for Baton lock servers.
///
/// Durations are seconds (`30`, `0.5`, at most 3 decimals) or a number
/// with a unit: `500ms`, `5s`, `1.5s`, `2m`, `1h`. A wait of 0 waits as
/// long as the node allows (its maximum wait).
#[derive(Debug, Parser)]
#[command(name = "baton", version, after_help = exit::HELP)]
pub struct Cli {
    /// Node addresses, comma separated (host:port), at most 64.
    #[arg(
        long,
        global = true,
        env = "BATON_SERVERS",
        value_delimiter = ',',
        default_value = "127.0.0.1:7411"
    )]
    pub servers: Vec<String>,

    /// Authenticate as this user (nodes run with --auth-file); the secret
    /// comes from --secret-file or BATON_SECRET.
    #[arg(long, global = true, env = "BATON_USER", value_name = "NAME")]
    pub user: Option<String>,

    /// Read the user's secret from this file (its final newline is
    /// dropped); without it, from the BATON_SECRET environment variable.
    #[arg(long, global = true, value_name = "PATH")]
    pub secret_file: Option<PathBuf>,
    #[command(flatten)]
    pub tls: crate::tls::TlsFlags,

    /// The nodes' HTTP endpoint (`batond --http-listen`), for `locks`:
    /// host:port. Without it, the `http=` a node shows in its status.
    #[arg(long, global = true, env = "BATON_HTTP", value_name = "ADDR")]
    pub http: Option<String>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Wait for the lock and print its token. The lock stays held after
    /// baton exits, until released or until the lease runs out.
    Acquire {
        key: OsString,
        /// How long to wait for the lock (0: as long as the node allows; while
        /// no node serves, given up after 10 s of that: exit 4).
        #[arg(long, default_value = "0", value_parser = parse_seconds)]
        wait: Duration,
        /// One attempt, no waiting: exit 3 at once if the lock is held.
        #[arg(long = "try", conflicts_with = "wait")]
        try_once: bool,
        /// How long the grant lasts unless renewed.
        #[arg(long, default_value = "30", value_parser = parse_seconds)]
        lease: Duration,
        #[command(flatten)]
        grant: GrantFlags,
    },
    /// Release the grant of KEY with TOKEN.
    Release { key: OsString, token: u64 },
    /// Extend the grant of KEY with TOKEN to end LEASE seconds from now.
    Renew {
        key: OsString,
        token: u64,
        /// The new lease, counted from now.
        #[arg(long, default_value = "30", value_parser = parse_seconds)]
        lease: Duration,
    },
    /// Show every node: address, role, active node, last token, locks, waiters.
    Status {
        /// One JSON array of node objects instead: every status field, and
        /// `"error"` for a node that could not be asked.
        #[arg(long)]
        json: bool,
    },
    /// A Raft cluster's members: list them, add a node (started with
    /// `batond --join`), remove one. Through the leader's HTTP endpoint
    /// (/v1/members; see --http); an admin user with --auth-file.
    Member {
        #[command(subcommand)]
        action: MemberAction,
    },
    /// List the held locks, by key: KEY TOKEN LEASE WAITERS PERMITS MODE
    /// HOLDERS (from the HTTP endpoint's /v1/locks; see --http). TOKEN and
    /// LEASE are the newest holder's.
    Locks {
        /// Only keys that start with this.
        prefix: Option<String>,
        /// One JSON array of lock objects instead.
        #[arg(long)]
        json: bool,
        /// At most this many locks (1 to 1000000).
        #[arg(long, default_value = "1000", value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
        limit: u64,
    },
    /// Show who holds KEY: `KEY token=<t> lease=<seconds left> waiters=<n>`,
    /// or `token=- lease=-` while it is free (the protocol's `Q`). A key
    /// with several holders, shared holders, permits or values adds
    /// `permits=<n> mode=<m> holders=<n> holder=<token>,<lease>,<value or -> ...
    /// state=<tag>` (token and lease are then the newest holder's).
    Inspect {
        key: OsString,
        /// One JSON object instead.
        #[arg(long)]
        json: bool,
    },
    /// Break a stuck lock: release whatever grant holds KEY now (`Q`, then
    /// `R` with the token it showed). Asks first on a terminal; elsewhere
    /// needs --yes. Exits 6 if KEY is not held.
    ForceRelease {
        key: OsString,
        /// Do not ask.
        #[arg(long)]
        yes: bool,
    },
    /// Hold the lock while a command runs: BATON_KEY and BATON_TOKEN are set
    /// in its environment, the lease is renewed while it runs, the lock is
    /// released when it ends, and baton exits with its status. If the lease
    /// is lost (a renewal answered "not held", or none got through before
    /// the lease's end), the command gets SIGTERM (SIGKILL 2 s later) and
    /// baton exits 7.
    Run {
        key: OsString,
        /// How long to wait for the lock (0: as long as the node allows; while
        /// no node serves, given up after 10 s of that: exit 4).
        #[arg(long, default_value = "0", value_parser = parse_seconds)]
        wait: Duration,
        /// One attempt, no waiting: exit 3 at once if the lock is held.
        #[arg(long = "try", conflicts_with = "wait")]
        try_once: bool,
        /// Keep baton's exit codes apart from the command's: exit 0 if the
        /// command succeeded, 10 if it failed (its status is printed on
        /// stderr), and 1-9 only for baton's own outcomes.
        #[arg(long)]
        child_exit_code: bool,
        /// Lease, renewed every third of it while the command runs.
        #[arg(long, default_value = "30", value_parser = parse_seconds)]
        lease: Duration,
        #[command(flatten)]
        grant: GrantFlags,
        /// The command and its arguments, after `--`.
        #[arg(last = true, required = true, value_name = "CMD")]
        command: Vec<OsString>,
    },
    /// Print KEY's state, then a line each time its holders or their
    /// values change, until interrupted (SIGINT or SIGTERM: exit 0):
    /// `KEY state=<tag> holders=<n> holder=<token>,<value or -> ...`,
    /// oldest holder first. Follows redirects and failovers, and sends
    /// the watch again when a connection breaks; exits as the other
    /// commands do on an error (4: no node reachable or serving in time).
    Watch {
        key: OsString,
        /// One JSON object per line instead.
        #[arg(long)]
        json: bool,
    },
    /// Campaign for leadership of the election NAME, run a command while
    /// leading, and resign when it ends (like `consul lock`): waits for its
    /// turn, sets BATON_KEY and BATON_TOKEN in the command's environment,
    /// renews the lease while it runs and exits with its status. If
    /// leadership is lost (a renewal answered "not held", or none got
    /// through before the lease's end), the command gets SIGTERM (SIGKILL
    /// 2 s later) and baton exits 7.
    Elect {
        name: OsString,
        /// The leader's value, which `baton leader NAME` prints.
        #[arg(long, value_name = "V")]
        value: String,
        /// Lease, renewed every third of it while leading: how long a
        /// crashed leader keeps the others waiting.
        #[arg(long, default_value = "15", value_parser = parse_seconds)]
        lease: Duration,
        /// As for run: 0 if the command succeeded, 10 if it failed.
        #[arg(long)]
        child_exit_code: bool,
        /// The command and its arguments, after `--`.
        #[arg(last = true, required = true, value_name = "CMD")]
        command: Vec<OsString>,
    },
    /// Print the value of the leader of the election NAME; exit 6 if there
    /// is no leader.
    Leader {
        name: OsString,
        /// One JSON object instead: name, token (a string) and value.
        #[arg(long)]
        json: bool,
    },
    /// Print a fresh random cluster key (64 hex digits) for batond.
    ///
    /// `baton keygen > cluster.key && chmod 600 cluster.key`, copy that
    /// file to every node, and start each with `--cluster-key-file
    /// cluster.key`.
    Keygen,
    /// Print a completion script for SHELL on stdout, generated from
    /// baton's own command line. For bash: `baton completions bash >
    /// ~/.local/share/bash-completion/completions/baton`.
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Print baton's man page (roff) on stdout: `baton man >
    /// ~/.cargo/share/man/man1/baton.1` (man looks beside ~/.cargo/bin), then
    /// `man baton`.
    Man,
}

/// What `baton member` does.
#[derive(Debug, Subcommand)]
pub enum MemberAction {
    /// Every member: ADDR MEMBERSHIP (voter or learner) ID.
    List {
        /// One JSON array instead.
        #[arg(long)]
        json: bool,
    },
    /// Add the node at ADDR (its client address, as it will be known):
    /// a learner first, then a voter once it has caught up with the log.
    /// Start it first with `batond --mode raft --join`. If it has not
    /// caught up when --timeout runs out, it is removed again (the
    /// membership is as before) and baton exits 3. Warns when the change
    /// leaves an even number of voters.
    Add {
        addr: String,
        /// How long to wait for the new node to catch up (any length).
        #[arg(long, default_value = "60", value_parser = parse_seconds)]
        timeout: Duration,
    },
    /// Remove the node at ADDR from the membership (it may be down). To
    /// replace a node's disk: remove it, wipe it, start it with --join,
    /// add it again.
    Remove { addr: String },
}
