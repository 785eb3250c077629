//! What a Raft leader's log says, and how often it dials, while a follower
//! is down: one line per interval about that peer, by address, with no
//! library debug dumps, and redials spaced out (capped exponential
//! back-off) rather than one per heartbeat; and at its graceful stop, the
//! lead handed to the live follower, named by address.

use std::time::Duration;

use baton_tests::raft::{RaftCluster, SERIAL, SETTLE};
use tokio::time::Instant;

/// The peer log's interval (`peer still unreachable` once per this).
const SUMMARY_INTERVAL: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_follower_is_one_line_per_interval_and_redialled_with_back_off() {
    let _serial = SERIAL.lock().await;
    let mut cluster = RaftCluster::start(3);
    let (leader, _) = cluster.wait_leader(SETTLE).await;
    let dead = (leader + 1) % 3;
    let dead_addr = cluster.peers[dead];
    let before = cluster.nodes[leader].log_tail(100_000).lines().count();
    cluster.nodes[dead].kill();

    // Two intervals and a bit: the first line and two summaries.
    tokio::time::sleep(SUMMARY_INTERVAL * 2 + Duration::from_secs(2)).await;
    let log = cluster.nodes[leader].log_tail(100_000);
    let warnings: Vec<&str> = log
        .lines()
        .skip(before)
        .filter(|l| l.contains(" WARN "))
        .collect();
    let peer = format!("peer={dead_addr}");
    assert!(
        warnings.iter().all(|l| l.contains(&peer)),
        "every warning is about the dead peer, by address: {warnings:#?}"
    );
    assert!(
        warnings
            .iter()
            .all(|l| !l.contains("openraft") && !l.contains('{')),
        "no library line or debug dump: {warnings:#?}"
    );
    assert!(
        (1..=4).contains(&warnings.len()),
        "about one line per {SUMMARY_INTERVAL:?}: {warnings:#?}"
    );

    // Something at the dead node's address that takes connections and
    // closes them: each dial is one accept. The back-off is at its cap
    // by now: about one a second.
    let listener = tokio::net::TcpListener::bind(dead_addr)
        .await
        .unwrap_or_else(|e| panic!("bind {dead_addr}: {e}"));
    let window = Duration::from_secs(5);
    let until = Instant::now() + window;
    let mut dials = 0;
    while let Ok(Ok((stream, _))) = tokio::time::timeout_at(until, listener.accept()).await {
        drop(stream);
        dials += 1;
    }
    assert!(
        (1..=8).contains(&dials),
        "{dials} dials in {window:?} (one per heartbeat would be about 100)"
    );

    // A graceful stop hands the lead to the follower that answers, named
    // by address, not to the dead one with as much of the log.
    drop(listener);
    let live = cluster.peers[(leader + 2) % 3];
    let stopped = cluster.nodes[leader].terminate();
    assert!(stopped.success(), "{stopped:?}");
    let log = cluster.nodes[leader].log_tail(100_000);
    let after_kill: Vec<&str> = log.lines().skip(before).collect();
    assert!(
        after_kill
            .iter()
            .any(|l| l.contains(&format!("handed over the lead to {live}"))),
        "{after_kill:#?}"
    );
    assert!(
        after_kill.iter().all(|l| !l.contains("openraft")),
        "{after_kill:#?}"
    );
}
