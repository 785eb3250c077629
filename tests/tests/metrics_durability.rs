//! The metrics added for durability and endings, scraped from real
//! `batond` processes: `baton_fsync_seconds` for the state file of a
//! single node and the log of a Raft node, the hold time of a grant that
//! ends by expiry, and a priority node's graceful handoffs given and taken.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use baton_tests::cluster::Cluster;
use baton_tests::http::{http_get, Scrape};
use baton_tests::raft::{RaftCluster, SERIAL};
use baton_tests::{free_addr, free_addrs, grant_token, Batond};

async fn scrape(addr: SocketAddr) -> Scrape {
    let reply = http_get(addr, "/metrics", None).await;
    assert_eq!(reply.code, 200, "{reply:?}");
    Scrape::parse(&reply.body)
}

/// Scrapes `addr` until `accept` holds, for at most `within`.
async fn wait_scrape(
    addr: SocketAddr,
    within: Duration,
    accept: impl Fn(&Scrape) -> bool,
) -> Scrape {
    let deadline = Instant::now() + within;
    loop {
        let s = scrape(addr).await;
        if accept(&s) {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "not as expected within {within:?}: {:?}",
            s.samples
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn sample(s: &Scrape, series: &str) -> f64 {
    s.samples.get(series).copied().unwrap_or(0.0)
}

#[tokio::test]
async fn state_file_syncs_are_timed() {
    let http = free_addr();
    let data = tempfile::tempdir().expect("dir");
    let data_dir = data.path().to_str().expect("utf-8");
    let node = Batond::start(&["--data-dir", data_dir, "--http-listen", &http.to_string()]);
    let mut client = node.connect().await;
    let token = grant_token(&client.request("A synced 1 30").await, "synced");
    let s = wait_scrape(http, Duration::from_secs(10), |s| {
        sample(s, "baton_fsync_seconds_count{store=\"state_file\"}") >= 1.0
    })
    .await;
    assert_eq!(
        s.types.get("baton_fsync_seconds").map(String::as_str),
        Some("histogram")
    );
    let inf = s.get("baton_fsync_seconds_bucket{store=\"state_file\",le=\"+Inf\"}");
    assert_eq!(
        inf,
        s.get("baton_fsync_seconds_count{store=\"state_file\"}")
    );
    assert_eq!(s.get("baton_fsync_seconds_count{store=\"raft_log\"}"), 0.0);
    client.request(&format!("R synced {token}")).await;
}

#[tokio::test]
async fn raft_log_syncs_are_timed() {
    let _one_cluster_at_a_time = SERIAL.lock().await;
    let http = free_addrs(3).expect("ports");
    let mut cluster =
        RaftCluster::start_each(3, |i| vec!["--http-listen".into(), http[i].to_string()]);
    let (leader, _) = cluster.wait_leader(Duration::from_secs(10)).await;
    let mut client = cluster.nodes[leader].connect().await;
    grant_token(&client.request("A logged 1 30").await, "logged");
    let s = wait_scrape(http[leader], Duration::from_secs(10), |s| {
        sample(s, "baton_fsync_seconds_count{store=\"raft_log\"}") >= 1.0
    })
    .await;
    assert!(s.get("baton_fsync_seconds_sum{store=\"raft_log\"}") >= 0.0);
}

#[tokio::test]
async fn a_grant_that_expires_counts_in_the_hold_time() {
    let http = free_addr();
    let node = Batond::start(&["--http-listen", &http.to_string()]);
    let mut client = node.connect().await;
    grant_token(&client.request("A brief 1 0.3").await, "brief");
    let s = wait_scrape(http, Duration::from_secs(10), |s| {
        sample(s, "baton_expiries_total") >= 1.0 && sample(s, "baton_hold_seconds_count") >= 1.0
    })
    .await;
    assert_eq!(s.get("baton_hold_seconds_count"), 1.0);
    let held = s.get("baton_hold_seconds_sum");
    assert!(
        (0.29..0.4).contains(&held),
        "held {held} s for a 0.3 s lease"
    );
    assert_eq!(s.get("baton_releases_total"), 0.0);
}

#[tokio::test]
async fn priority_handoffs_given_and_taken_are_counted() {
    let _one_cluster_at_a_time = SERIAL.lock().await;
    let http = free_addrs(2).expect("ports");
    let mut cluster = Cluster::start_each(2, |i| vec!["--http-listen".into(), http[i].to_string()]);
    let active = cluster.wait_single_active(Duration::from_secs(10)).await;
    let other = 1 - active;
    let s = scrape(http[other]).await;
    assert_eq!(s.get("baton_handoffs_total{direction=\"taken\"}"), 0.0);
    // A graceful stop hands the role to the other node...
    cluster.terminate(active);
    wait_scrape(http[other], Duration::from_secs(10), |s| {
        sample(s, "baton_handoffs_total{direction=\"taken\"}") == 1.0
    })
    .await;
    // ...and a graceful stop of that one hands it back.
    cluster.restart(active);
    cluster.wait_single_active(Duration::from_secs(10)).await;
    let before = scrape(http[other]).await;
    assert_eq!(before.get("baton_handoffs_total{direction=\"given\"}"), 0.0);
    cluster.terminate(other);
    let s = wait_scrape(http[active], Duration::from_secs(10), |s| {
        sample(s, "baton_handoffs_total{direction=\"taken\"}") >= 1.0
    })
    .await;
    assert_eq!(s.get("baton_handoffs_total{direction=\"given\"}"), 0.0);
}
