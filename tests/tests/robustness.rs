//! Black-box robustness: random binary junk, slow and vanishing clients, a
//! client that never reads, signals (SIGTERM/SIGINT exit 0 promptly,
//! SIGSTOP/SIGCONT) and the kit's restart on a fixed address.

use std::time::{Duration, Instant};

use baton_tests::{free_addr, grant_token, status_u64, Batond, LineClient};

/// Deterministic pseudo-random bytes (xorshift64), so failures can be replayed.
fn junk(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()[0]
        })
        .collect()
}

async fn assert_serving(node: &mut Batond) {
    assert!(node.is_running(), "batond died");
    let mut c = node.connect().await;
    let t = grant_token(&c.request("A alive 1 10").await, "alive");
    assert_eq!(c.request(&format!("R alive {t}")).await, "R alive");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_binary_junk_does_not_hurt_the_node() {
    let mut node = Batond::start(&[]);
    let addr = node.addr();
    let mut tasks = Vec::new();
    for seed in 1..=8u64 {
        tasks.push(tokio::spawn(async move {
            let mut c = LineClient::connect(addr).await;
            c.set_timeout(Duration::from_secs(15));
            for chunk in junk(seed * 0x9E37_79B9, 32 * 1024).chunks(4096) {
                c.send_raw(chunk).await;
            }
            // End whatever line the junk left open, then prove the
            // connection still works; every answer before must be E (or S,
            // should the junk happen to contain a bare `S` line).
            c.send_raw(b"\nS\n").await;
            let deadline = Instant::now() + Duration::from_secs(15);
            loop {
                let line = c.recv().await;
                if line.starts_with("S ") && line.contains("role=") {
                    break;
                }
                assert!(line.starts_with("E "), "junk was answered {line:?}");
                assert!(Instant::now() < deadline, "no answer to S after the junk");
            }
        }));
    }
    for task in tasks {
        if let Err(e) = task.await {
            panic!("a junk client failed: {e}");
        }
    }
    // Junk thrown at a connection that is then closed without reading.
    for seed in 100..104u64 {
        let mut c = node.connect().await;
        let _ = c.try_send_raw(&junk(seed, 64 * 1024)).await;
    }
    assert_serving(&mut node).await;
}

#[tokio::test]
async fn a_megabyte_without_newline_is_one_line_too_long() {
    let mut node = Batond::start(&[]);
    let mut c = node.connect().await;
    c.set_timeout(Duration::from_secs(15));
    for _ in 0..16 {
        c.send_raw(&[b'A'; 64 * 1024]).await;
    }
    c.send_raw(b"\nS\n").await;
    assert_eq!(c.recv().await, "E ? ? line too long");
    assert!(c.recv().await.starts_with("S "));
    c.expect_silence(Duration::from_millis(200)).await;
    assert_serving(&mut node).await;
}

#[tokio::test]
async fn a_line_sent_byte_by_byte_is_served() {
    let node = Batond::start(&[]);
    let mut c = node.connect().await;
    for b in b"A slow 0 10\n" {
        c.send_raw(&[*b]).await;
        tokio::time::sleep(Duration::from_millis(15)).await;
    }
    grant_token(&c.recv().await, "slow");
}

#[tokio::test]
async fn a_client_vanishing_mid_line_changes_nothing() {
    let mut node = Batond::start(&[]);
    let mut observer = node.connect().await;
    let before = observer.status().await;
    for _ in 0..20 {
        let mut c = node.connect().await;
        c.send_raw(b"A half 0").await;
        drop(c);
    }
    let after = observer.status().await;
    assert_eq!(after.get("locks"), before.get("locks"));
    assert_eq!(after.get("token"), before.get("token"));
    assert_eq!(status_u64(&after, "waiters"), 0);
    assert_serving(&mut node).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_does_not_stall_others() {
    let mut node = Batond::start(&[]);
    let mut flooder = node.connect().await;
    let flood = tokio::spawn(async move {
        let requests = b"S\n".repeat(200_000);
        // The node may stop reading once its answers back up: the write
        // then times out, which is fine.
        let _ = flooder.try_send_raw(&requests).await;
        flooder
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut other = node.connect().await;
    for _ in 0..20 {
        let sent = Instant::now();
        assert!(other.request("S").await.starts_with("S "));
        let took = sent.elapsed();
        assert!(
            took < Duration::from_secs(2),
            "an S took {took:?} beside the flooder"
        );
    }
    flood.abort();
    assert_serving(&mut node).await;
}

#[tokio::test]
async fn sigterm_exits_zero_promptly_and_closes_connections() {
    let mut node = Batond::start(&[]);
    let mut holder = node.connect().await;
    let mut waiter = node.connect().await;
    grant_token(&holder.request("A k 0 60").await, "k");
    waiter.send("A k 0 60").await;
    holder
        .wait_status("showing the waiter", Duration::from_secs(5), |s| {
            status_u64(s, "waiters") == 1
        })
        .await;
    let sent = Instant::now();
    let status = node.terminate();
    let took = sent.elapsed();
    assert!(status.success(), "batond exited with {status} on SIGTERM");
    assert!(took < Duration::from_secs(3), "SIGTERM took {took:?}");
    holder.expect_eof().await;
    waiter.expect_eof().await;
}

/// The `listening` line tells a supervisor the node is up; a signal sent at
/// once must already get the clean shutdown, not the default death.
#[tokio::test]
async fn sigint_right_after_listening_exits_zero() {
    let mut node = Batond::start(&[]);
    let sent = Instant::now();
    let status = node.interrupt();
    assert!(status.success(), "batond exited with {status} on SIGINT");
    assert!(sent.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn sigterm_right_after_listening_exits_zero() {
    let mut node = Batond::start(&[]);
    let sent = Instant::now();
    let status = node.terminate();
    assert!(status.success(), "batond exited with {status} on SIGTERM");
    assert!(sent.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn sigint_on_a_serving_node_exits_zero() {
    let mut node = Batond::start(&[]);
    let mut c = node.connect().await;
    grant_token(&c.request("A k 0 60").await, "k");
    let status = node.interrupt();
    assert!(status.success(), "batond exited with {status} on SIGINT");
    c.expect_eof().await;
}

#[tokio::test]
async fn a_stopped_node_answers_after_sigcont() {
    let mut node = Batond::start(&[]);
    let mut c = node.connect().await;
    assert!(c.request("S").await.starts_with("S "));
    node.stop_signal();
    c.send("S").await;
    c.expect_silence(Duration::from_millis(300)).await;
    node.cont();
    assert!(c.recv().await.starts_with("S "));
}

#[tokio::test]
async fn kit_restarts_a_node_on_the_same_address() {
    let addr = free_addr();
    let mut node = Batond::start_at(addr, &[]);
    assert_eq!(node.addr(), addr);
    let first_pid = node.pid();
    let mut c = node.connect().await;
    grant_token(&c.request("A k 0 10").await, "k");
    node.restart();
    assert_eq!(node.addr(), addr);
    assert_ne!(node.pid(), first_pid);
    c.expect_eof().await;
    assert_serving(&mut node).await;

    node.kill();
    assert!(!node.is_running());
    let again = Batond::start(&["--listen", &addr.to_string()]);
    assert_eq!(again.addr(), addr);
}
