//! Only holders of the cluster key speak as peers, seen from
//! outside with real `batond` processes in both cluster modes:
//!
//! - start-up: a cluster node without a key, with a short key or with a
//!   missing key file refuses to start in one line that says what to do;
//!   a key from `baton keygen` is accepted;
//! - attacks on a running cluster's client port: a hello and garbage, a
//!   handshake with a wrong key, a right-key handshake whose first frame
//!   has a flipped bit, a real node's link replayed, a version 1 hello.
//!   The node refuses each (closes it, logs the refusal) and nothing
//!   changes: roles, active, term, the held lock and the token are as our
//!   own requests left them, and every node still serves;
//! - limits: 2000 peer hellos take no client slot and are closed; an
//!   unfinished hello is closed;
//! - the refusal log: many wrong keys from one address give one line.

mod peer_auth_support;

use std::time::{Duration, Instant};

use baton_tests::{baton_bin, write_key_file, LineClient};
use peer_auth_support::attacks::{self, REFUSED_WITHIN, TIMED_OUT_WITHIN};
use peer_auth_support::{
    alone, cluster_key, other_key, plain_log, refusals_from, serving_cluster, start_refused,
    start_serving, wait_refusal_logged, Baseline, Mode, ProxiedCluster, SERIAL,
};

const MODES: [Mode; 2] = [Mode::Priority, Mode::Raft];

fn strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

/// The non-empty lines of a refused start's stderr: there must be one.
fn one_line(stderr: &str) -> &str {
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    match lines[..] {
        [line] => line,
        _ => panic!("expected one line on stderr, got {lines:?}"),
    }
}

#[test]
fn a_cluster_node_without_a_key_refuses_to_start_and_says_how_to_make_one() {
    for mode in MODES {
        let dir = tempfile::tempdir().expect("temp dir");
        let (_, stderr) = start_refused(&strs(&alone(mode, dir.path())));
        let line = one_line(&stderr);
        assert!(line.contains("baton keygen"), "{mode:?}: {line}");
        assert!(line.contains("--cluster-key-file"), "{mode:?}: {line}");
    }
}

#[test]
fn a_short_key_is_refused_naming_the_file() {
    for mode in MODES {
        let dir = tempfile::tempdir().expect("temp dir");
        let key = dir.path().join("short.key");
        // 31 bytes of key, 37 with the whitespace around it.
        write_key_file(&key, &format!("  \t{}  ", "k".repeat(31)));
        let mut args = alone(mode, &dir.path().join("data"));
        args.extend(["--cluster-key-file".into(), key.display().to_string()]);
        let (_, stderr) = start_refused(&strs(&args));
        let line = one_line(&stderr);
        assert!(
            line.contains(&key.display().to_string()),
            "{mode:?}: {line}"
        );
        assert!(line.contains("baton keygen"), "{mode:?}: {line}");
    }
}

#[test]
fn a_missing_key_file_is_refused_naming_it() {
    for mode in MODES {
        let dir = tempfile::tempdir().expect("temp dir");
        let key = dir.path().join("no-such.key");
        let mut args = alone(mode, &dir.path().join("data"));
        args.extend(["--cluster-key-file".into(), key.display().to_string()]);
        let (_, stderr) = start_refused(&strs(&args));
        let line = one_line(&stderr);
        assert!(
            line.contains(&key.display().to_string()),
            "{mode:?}: {line}"
        );
    }
}

#[tokio::test]
async fn baton_keygen_prints_a_fresh_key_that_a_cluster_node_accepts() {
    let keygen = || {
        let out = std::process::Command::new(baton_bin())
            .arg("keygen")
            .output()
            .expect("run baton keygen");
        assert!(out.status.success(), "{out:?}");
        assert!(out.stderr.is_empty(), "{out:?}");
        String::from_utf8(out.stdout).expect("text")
    };
    let key = keygen();
    let digits = key.strip_suffix('\n').expect("ends with a newline");
    assert_eq!(digits.len(), 64, "{key:?}");
    assert!(digits.bytes().all(|b| b.is_ascii_hexdigit()), "{key:?}");
    assert_ne!(key, keygen(), "two keys are the same");
    let _serial = SERIAL.lock().await;
    for mode in MODES {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("cluster.key");
        std::fs::write(&path, &key).expect("write the key");
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .expect("chmod 600");
        let mut args = alone(mode, &dir.path().join("data"));
        args.extend(["--cluster-key-file".into(), path.display().to_string()]);
        start_serving(mode, &args).await;
    }
}

/// Every attack on every node of `cluster`, each followed by the check
/// that nothing changed. Attack `a` on node `j` comes from 127.0.0.x with
/// x = 10 * (a + 1) + j, so its refusal can be found in the node's log.
async fn attack_every_node(cluster: &ProxiedCluster) {
    let mode = cluster.mode;
    let mut baseline = Baseline::take(cluster).await;
    let recording = cluster.recorded_link().await;
    let right = cluster_key();
    let wrong = other_key();
    let from = |attack: u8, node: usize| 10 * (attack + 1) + node as u8;
    // Our own requests alone keep the checks true.
    baseline.check(cluster, "no attack").await;
    for (j, addr) in cluster.listen.iter().copied().enumerate() {
        let node = &cluster.nodes[j];

        let ip = from(0, j);
        assert!(
            attacks::hello_and_garbage(ip, addr, mode.hello()).await,
            "node {j} kept a hello and garbage open for {TIMED_OUT_WITHIN:?}"
        );
        baseline.check(cluster, "a hello and garbage").await;

        let ip = from(1, j);
        attacks::wrong_key(ip, addr, mode.hello(), &wrong).await;
        wait_refusal_logged(node, &format!("127.0.0.{ip}"), "a wrong key").await;
        baseline.check(cluster, "a wrong-key handshake").await;

        let ip = from(2, j);
        attacks::bit_flipped_frame(ip, addr, mode.hello(), &right).await;
        wait_refusal_logged(node, &format!("127.0.0.{ip}"), "a flipped bit").await;
        baseline
            .check(cluster, "a right-key handshake with a flipped bit")
            .await;

        let ip = from(3, j);
        assert!(
            attacks::replay(ip, addr, &recording).await,
            "node {j} kept a replayed link open for {REFUSED_WITHIN:?}"
        );
        wait_refusal_logged(node, &format!("127.0.0.{ip}"), "a replay").await;
        baseline.check(cluster, "a replayed link").await;

        let ip = from(4, j);
        let answer = attacks::old_hello(ip, addr, mode.old_hello()).await;
        assert!(
            answer.as_deref().is_some_and(|a| a.starts_with("E ")),
            "node {j} took a version 1 hello for something else than an unknown request: {answer:?}"
        );
        baseline.check(cluster, "a version 1 hello").await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_priority_cluster_refuses_forged_peers_and_nothing_changes() {
    let _serial = SERIAL.lock().await;
    let cluster = ProxiedCluster::start(Mode::Priority, 2).await;
    attack_every_node(&cluster).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raft_cluster_refuses_forged_peers_and_nothing_changes() {
    let _serial = SERIAL.lock().await;
    let cluster = ProxiedCluster::start(Mode::Raft, 3).await;
    attack_every_node(&cluster).await;
}

/// Peer hellos that never go on, this many.
const HELLO_FLOOD: usize = 2000;

/// How long the flood's connections may stay open after the last hello:
/// the 5 s handshake timeout, and a wider margin than one connection
/// gets ([`TIMED_OUT_WITHIN`]): 2,000 handshakes time out at once, on a
/// node that shares two cores with the test process holding all of them.
/// Alone, the last closes 3.9-5.0 s after the last hello. A node whose
/// accept queue overflowed (tokio's default of 1,024, before
/// baton-server's `LISTEN_BACKLOG`) left some past 15 s: the kernel
/// dropped them and TCP's doubling retransmission brought them in late.
/// Still a bound: a node that never closed them fails.
const FLOOD_CLOSED_WITHIN: Duration = Duration::from_secs(15);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peer_hellos_take_no_client_slot_and_are_closed() {
    let _serial = SERIAL.lock().await;
    // The test process holds every connection of the flood at once.
    rlimit::increase_nofile_limit(2 * HELLO_FLOOD as u64 + 256).expect("open-file limit");
    for mode in MODES {
        let (cluster, serving_node) = serving_cluster(mode, &["--max-connections", "100"]).await;
        let addr = cluster.listen[serving_node];
        let serving = mode.serving_role();
        // Every hello written first, so that the client below comes after
        // all of them; a write the node refuses by closing is a close.
        let mut writes = Vec::with_capacity(HELLO_FLOOD);
        for _ in 0..HELLO_FLOOD {
            writes.push(tokio::spawn(async move {
                use tokio::io::AsyncWriteExt;
                let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
                Some(stream.write_all(mode.hello()).await.ok().map(|()| stream))
            }));
        }
        let mut flood = Vec::with_capacity(HELLO_FLOOD);
        for (i, write) in writes.into_iter().enumerate() {
            match write.await.expect("flood task") {
                Some(open) => flood.extend(open),
                None => panic!("{mode:?}: flood connection {i} could not connect"),
            }
        }
        let written = Instant::now();
        // While the hellos are within their handshake time, a client is
        // served. The node may still be reading the last hellos (an
        // unread connection counts as a client until it says what it
        // is), so a refusal is retried, but only well inside that time.
        let mut client = loop {
            let mut client = LineClient::connect(addr).await;
            let granted = client.request("A after-the-flood 5 10").await;
            if granted.starts_with("A after-the-flood ") {
                break client;
            }
            assert!(
                granted == "E ? ? too many connections"
                    && written.elapsed() < Duration::from_secs(2),
                "{mode:?}: a client is not served {:?} after the flood: {granted}",
                written.elapsed()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        println!(
            "{mode:?}: a client served {:?} after {HELLO_FLOOD} peer hellos",
            written.elapsed()
        );
        let closing: Vec<_> = flood
            .into_iter()
            .map(|mut stream| {
                tokio::spawn(async move {
                    let left =
                        (written + FLOOD_CLOSED_WITHIN).saturating_duration_since(Instant::now());
                    attacks::closed_within(&mut stream, left)
                        .await
                        .then(Instant::now)
                })
            })
            .collect();
        let mut last_close = written;
        for (i, closed) in closing.into_iter().enumerate() {
            match closed.await.expect("closing task") {
                Some(at) => last_close = last_close.max(at),
                None => panic!(
                    "{mode:?}: flood connection {i} still open {FLOOD_CLOSED_WITHIN:?} after its hello"
                ),
            }
        }
        println!(
            "{mode:?}: {HELLO_FLOOD} peer hellos closed within {:?} of the last",
            last_close - written
        );
        let status = client.status().await;
        assert_eq!(
            status.get("role").map(String::as_str),
            Some(serving),
            "{mode:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unfinished_hello_is_closed() {
    let _serial = SERIAL.lock().await;
    for mode in MODES {
        let (cluster, serving) = serving_cluster(mode, &[]).await;
        let addr = cluster.listen[serving];
        let mut stream = attacks::connect_from(1, addr).await;
        use tokio::io::AsyncWriteExt;
        // "BATON-PE" or "BATON-RA": the start of this mode's hello.
        stream.write_all(&mode.hello()[..8]).await.expect("write");
        assert!(
            attacks::closed_within(&mut stream, TIMED_OUT_WITHIN).await,
            "{mode:?}: an unfinished hello is still open after {TIMED_OUT_WITHIN:?}"
        );
        let mut client = LineClient::connect(addr).await;
        let answer = client.request("A after 5 10").await;
        assert!(answer.starts_with("A after "), "{mode:?}: {answer}");
    }
}

/// Wrong-key handshakes from one address, one after the other.
const WRONG_KEYS: usize = 40;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_wrong_keys_from_one_address_are_logged_once() {
    let _serial = SERIAL.lock().await;
    for mode in MODES {
        let (cluster, serving) = serving_cluster(mode, &[]).await;
        let node = &cluster.nodes[serving];
        let addr = cluster.listen[serving];
        let wrong = other_key();
        for _ in 0..WRONG_KEYS {
            attacks::wrong_key(1, addr, mode.hello(), &wrong).await;
        }
        wait_refusal_logged(node, "127.0.0.1", &format!("{mode:?}: wrong keys")).await;
        let log = plain_log(node);
        assert_eq!(
            refusals_from(&log, "127.0.0.1"),
            1,
            "{mode:?}: {WRONG_KEYS} wrong keys from 127.0.0.1 should give one line:\n{log}"
        );
        let mut client = LineClient::connect(addr).await;
        let answer = client.request("A after 5 10").await;
        assert!(answer.starts_with("A after "), "{mode:?}: {answer}");
    }
}
