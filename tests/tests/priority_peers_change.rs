//! A priority cluster's peer list changed by the restart procedure of
//! docs/operations.md, with real processes: the standbys stop first, the
//! active restarts on its data directory with the new list, then every
//! other node starts with it. Held locks and their tokens survive, tokens
//! keep rising, and the new node takes over when its turn comes.

mod priority_support;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use baton_tests::cluster::{field, probe_status, ClusterClient};
use baton_tests::port::{distinct_free_addrs, peer_list};
use baton_tests::{Batond, LineClient};
use tokio::time::Instant;

use priority_support::{assert_held, grant, SERIAL, SETTLE};

fn node(addr: SocketAddr, peers: &[SocketAddr], dir: &Path) -> Batond {
    let list = peer_list(peers);
    let data = dir.display().to_string();
    Batond::start_at(
        addr,
        &["--mode", "priority", "--peers", &list, "--data-dir", &data],
    )
}

/// Polls `S` on `addr` until `accept` holds.
async fn wait_for(addr: SocketAddr, what: &str, accept: impl Fn(&baton_tests::Status) -> bool) {
    let deadline = Instant::now() + SETTLE;
    loop {
        let status = probe_status(addr, Duration::from_millis(500)).await;
        if status.as_ref().is_some_and(&accept) {
            return;
        }
        assert!(Instant::now() < deadline, "{addr} not {what}: {status:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_is_added_to_the_peer_list_by_restarting_standbys_first() {
    let _serial = SERIAL.lock().await;
    let addrs = distinct_free_addrs(3);
    let base = tempfile::tempdir().expect("dir");
    let dirs: Vec<_> = (0..3).map(|i| base.path().join(format!("n{i}"))).collect();
    let old = &addrs[..2];
    let mut a = node(addrs[0], old, &dirs[0]);
    let mut b = node(addrs[1], old, &dirs[1]);
    wait_for(addrs[0], "active", |s| field(s, "role") == "active").await;
    let mut client = ClusterClient::new(old.to_vec(), 0);
    let mut held = Vec::new();
    for i in 0..5 {
        let key = format!("roll/{i}");
        let (token, _) = grant(&mut client, &key, "1", "600").await;
        held.push((key, token));
    }
    let before = held.iter().map(|(_, t)| *t).max().unwrap_or(0);
    wait_for(addrs[1], "synced", |s| field(s, "locks") == "5").await;

    // 1. The standby stops. 2. The active stops (its data directory keeps
    // the locks) and starts again with the new list.
    assert!(b.terminate().success());
    assert!(a.terminate().success());
    a = node(addrs[0], &addrs, &dirs[0]);
    wait_for(addrs[0], "active again", |s| field(s, "role") == "active").await;
    // 3. The other nodes start with the new list, the new one last.
    b = node(addrs[1], &addrs, &dirs[1]);
    let mut c = node(addrs[2], &addrs, &dirs[2]);
    for addr in &addrs[1..] {
        wait_for(*addr, "a synced standby", |s| {
            field(s, "role") == "standby" && field(s, "locks") == "5"
        })
        .await;
    }
    let mut line = LineClient::connect(addrs[0]).await;
    for (key, token) in &held {
        assert_held(&mut line, key, *token).await;
    }

    // The new list's order is the promotion order: with the first two
    // gone, the new node serves every lock, above every earlier token.
    a.kill();
    b.kill();
    wait_for(addrs[2], "active", |s| field(s, "role") == "active").await;
    let mut line = LineClient::connect(addrs[2]).await;
    for (key, token) in &held {
        assert_held(&mut line, key, *token).await;
    }
    let mut client = ClusterClient::new(addrs.clone(), 2);
    let (after, _) = grant(&mut client, "roll/new", "1", "10").await;
    assert!(after > before, "{after} after {before}");
    c.kill();
}
