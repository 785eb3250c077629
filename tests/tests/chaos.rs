//! Chaos: real `batond` processes under a seeded random schedule of kill -9,
//! SIGSTOP/SIGCONT, graceful stops and restarts, with clients on every
//! node, and a history checker: unique tokens,
//! tokens rising in real time, no overlapping holds where the mode promises
//! it, every request answered in time, every acknowledged release applied.
//!
//! `CHAOS_SECS` (default 8) sets how long the faults go on, `CHAOS_SEED`
//! replays a run's schedule; a failure prints both and the command to
//! replay it. A longer soak: `CHAOS_SECS=120 cargo test -p baton-tests
//! --test chaos -- --nocapture`.
//!
//! The fenced mode (`priority_cluster_fenced_postgres`) also has every
//! holder write to a real PostgreSQL through baton-fence-sql, late writes
//! of holders whose lease lapsed included, and checks that no row ever
//! took a lower fence than it had (see `chaos_support`).

mod chaos_support;

use std::sync::Arc;

use baton_tests::chaos::fleet::Mode;
use baton_tests::chaos::run::{run, Config};
use baton_tests::databases::DbServer;
use chaos_support::PgFencedTable;
use tokio::sync::Mutex;

/// One fleet at a time: the schedule's timings mean little on a machine
/// that also runs three other clusters.
static SERIAL: Mutex<()> = Mutex::const_new(());

async fn chaos(mode: Mode, test: &str) {
    let _serial = SERIAL.lock().await;
    let report = run(Config::from_env(mode, test)).await;
    println!("{}", report.summary());
    assert!(report.passed(), "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_node() {
    chaos(Mode::Single, "single_node").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_node_with_data_dir() {
    chaos(Mode::SingleDataDir, "single_node_with_data_dir").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn priority_cluster() {
    chaos(Mode::Priority, "priority_cluster").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raft_cluster() {
    chaos(Mode::Raft, "raft_cluster").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn priority_cluster_fenced_postgres() {
    let _serial = SERIAL.lock().await;
    let Some(server) = DbServer::postgres() else {
        return;
    };
    let table = Arc::new(PgFencedTable::new(server).await);
    let test = "priority_cluster_fenced_postgres";
    let mut config = Config::from_env(Mode::Priority, test);
    config.fenced = Some(table.clone());
    let report = run(config).await;
    println!("{}", report.summary());
    assert!(report.passed(), "{report}");
    println!("{}", table.check().await);
}
