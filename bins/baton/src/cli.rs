//! The command line: subcommands, options and the help text.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};

use crate::exit;
use crate::seconds::parse_seconds;

/// Command-line client for Baton lock servers.
///
/// Durations are seconds with at most 3 decimals (`30`, `0.5`); a wait of 0
/// waits as long as the node allows (its maximum wait).
#[derive(Debug, Parser)]
#[command(name = "baton", version, after_help = exit::HELP)]
pub struct Cli {
    /// Node addresses, comma separated (host:port).
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

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Wait for the lock and print its token. The lock stays held after
    /// baton exits, until released or until the lease runs out.
    Acquire {
        key: OsString,
        /// How long to wait for the lock (0: as long as the node allows).
        #[arg(long, default_value = "0", value_parser = parse_seconds)]
        wait: Duration,
        /// How long the grant lasts unless renewed.
        #[arg(long, default_value = "30", value_parser = parse_seconds)]
        lease: Duration,
    },
    /// Release the grant of KEY with TOKEN.
    Release { key: OsString, token: u64 },
    /// Extend the grant of KEY with TOKEN to end LEASE seconds from now.
    Renew {
        key: OsString,
        token: u64,
        #[arg(long, value_parser = parse_seconds)]
        lease: Duration,
    },
    /// Show every node: address, role, active node, last token, locks, waiters.
    Status,
    /// Show who holds KEY: `KEY token=<t> lease=<seconds left> waiters=<n>`,
    /// or `token=- lease=-` while it is free (the protocol's `Q`).
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
    /// is lost, the command is terminated and baton exits 7.
    Run {
        key: OsString,
        /// How long to wait for the lock (0: as long as the node allows).
        #[arg(long, default_value = "0", value_parser = parse_seconds)]
        wait: Duration,
        /// Lease, renewed every third of it while the command runs.
        #[arg(long, default_value = "30", value_parser = parse_seconds)]
        lease: Duration,
        /// The command and its arguments, after `--`.
        #[arg(last = true, required = true, value_name = "CMD")]
        command: Vec<OsString>,
    },
    /// Print a fresh random cluster key (64 hex digits) for batond.
    ///
    /// `baton keygen > cluster.key && chmod 600 cluster.key`, copy that
    /// file to every node, and start each with `--cluster-key-file
    /// cluster.key`.
    Keygen,
}
