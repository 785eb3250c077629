//! A data directory that fails or lies: a write past the file-size limit,
//! a state file whose tokens no node can have issued, one written in a
//! layout this node does not know. In each the node refuses to start with
//! one line naming the file, or stops with one; it never grants a token
//! it could not save, nor starts on a floor below what it answered before.

mod data_dir_support;

use std::path::Path;
use std::time::Duration;

use baton_cluster::raft::storage::snapshot_store::{decode_table, encode_table, SnapshotStore};
use baton_core::TableSnapshot;
use baton_server::{durable, token_floor, SingleState, StateFile, SINGLE_STATE_FILE};
use baton_tests::raft::RaftCluster;
use baton_tests::{grant_token, peer_list, Batond};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use data_dir_support::{exit_line, start_fails};

/// Bigger than everything the node logs in these tests, smaller than the
/// state of the locks they take: only the state's write goes past it.
const FILE_SIZE_LIMIT: u64 = 64 * 1024;

/// Longest key the protocol takes, so that a few hundred locks outgrow
/// [`FILE_SIZE_LIMIT`].
const KEY_BYTES: usize = 240;

/// At most this many acquires before the state outgrows the limit
/// (each lock takes over `KEY_BYTES` of it).
const MAX_ACQUIRES: usize = 2 * FILE_SIZE_LIMIT as usize / KEY_BYTES;

fn key(i: usize) -> String {
    format!("{i:0>KEY_BYTES$}")
}

/// Sets the file-size limit (RLIMIT_FSIZE, `ulimit -f`) of a running node.
fn limit_file_size(node: &Batond, bytes: u64) {
    let pid = i32::try_from(node.pid()).expect("pid fits a pid_t");
    rlimit::prlimit(pid, rlimit::Resource::FSIZE, Some((bytes, bytes)), None)
        .expect("set the node's file-size limit");
}

/// Acquires keys of [`KEY_BYTES`] until the node stops granting (it
/// closes the connection, or answers anything else); the highest token it
/// answered.
async fn acquire_until_refused(node: &Batond) -> u64 {
    let stream = tokio::net::TcpStream::connect(node.addr())
        .await
        .expect("connect");
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read).lines();
    let mut answered = 0;
    for i in 0..MAX_ACQUIRES {
        let request = format!("A {} 0 600\n", key(i));
        if write.write_all(request.as_bytes()).await.is_err() {
            break;
        }
        match tokio::time::timeout(Duration::from_secs(5), lines.next_line()).await {
            Ok(Ok(Some(answer))) if answer.starts_with("A ") => {
                answered = answered.max(grant_token(&answer, &key(i)));
            }
            _ => break,
        }
    }
    answered
}

#[tokio::test]
async fn a_write_past_the_file_size_limit_stops_the_node_with_a_line_not_a_signal() {
    let base = tempfile::tempdir().expect("temp dir");
    let dir = base.path().join("node");
    let dir_arg = dir.display().to_string();
    let mut node = Batond::start(&["--data-dir", &dir_arg]);
    limit_file_size(&node, FILE_SIZE_LIMIT);
    let answered = acquire_until_refused(&node).await;
    assert!(answered > 0, "no acquire was granted before the limit");
    let exit = node
        .wait_exit(Duration::from_secs(10))
        .expect("a node whose state outgrew the file-size limit still runs 10 s later");
    let log = node.log_tail(100);
    assert_eq!(
        exit.code(),
        Some(1),
        "killed by SIGXFSZ instead of exiting 1?\n{log}"
    );
    let line = exit_line(&log);
    assert!(line.contains("single-state"), "{line}");
    // Restarted without the limit, it grants above everything it answered.
    node.restart();
    let mut c = node.connect().await;
    let after = grant_token(&c.request("A after 0 10").await, "after");
    assert!(after > answered, "token {after} not above {answered}");
}

/// Writes a single node's state file in `dir` as a node would, holding
/// `last_token`, then lets `edit` change its body (the checksum is
/// recomputed, so the file is not merely damaged).
fn write_state(dir: &Path, last_token: u64, edit: impl FnOnce(&mut Vec<u8>)) {
    let file = StateFile::<SingleState>::open(dir, SINGLE_STATE_FILE).expect("open state");
    let table = TableSnapshot {
        last_token,
        locks: Vec::new(),
    };
    file.store(&SingleState { table }).expect("store state");
    let path = dir.join(SINGLE_STATE_FILE);
    let bytes = std::fs::read(&path).expect("read state");
    let mut body = durable::checked(&bytes).expect("a sound file").to_vec();
    edit(&mut body);
    let mut edited = durable::checksum(&[&body]).to_vec();
    edited.extend_from_slice(&body);
    std::fs::write(&path, edited).expect("write state");
}

/// Starts a single node on `dir`, which must refuse with one line naming
/// the state file and saying `why`.
fn assert_refused(dir: &Path, why: &str) {
    let dir_arg = dir.display().to_string();
    let (status, stderr) = start_fails(&["--listen", "127.0.0.1:0", "--data-dir", &dir_arg]);
    assert_eq!(status.code(), Some(1), "{stderr}");
    let line = exit_line(&stderr);
    assert!(
        line.contains(&dir.join(SINGLE_STATE_FILE).display().to_string()) && line.contains(why),
        "the refusal should name the state file and say `{why}`: {line}"
    );
}

#[tokio::test]
async fn a_saved_token_near_the_end_of_the_space_is_refused_one_above_the_clock_honoured() {
    // Near the end of the space no token is left to grant: the node used
    // to start there and queue every acquire until its wait ran out.
    for saved in [u64::MAX - 2, token_floor::TOKEN_CEILING] {
        let base = tempfile::tempdir().expect("temp dir");
        write_state(base.path(), saved, |_| {});
        assert_refused(base.path(), &format!("token {saved} is at or beyond"));
    }
    // A token two hours above the clock is what a clock set back leaves:
    // the saved token is all that keeps the next ones above it.
    let base = tempfile::tempdir().expect("temp dir");
    let ahead = token_floor::wall_floor(token_floor::wall_clock_ms() + 2 * 3_600_000);
    write_state(base.path(), ahead, |_| {});
    let dir_arg = base.path().display().to_string();
    let node = Batond::start(&["--data-dir", &dir_arg]);
    let mut c = node.connect().await;
    let token = grant_token(&c.request("A k 0 10").await, "k");
    assert!(token > ahead, "token {token} not above the saved {ahead}");
}

#[tokio::test]
async fn a_state_file_in_a_layout_this_node_does_not_know_is_refused() {
    // A newer batond's file: what this node reads of it is sound, and
    // more follows. Read as far as it goes, it would give a floor of 5.
    let base = tempfile::tempdir().expect("temp dir");
    write_state(base.path(), 5, |body| {
        body.extend_from_slice(&u64::MAX.to_le_bytes());
    });
    assert_refused(base.path(), "written by a newer batond");
}

/// Waits (bounded) until the Raft node on `dir` has written a snapshot.
async fn wait_snapshot(dir: &Path) -> SnapshotStore {
    let store = SnapshotStore::new(&dir.join("snapshot")).expect("snapshot store");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !store.path().exists() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no snapshot in {} after 20 s",
            dir.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    store
}

/// A Raft cluster that granted a few locks, every node killed once node 0
/// has written a snapshot; node 0's snapshot store.
async fn raft_cluster_with_a_snapshot() -> (RaftCluster, SnapshotStore) {
    let mut cluster = RaftCluster::start_with(3, &["--snapshot-every", "4"]);
    let (leader, _) = cluster.wait_leader(Duration::from_secs(30)).await;
    let mut client = baton_tests::LineClient::connect(cluster.peers[leader]).await;
    for i in 0..8 {
        let key = format!("k{i}");
        grant_token(&client.request(&format!("A {key} 0 600")).await, &key);
    }
    let store = wait_snapshot(cluster.dirs[0].path()).await;
    for node in &mut cluster.nodes {
        node.kill();
    }
    (cluster, store)
}

/// Starts node 0 of `cluster` again, which must refuse; its one line.
fn node_0_refuses(cluster: &RaftCluster) -> String {
    let dir = cluster.dirs[0].path().display().to_string();
    let listen = cluster.peers[0].to_string();
    let peers = peer_list(&cluster.peers);
    let args = [
        "--listen",
        &listen,
        "--mode",
        "raft",
        "--peers",
        &peers,
        "--data-dir",
        &dir,
    ];
    let (status, stderr) = start_fails(&args);
    assert!(!status.success(), "{stderr}");
    exit_line(&stderr).to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raft_snapshot_near_the_end_of_the_token_space_is_refused() {
    let (cluster, store) = raft_cluster_with_a_snapshot().await;
    // The table as a bad disk (or a forger with a checksum) leaves it.
    let stored = store.load().expect("read").expect("a snapshot");
    let mut table = decode_table(&stored.data).expect("decode the table");
    table.last_token = u64::MAX - 2;
    let data = encode_table(&table).expect("encode the table");
    store
        .save_parts(&stored.meta, &data)
        .expect("write the snapshot");
    let line = node_0_refuses(&cluster);
    assert!(
        line.contains(&store.path().display().to_string())
            && line.contains(&format!("token {} is at or beyond", u64::MAX - 2)),
        "the refusal should name the snapshot and its token: {line}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raft_log_lost_beside_its_snapshot_is_refused() {
    // Every segment zeroed (or deleted): the node used to start with no
    // vote beside a snapshot of term 1. Were every node so, each refused
    // the others' messages as implausible, and no leader was ever elected.
    let (cluster, _store) = raft_cluster_with_a_snapshot().await;
    let log = cluster.dirs[0].path().join("log");
    for segment in std::fs::read_dir(&log).expect("read the log directory") {
        let path = segment.expect("dir entry").path();
        let len = std::fs::metadata(&path).expect("segment size").len();
        let zeros = vec![0; usize::try_from(len).expect("fits")];
        std::fs::write(&path, zeros).expect("zero a segment");
    }
    let line = node_0_refuses(&cluster);
    assert!(
        line.contains(&log.display().to_string()) && line.contains("missing or damaged"),
        "the refusal should name the log and say it is damaged: {line}"
    );
}
