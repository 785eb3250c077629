//! Priority cluster with `--data-dir`: the state survives a restart of
//! every node at once (the data directory is optional); a directory the
//! node cannot write is refused at start, and an active whose state can no
//! longer be saved stops and hands over.

mod data_dir_support;
mod priority_support;

use std::time::Duration;

use baton_tests::cluster::Cluster;
use baton_tests::{free_addr, LineClient};

use data_dir_support::{exit_line, start_fails, wait_on_disk};
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

/// Being root, the tests cannot take write permission away; a directory
/// where the state's temporary file goes makes every write of it fail.
fn block_state_writes(dir: &std::path::Path) -> std::path::PathBuf {
    let tmp = dir.join("priority-state.tmp");
    std::fs::create_dir_all(&tmp).expect("create the blocking directory");
    tmp
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_dir_the_node_cannot_write_is_refused_at_start() {
    let base = tempfile::tempdir().expect("temp dir");
    let dir = base.path().join("node");
    let tmp = block_state_writes(&dir);
    let addr = free_addr().to_string();
    let dir_arg = dir.display().to_string();
    let (_, stderr) = start_fails(&[
        "--listen",
        &addr,
        "--mode",
        "priority",
        "--peers",
        &addr,
        "--data-dir",
        &dir_arg,
    ]);
    let line = exit_line(&stderr);
    assert!(
        line.contains(&tmp.display().to_string()),
        "the refusal should name {}: {line}",
        tmp.display()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_active_whose_state_cannot_be_saved_stops_and_a_standby_takes_over() {
    let _serial = SERIAL.lock().await;
    let base = tempfile::tempdir().expect("temp dir");
    let dirs: Vec<std::path::PathBuf> = (0..2)
        .map(|i| base.path().join(format!("node-{i}")))
        .collect();
    let mut cluster = Cluster::start_each(2, |i| {
        vec!["--data-dir".into(), dirs[i].display().to_string()]
    });
    cluster.wait_active(0, SETTLE).await;
    let mut client = cluster.client(0);
    let (saved, _) = grant(&mut client, "saved", "1", "600").await;
    wait_on_disk(&dirs[0].join("priority-state"), b"saved").await;
    let tmp = block_state_writes(&dirs[0]);
    // The next change cannot be saved: the node must stop granting.
    let blocked = std::time::Instant::now();
    let (unsaved, _) = grant(&mut client, "unsaved", "1", "600").await;
    let exit = cluster
        .node_mut(0)
        .wait_exit(Duration::from_secs(10))
        .expect("the active whose state cannot be saved still runs 10 s later");
    println!(
        "the active exited {:?} after its first unsaved change",
        blocked.elapsed()
    );
    let log = cluster.node_mut(0).log_tail(200);
    assert_eq!(exit.code(), Some(1), "{log}");
    let line = exit_line(&log);
    assert!(
        line.contains(&tmp.display().to_string()),
        "the exit line should name {}: {line}",
        tmp.display()
    );
    // It handed over: the standby serves, with both locks.
    cluster.wait_active(1, SETTLE).await;
    let mut c = LineClient::connect(cluster.addr(1)).await;
    assert_held(&mut c, "saved", saved).await;
    assert_held(&mut c, "unsaved", unsaved).await;
    let mut client = cluster.client(1);
    let (after, _) = grant(&mut client, "after", "1", "10").await;
    assert!(
        after > unsaved,
        "token {after} after the takeover, {unsaved} before"
    );
}
