//! Real clusters whose serving node is frozen (SIGSTOP): it keeps its
//! sockets open and answers nothing. The client gives its connection up
//! within 4 s (the default `unresponsive_after`), a fresh acquire with a
//! 5 s wait is granted by the new serving node, and a keep-alive lock with
//! a 10 s lease is renewed elsewhere in time.

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test

mod common;

use baton_client::Client;
use baton_tests::frozen::{ClusterMode, FreezableCluster};
use baton_tests::raft::SERIAL;
use common::secs;
use tokio::time::Instant;

async fn ride_out_a_frozen_serving_node(mode: ClusterMode) {
    let _one_cluster_at_a_time = SERIAL.lock().await;
    let mut cluster = FreezableCluster::start(mode);
    let serving = cluster.wait_serving(secs(15)).await;
    let client = Client::builder()
        .servers(cluster.peers().iter().map(ToString::to_string))
        .build()
        .await
        .unwrap();
    let mut held = client
        .acquire("frozen/held", secs(5), secs(10))
        .await
        .unwrap();
    held.keep_alive();
    // A priority cluster replicates after the grant: wait until it has.
    cluster.wait_token_everywhere(held.token(), secs(5)).await;

    let stopped_at = Instant::now();
    cluster.freeze(serving);
    // One acquire per connection, one after the other: round-robin sends
    // one of them to the frozen node first.
    let mut fresh = Vec::new();
    for i in 0..3 {
        let key = format!("frozen/fresh/{i}");
        let started = Instant::now();
        let guard = client
            .acquire(&key, secs(5), secs(10))
            .await
            .unwrap_or_else(|err| panic!("{mode:?}: {key}: {err}"));
        eprintln!(
            "{mode:?}: {key} granted {:?} after its request, {:?} after SIGSTOP",
            started.elapsed(),
            stopped_at.elapsed()
        );
        assert!(guard.token() > held.token());
        fresh.push(guard);
    }
    eprintln!(
        "{mode:?}: every acquire granted {:?} after SIGSTOP",
        stopped_at.elapsed()
    );

    // The keep-alive lock is not declared lost, past the end its lease
    // would have had without renewals...
    tokio::select! {
        lost = held.lost() => panic!("{mode:?}: {lost} after {:?}", stopped_at.elapsed()),
        () = tokio::time::sleep_until(stopped_at + secs(12)) => {}
    }
    // ... and the serving node still has it.
    held.renew(secs(10)).await.unwrap();
    for guard in fresh {
        guard.release().await.unwrap();
    }
    held.release().await.unwrap();
    client.close().await.unwrap();
    cluster.resume_all();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_priority_cluster_with_a_frozen_active_keeps_serving_the_client() {
    ride_out_a_frozen_serving_node(ClusterMode::Priority).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raft_cluster_with_a_frozen_leader_keeps_serving_the_client() {
    ride_out_a_frozen_serving_node(ClusterMode::Raft).await;
}
