//! A single node restarted, by SIGTERM or kill -9, with or without a data
//! directory, issues tokens above every token it issued before; with a
//! data directory it also keeps its held locks.

mod data_dir_support;

use baton_tests::{grant_token, status_u64, Batond, LineClient};

use data_dir_support::wait_on_disk;

async fn grant(c: &mut LineClient, key: &str, lease: &str) -> u64 {
    grant_token(&c.request(&format!("A {key} 0 {lease}")).await, key)
}

/// The key is still held: an acquire with a short wait times out.
async fn assert_held(c: &mut LineClient, key: &str) {
    assert_eq!(
        c.request(&format!("A {key} 0.2 60")).await,
        format!("T {key}"),
        "{key} should still be held after the restart"
    );
}

async fn release(c: &mut LineClient, key: &str, token: u64) {
    assert_eq!(
        c.request(&format!("R {key} {token}")).await,
        format!("R {key}"),
        "releasing {key} with its token {token} after the restart"
    );
}

/// After a restart, `S` and the first grant are above `before`.
async fn assert_above(node: &Batond, before: u64, how: &str) -> u64 {
    let mut c = node.connect().await;
    let floor = status_u64(&c.status().await, "token");
    assert!(
        floor >= before,
        "after {how}, token={floor} in S is below the {before} issued before"
    );
    let token = grant(&mut c, &format!("after-{how}"), "30").await;
    assert!(
        token > before,
        "after {how}, token {token} is not above the {before} issued before"
    );
    token
}

#[tokio::test]
async fn tokens_rise_across_sigterm_and_kill_9_without_a_data_dir() {
    let mut node = Batond::start(&[]);
    let mut c = node.connect().await;
    let mut last = 0;
    for i in 0..5 {
        let token = grant(&mut c, &format!("k{i}"), "30").await;
        assert!(token > last);
        last = token;
    }
    drop(c);
    assert!(node.terminate().success());
    node.restart();
    let last = assert_above(&node, last, "SIGTERM").await;
    node.kill();
    node.restart();
    assert_above(&node, last, "kill-9").await;
}

#[tokio::test]
async fn a_data_dir_keeps_held_locks_and_tokens_across_sigterm_and_kill_9() {
    let base = tempfile::tempdir().expect("temp dir");
    let dir = base.path().join("node");
    let state = dir.join("single-state");
    let dir_arg = dir.display().to_string();
    let mut node = Batond::start(&["--data-dir", &dir_arg]);
    let mut c = node.connect().await;
    let mut held = Vec::new();
    for i in 0..3 {
        let key = format!("held/{i}");
        held.push((key.clone(), grant(&mut c, &key, "600").await));
    }
    let last = held[2].1;
    drop(c);

    // A graceful stop writes the final state.
    assert!(node.terminate().success());
    node.restart();
    let mut c = node.connect().await;
    assert_eq!(status_u64(&c.status().await, "locks"), 3);
    assert_held(&mut c, "held/0").await;
    release(&mut c, "held/1", held[1].1).await;
    let last = assert_above(&node, last, "SIGTERM").await;

    // kill -9 keeps what the periodic write had put on disk...
    let late = grant(&mut c, "late", "600").await;
    wait_on_disk(&state, b"late").await;
    // ...and a grant it had not yet written is still below the next floor.
    let unsaved = grant(&mut c, "unsaved", "600").await;
    assert!(late > last && unsaved > late);
    drop(c);
    node.kill();
    node.restart();
    let mut c = node.connect().await;
    assert_held(&mut c, "held/0").await;
    assert_held(&mut c, "late").await;
    release(&mut c, "held/2", held[2].1).await;
    release(&mut c, "late", late).await;
    assert_above(&node, unsaved, "kill-9").await;
}
