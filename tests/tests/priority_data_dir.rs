//! Priority cluster with `--data-dir`: the state survives a restart of
//! every node at once (issue 4's optional data directory).

mod priority_support;

use baton_tests::cluster::Cluster;
use baton_tests::LineClient;

use priority_support::{assert_held, grant, release, SERIAL, SETTLE};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_restart_with_data_dirs_keeps_held_locks_and_rising_tokens() {
    let _serial = SERIAL.lock().await;
    let base = tempfile::tempdir().expect("temp dir");
    let dirs: Vec<String> = (0..3)
        .map(|i| base.path().join(format!("node-{i}")).display().to_string())
        .collect();
    let mut cluster = Cluster::start_each(3, |i| vec!["--data-dir".into(), dirs[i].clone()]);
    cluster.wait_active(0, SETTLE).await;
    let mut client = cluster.client(0);
    let mut held = Vec::new();
    for i in 0..3 {
        let key = format!("durable/{i}");
        let (token, _) = grant(&mut client, &key, "1", "600").await;
        held.push((key, token));
    }
    let before = held.iter().map(|(_, t)| *t).max().unwrap_or(0);
    // Longer than the write interval and a heartbeat: every node has it.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    for i in 0..3 {
        cluster.kill(i);
    }
    for i in 0..3 {
        cluster.restart(i);
    }
    let active = cluster.wait_single_active(SETTLE).await;
    let mut c = LineClient::connect(cluster.addr(active)).await;
    for (key, token) in &held[..2] {
        assert_held(&mut c, key, *token).await;
    }
    let (key, token) = &held[2];
    release(&mut c, key, *token).await;
    let mut client = cluster.client(active);
    let (after, _) = grant(&mut client, "durable/new", "1", "10").await;
    assert!(
        after > before,
        "token {after} after the restart, {before} before"
    );
}
