//! Black-box tests of the Raft cluster under faults: real
//! `batond --mode raft` nodes on loopback, seen only through the client
//! protocol, signals and their data directories.
//!
//! Covered: a leader cut off from its majority (both followers SIGSTOPped)
//! answers every request within the answer-time rule and steps down,
//! losing nothing it acknowledged; a follower SIGSTOPped and resumed
//! deposes nobody (pre-vote) while keys are handed over behind releases;
//! a follower whose data directory was wiped is repaired by the sitting
//! leader, whose `S` shows each follower's lag; a leader whose storage
//! fails (data directory made immutable, which needs root) exits non-zero
//! with one line and the others take over; forged peer traffic from
//! outside the cluster (a vote of term 2^64 - 2 as a version 1 node took
//! it, and a version 2 hello with a made-up handshake), sent all
//! through an election, changes no node's term and kills no node.
//!
//! Timing-sensitive, so the tests run one at a time and print what they
//! measured.

use std::net::SocketAddr;
use std::time::Duration;

use baton_tests::cluster::{field, probe_status, ClusterClient};
use baton_tests::raft::{grant, release, RaftCluster, REQUEST, SERIAL, SETTLE};
use baton_tests::{status_u64, LineClient, Status};
use tokio::time::Instant;

/// A directory made immutable (`chattr -R +i`, which needs root) until
/// dropped, so that every write into it fails even through open files.
struct Frozen(std::path::PathBuf);

impl Frozen {
    fn new(dir: &std::path::Path) -> Frozen {
        chattr("+i", dir);
        Frozen(dir.to_path_buf())
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        // Lets the temp dir be removed.
        chattr("-i", &self.0);
    }
}

fn chattr(flag: &str, dir: &std::path::Path) {
    let status = std::process::Command::new("chattr")
        .arg("-R")
        .arg(flag)
        .arg(dir)
        .status()
        .unwrap_or_else(|e| panic!("cannot run chattr (this test needs it, as root): {e}"));
    assert!(
        status.success(),
        "chattr -R {flag} {dir:?}: {status} (this test needs root)"
    );
}

/// `S` of one node, which must answer.
async fn probe(addr: SocketAddr) -> Status {
    probe_status(addr, Duration::from_secs(2))
        .await
        .unwrap_or_else(|| panic!("{addr} did not answer S"))
}

/// The protocol's answer-time rule: an acquire by the end of its wait plus
/// this, any other request within this.
const ANSWER_SLACK: Duration = Duration::from_secs(3);

/// Sends `request` on a fresh connection to `addr` and returns the answer
/// with how long it took; `None` if none came within `limit`.
async fn timed(
    addr: SocketAddr,
    request: String,
    limit: Duration,
) -> (String, Option<(String, Duration)>) {
    let mut c = LineClient::connect(addr).await;
    let sent = Instant::now();
    c.send(&request).await;
    let answer = c
        .recv_timeout(limit)
        .await
        .map(|line| (line, sent.elapsed()));
    (request, answer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_from_its_majority_answers_in_time_and_steps_down() {
    let _serial = SERIAL.lock().await;
    let mut cluster = RaftCluster::start(3);
    let (leader, _) = cluster.wait_leader(SETTLE).await;
    let addr = cluster.peers[leader];
    let mut client = cluster.client(leader);
    let held = grant(&mut client, "held").await;
    let handed = grant(&mut client, "handed").await;
    // A waiter queued behind `handed` before the cut.
    let mut waiter = LineClient::connect(addr).await;
    waiter.send("A handed 1 10").await;
    let queued_at = Instant::now();
    cluster
        .wait_status(leader, "holding the waiter", REQUEST, |s| {
            status_u64(s, "waiters") == 1
        })
        .await;
    let followers: Vec<usize> = (0..3).filter(|i| *i != leader).collect();
    for &f in &followers {
        cluster.nodes[f].stop_signal();
    }
    // Requests right at the cut (some reach the log) and a second later
    // (after the step-down), each on its own connection.
    let limit_acquire = Duration::from_secs(1) + ANSWER_SLACK;
    let now_batch = [
        (format!("R handed {handed}"), ANSWER_SLACK),
        ("A free 1 10".to_string(), limit_acquire),
        (format!("K held {held} 60"), ANSWER_SLACK),
    ];
    let mut asked = Vec::new();
    for (request, limit) in now_batch {
        asked.push(tokio::spawn(timed(
            addr,
            request,
            limit + Duration::from_secs(2),
        )));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    for (request, limit) in [
        ("A later 1 10".to_string(), limit_acquire),
        ("R held 999999".to_string(), ANSWER_SLACK),
    ] {
        asked.push(tokio::spawn(timed(
            addr,
            request,
            limit + Duration::from_secs(2),
        )));
    }
    let waiter_answer = waiter
        .recv_timeout(limit_acquire + Duration::from_secs(2))
        .await;
    let waited = queued_at.elapsed();
    let mut report = vec![format!(
        "A handed 1 10 (queued) -> {waiter_answer:?} after {waited:?}"
    )];
    let mut late = Vec::new();
    match &waiter_answer {
        Some(line) if line.starts_with("M A handed ") || line == "T handed" => {}
        other => late.push(format!("the queued waiter got {other:?} after {waited:?}")),
    }
    for task in asked {
        let (request, answer) = task.await.unwrap_or_else(|e| panic!("request task: {e}"));
        report.push(format!("{request} -> {answer:?}"));
        let limit = if request.starts_with('A') {
            limit_acquire
        } else {
            ANSWER_SLACK
        };
        match answer {
            Some((line, took))
                if took <= limit && line.starts_with("M ") && line.ends_with(" -") => {}
            other => late.push(format!("{request}: {other:?} (limit {limit:?})")),
        }
    }
    println!("isolated raft leader: {}", report.join("; "));
    let status = LineClient::connect(addr).await.status().await;
    assert_ne!(field(&status, "role"), "leader", "{status:?}");
    assert_eq!(field(&status, "active"), "-", "{status:?}");
    assert!(
        late.is_empty(),
        "the isolated leader broke the answer-time rule: {late:?}"
    );
    for &f in &followers {
        cluster.nodes[f].cont();
    }
    let (next, took) = cluster.wait_leader(SETTLE).await;
    println!("raft: leader {next} agreed {took:?} after the followers resumed");
    // What the leader acknowledged before the cut is all still there.
    let mut client = cluster.client(next);
    let reply = client.request("A held 0.2 60", REQUEST).await;
    assert_eq!(
        reply.line, "T held",
        "the grant acknowledged before the cut"
    );
    release(&mut client, "held", held).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wiped_follower_is_repaired_and_the_leader_shows_its_lag() {
    let _serial = SERIAL.lock().await;
    // Snapshots every 10 entries, so the repair needs a snapshot install.
    let mut cluster = RaftCluster::start_with(3, &["--snapshot-every", "10"]);
    let (mut leader, _) = cluster.wait_leader(SETTLE).await;
    // Node 0 is the follower to wipe: with an empty directory it also sets
    // the cluster up afresh, the hardest case to repair.
    if leader == 0 {
        cluster.nodes[0].terminate();
        cluster.nodes[0].restart();
        leader = cluster.wait_leader(SETTLE).await.0;
    }
    let follower = 0;
    let mut client = cluster.client(leader);
    for i in 0..10 {
        grant(&mut client, &format!("before-{i}")).await;
    }
    cluster.nodes[follower].kill();
    let mut last = 0;
    for i in 0..30 {
        last = grant(&mut client, &format!("while-down-{i}")).await;
    }
    let peer = format!("peer.{follower}");
    let mut c = LineClient::connect(cluster.peers[leader]).await;
    let behind = c
        .wait_status(
            "the leader shows the follower behind",
            Duration::from_secs(5),
            |s| {
                s.get(&peer)
                    .and_then(|v| v.split_once(",lag:"))
                    .and_then(|(_, lag)| lag.parse::<u64>().ok())
                    .is_some_and(|lag| lag >= 30)
            },
        )
        .await;
    println!(
        "raft leader while follower {follower} is down: {peer}={}",
        field(&behind, &peer)
    );
    // Wipe the follower's data directory and start it again.
    let dir = cluster.dirs[follower].path().to_path_buf();
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("read {dir:?}: {e}")) {
        let path = entry.unwrap_or_else(|e| panic!("{e}")).path();
        let removed = if path.is_dir() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        removed.unwrap_or_else(|e| panic!("remove {path:?}: {e}"));
    }
    cluster.nodes[follower].restart();
    let restarted = Instant::now();
    let mut f = LineClient::connect(cluster.peers[follower]).await;
    let status = f
        .wait_status(
            "the wiped follower repaired",
            Duration::from_secs(10),
            |s| status_u64(s, "token") == last,
        )
        .await;
    println!(
        "raft: wiped follower {follower} repaired {:?} after its restart",
        restarted.elapsed()
    );
    assert_eq!(status_u64(&status, "locks"), 40, "{status:?}");
    // The leader may have handed the lead over to rebuild a stuck stream.
    let (leader, _) = cluster.wait_leader(SETTLE).await;
    assert_ne!(leader, follower);
    let mut c = LineClient::connect(cluster.peers[leader]).await;
    let caught_up = c
        .wait_status(
            "the leader shows the follower caught up",
            Duration::from_secs(5),
            |s| s.get(&peer).is_some_and(|v| v.ends_with(",lag:0")),
        )
        .await;
    assert!(
        field(&caught_up, &peer).starts_with("matched:"),
        "{caught_up:?}"
    );
    // And it counts for a majority again: with the other follower gone,
    // the leader still commits. (Before the fix the wiped follower even
    // showed the right token, but the leader never replicated to it
    // again, and this grant hung: "one more node down and the cluster
    // hung".)
    let other = (0..3).find(|i| *i != leader && *i != follower).unwrap_or(0);
    cluster.nodes[other].kill();
    let after = grant(&mut client, "after-repair").await;
    assert!(after > last);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_storage_fails_exits_non_zero_and_the_others_take_over() {
    let _serial = SERIAL.lock().await;
    let mut cluster = RaftCluster::start(3);
    let (leader, _) = cluster.wait_leader(SETTLE).await;
    let mut client = cluster.client(leader);
    let before = grant(&mut client, "before").await;
    // The leader's data directory turns immutable (as root: chattr +i),
    // so its next log write fails, as on a failing disk.
    let _frozen = Frozen::new(cluster.dirs[leader].path());
    let mut c = LineClient::connect(cluster.peers[leader]).await;
    c.send("A after 5 60").await;
    let status = cluster.nodes[leader]
        .wait_exit(Duration::from_secs(10))
        .unwrap_or_else(|| panic!("the leader lives on with a dead Raft core"));
    let log = cluster.nodes[leader].log_tail(200);
    let said: Vec<&str> = log.lines().filter(|l| l.starts_with("batond: ")).collect();
    println!("raft leader with failing storage exited {status}: {said:?}");
    assert_eq!(status.code(), Some(1), "{status}");
    assert!(
        matches!(said.as_slice(), [line] if line.starts_with("batond: the Raft core stopped")),
        "one line should say why: {said:?}"
    );
    let (next, _) = cluster.wait_leader(SETTLE).await;
    assert_ne!(next, leader);
    let mut client = cluster.client(next);
    let reply = client.request("A before 0.2 60", REQUEST).await;
    assert_eq!(reply.line, "T before", "the grant made before the fault");
    let fresh = grant(&mut client, "fresh").await;
    assert!(fresh > before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_returning_follower_does_not_depose_the_leader() {
    let _serial = SERIAL.lock().await;
    let mut cluster = RaftCluster::start(3);
    let (leader, _) = cluster.wait_leader(SETTLE).await;
    let follower = (leader + 1) % 3;
    // A client cycling acquire/release on the leader measures the gaps.
    let peers = cluster.peers.clone();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let cycling = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut client = ClusterClient::new(peers, leader);
            let mut served = vec![Instant::now()];
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let token = grant(&mut client, "cycle").await;
                release(&mut client, "cycle", token).await;
                served.push(Instant::now());
            }
            served
        })
    };
    // Meanwhile two clients hand one key back and forth on the leader:
    // each release has the other's acquire queued behind it (such a
    // release once went unanswered and unapplied while a follower had just
    // been cut off).
    let handing = {
        let stop = stop.clone();
        let addr = cluster.peers[leader];
        tokio::spawn(async move {
            let mut a = LineClient::connect(addr).await;
            let mut b = LineClient::connect(addr).await;
            let mut token = match a.request("A pass 5 60").await.strip_prefix("A pass ") {
                Some(t) => t.parse::<u64>().unwrap_or_else(|e| panic!("{e}")),
                None => panic!("no first grant of pass"),
            };
            let mut slowest = Duration::ZERO;
            let mut handovers = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                b.send("A pass 5 60").await;
                tokio::time::sleep(Duration::from_millis(5)).await;
                let sent = Instant::now();
                a.send(&format!("R pass {token}")).await;
                let released = a.recv_timeout(ANSWER_SLACK).await;
                assert_eq!(
                    released.as_deref(),
                    Some("R pass"),
                    "release {token} after {:?}",
                    sent.elapsed()
                );
                let granted = b.recv_timeout(ANSWER_SLACK).await;
                slowest = slowest.max(sent.elapsed());
                token = match granted.as_deref().and_then(|l| l.strip_prefix("A pass ")) {
                    Some(t) => t.parse::<u64>().unwrap_or_else(|e| panic!("{e}")),
                    None => panic!(
                        "the waiter got {granted:?} {:?} after the release",
                        sent.elapsed()
                    ),
                };
                handovers += 1;
                std::mem::swap(&mut a, &mut b);
            }
            (handovers, slowest)
        })
    };
    let term_before = field(&probe(cluster.peers[leader]).await, "term").to_string();
    let mut rounds = Vec::new();
    for _ in 0..3 {
        // Cut off for several election timeouts: it misses entries and its
        // election timer runs out before it hears from the leader again.
        cluster.nodes[follower].stop_signal();
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        cluster.nodes[follower].cont();
        let resumed = Instant::now();
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        rounds.push(resumed);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let served = cycling
        .await
        .unwrap_or_else(|e| panic!("cycling client: {e}"));
    let gaps: Vec<Duration> = rounds
        .iter()
        .map(|resumed| {
            served
                .windows(2)
                .filter(|w| w[1] > *resumed && w[0] < *resumed + Duration::from_secs(1))
                .map(|w| w[1] - w[0])
                .max()
                .unwrap_or_default()
        })
        .collect();
    let (handovers, slowest) = handing
        .await
        .unwrap_or_else(|e| panic!("handing client: {e}"));
    let statuses = cluster.statuses().await;
    println!(
        "raft: longest gap in service within 1 s of each follower return: {gaps:?} ({} cycles); \
         {handovers} hand-overs behind a release, the slowest answered in {slowest:?}",
        served.len()
    );
    assert!(handovers > 20, "only {handovers} hand-overs");
    assert_eq!(
        cluster.agreed_leader(&statuses),
        Some(leader),
        "{statuses:?}"
    );
    // No election: the leader leads the term it led before the returns
    // (before pre-vote, each return cost one, and a 350-620 ms stall).
    let term_after = field(&probe(cluster.peers[leader]).await, "term").to_string();
    assert!(!term_before.is_empty(), "S shows no term");
    assert_eq!(
        term_after, term_before,
        "an election at a follower's return"
    );
    for gap in gaps {
        assert!(
            gap < Duration::from_secs(1),
            "service stalled {gap:?} at a return"
        );
    }
}

/// `n` as a postcard varint.
fn varint(mut n: u64) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(byte);
            return out;
        }
        out.push(byte | 0x80);
    }
}

/// The forged peer frames, as a version 1 node took them: the
/// plain hello line, a `LinkHello` from node 1 with the real peer list,
/// and a vote request of term 2^64 - 2 with a log to win it, each frame
/// postcard behind a 4-byte length.
fn forged_v1_vote(peers: &[SocketAddr]) -> Vec<u8> {
    let frame = |body: Vec<u8>| {
        let mut out = (body.len() as u32).to_be_bytes().to_vec();
        out.extend(body);
        out
    };
    let mut hello = varint(1);
    hello.extend(varint(peers.len() as u64));
    for peer in peers {
        let addr = peer.to_string();
        hello.extend(varint(addr.len() as u64));
        hello.extend(addr.as_bytes());
    }
    let term = u64::MAX - 1;
    let mut vote = varint(7); // request id
    vote.extend(varint(1)); // RequestBody::Vote
    vote.extend(varint(term)); // vote.leader_id.term
    vote.extend(varint(1)); // vote.leader_id.node_id
    vote.push(0); // vote.committed
    vote.push(1); // last_log_id: Some
    vote.extend(varint(term));
    vote.extend(varint(1));
    vote.extend(varint(1_000_000)); // index
    vote.push(0); // leadership_transfer
    let mut out = b"BATON-RAFT/1\n".to_vec();
    out.extend(frame(hello));
    out.extend(frame(vote));
    out
}

/// Writes `bytes` to `addr` and reads whatever comes back until the node
/// closes or a moment passes.
async fn send_raw(addr: SocketAddr, bytes: &[u8]) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut stream) = tokio::net::TcpStream::connect(addr).await else {
        return;
    };
    let _ = stream.write_all(bytes).await;
    let mut sink = vec![0u8; 4096];
    let deadline = Instant::now() + Duration::from_millis(100);
    while let Ok(Ok(n)) = tokio::time::timeout_at(deadline, stream.read(&mut sink)).await {
        if n == 0 {
            break;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_raft_peer_traffic_without_the_key_changes_nothing() {
    let _serial = SERIAL.lock().await;
    let mut cluster = RaftCluster::start(3);
    let (leader, _) = cluster.wait_leader(SETTLE).await;
    let mut client = cluster.client(leader);
    let before = grant(&mut client, "kept").await;
    let forged = forged_v1_vote(&cluster.peers);
    // The version 2 hello with a made-up handshake message and frames.
    let mut made_up = b"BATON-RAFT/2\n".to_vec();
    made_up.extend([0, 48]);
    made_up.extend([0x5a; 48]);
    made_up.extend([0, 40]);
    made_up.extend([0xa5; 40]);
    // A node grants such a vote once its leader's lease has run out, so
    // the forger sends it all through the election after a leader's
    // death. A version 1 node took it, and its core panicked at a later
    // election: the cluster was gone for good.
    cluster.nodes[leader].kill();
    let forging = Instant::now();
    while forging.elapsed() < Duration::from_secs(3) {
        for (i, &peer) in cluster.peers.iter().enumerate() {
            if i != leader {
                send_raw(peer, &forged).await;
                send_raw(peer, &made_up).await;
            }
        }
    }
    let (next, took) = cluster.wait_leader(SETTLE).await;
    println!("raft: elected {next} {took:?} after 3 s of forged peer traffic");
    for i in 0..cluster.nodes.len() {
        if i == leader {
            continue;
        }
        assert!(cluster.nodes[i].is_running(), "node {i} died");
        let status = probe(cluster.peers[i]).await;
        let term = status_u64(&status, "term");
        assert!(term < 1_000, "node {i} took the forged term: {term}");
    }
    let mut client = cluster.client(next);
    let reply = client.request("A kept 0.2 60", REQUEST).await;
    assert_eq!(reply.line, "T kept", "the grant made before");
    let after = grant(&mut client, "after").await;
    assert!(after > before);
}
