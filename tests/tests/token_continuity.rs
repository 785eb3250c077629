//! A whole priority cluster stopped the instant a grant was answered (kill
//! -9, SIGTERM, or kill -9 with every data directory wiped) and started
//! again issues tokens above the answered one. priority_data_dir.rs kills
//! a cluster that had time to replicate and save; here nothing had time:
//! the answered token may be on no disk and no standby, and only the token
//! floor's margins and the wall clock keep the next ones above it.

use std::time::Duration;

use baton_tests::cluster::Cluster;
use baton_tests::{grant_token, LineClient};

/// Longest a restarted cluster may take to agree on an active, on a
/// loaded machine.
const SETTLE: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, Copy)]
enum Stop {
    Kill,
    Terminate,
    KillAndWipe,
}

// A known bug, not yet fixed: each quick restart with saved tokens starts
// the floor at the saved token plus a margin, above the wall clock; a
// cluster wiped and rebuilt before the clock catches up with that lead
// starts from the clock alone and grants below the last token (seen once
// under load: 11.7 ms of clock below). Run it with `--ignored`; it is to
// pass, unignored, once a restart waits out a small lead before serving.
#[ignore = "known bug: a priority cluster rebuilt from wiped data directories within the restart margins' lead over the clock can grant below an earlier token"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_priority_cluster_stopped_whole_right_after_a_grant_never_reissues_below_it() {
    let base = tempfile::tempdir().expect("temp dir");
    let dirs: Vec<_> = (0..3)
        .map(|i| base.path().join(format!("node-{i}")))
        .collect();
    let args: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    let mut cluster = Cluster::start_each(3, |i| vec!["--data-dir".into(), args[i].clone()]);
    let mut answered = 0;
    for (round, stop) in [Stop::Kill, Stop::Terminate, Stop::KillAndWipe, Stop::Kill]
        .into_iter()
        .enumerate()
    {
        let active = cluster.wait_single_active(SETTLE).await;
        let mut client = LineClient::connect(cluster.addr(active)).await;
        let key = format!("round-{round}");
        let token = grant_token(&client.request(&format!("A {key} 0 600")).await, &key);
        assert!(
            token > answered,
            "{stop:?} before round {round}: token {token} not above {answered}"
        );
        answered = token;
        for i in 0..3 {
            match stop {
                Stop::Kill | Stop::KillAndWipe => cluster.kill(i),
                Stop::Terminate => assert!(cluster.terminate(i).success(), "node {i} exit"),
            }
        }
        if let Stop::KillAndWipe = stop {
            for dir in &dirs {
                std::fs::remove_dir_all(dir).expect("wipe a data directory");
            }
        }
        for i in 0..3 {
            cluster.restart(i);
        }
    }
    let active = cluster.wait_single_active(SETTLE).await;
    let mut client = LineClient::connect(cluster.addr(active)).await;
    let token = grant_token(&client.request("A last 0 10").await, "last");
    assert!(token > answered, "token {token} not above {answered}");
}
