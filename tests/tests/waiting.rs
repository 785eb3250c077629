//! Black-box tests of waiting: wait timeouts, lease expiry handing a key on,
//! first-come-first-served queues, out-of-order answers on one connection, and
//! what happens to waiters and grants when connections close.

use std::time::{Duration, Instant};

use baton_tests::{grant_token, status_u64, Batond, LineClient};

const SETTLE: Duration = Duration::from_secs(5);

/// Sends an acquire that must queue, and waits until the node counts it, so
/// that the order of arrival at the node is the order of the calls.
async fn enqueue(waiter: &mut LineClient, observer: &mut LineClient, line: &str, waiters: u64) {
    waiter.send(line).await;
    observer
        .wait_status(&format!("showing {waiters} waiters"), SETTLE, |s| {
            status_u64(s, "waiters") == waiters
        })
        .await;
}

#[tokio::test]
async fn wait_runs_out_with_t_on_time() {
    let node = Batond::start(&[]);
    let mut holder = node.connect().await;
    let mut waiter = node.connect().await;
    let t = grant_token(&holder.request("A k 0 30").await, "k");
    let sent = Instant::now();
    assert_eq!(waiter.request("A k 0.3 10").await, "T k");
    let took = sent.elapsed();
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_millis(1300),
        "wait 0.3 ran out after {took:?}"
    );
    // The timed-out request left the queue: a release hands nothing to it.
    assert_eq!(status_u64(&holder.status().await, "waiters"), 0);
    assert_eq!(holder.request(&format!("R k {t}")).await, "R k");
    waiter.expect_silence(Duration::from_millis(300)).await;
    assert_eq!(status_u64(&holder.status().await, "locks"), 0);
}

/// docs/protocol.md: `wait 0` waits "as long as the node allows (its maximum
/// wait), then `T`": a hand-over still reaches it, and `--max-wait` bounds it.
#[tokio::test]
async fn wait_zero_waits_up_to_the_nodes_maximum_wait() {
    let node = Batond::start(&["--max-wait", "1.5"]);
    let mut holder = node.connect().await;
    let mut waiter = node.connect().await;
    let t = grant_token(&holder.request("A k 0 30").await, "k");
    waiter.send("A k 0 10").await;
    waiter.expect_silence(Duration::from_millis(500)).await;
    assert_eq!(holder.request(&format!("R k {t}")).await, "R k");
    let t2 = grant_token(&waiter.recv().await, "k");
    assert!(t2 > t);
    // Held again: a second `wait 0` runs out at the maximum wait.
    let sent = Instant::now();
    assert_eq!(holder.request("A k 0 10").await, "T k");
    let took = sent.elapsed();
    assert!(
        took >= Duration::from_millis(1500) && took < Duration::from_millis(3000),
        "wait 0 with --max-wait 1.5 ran out after {took:?}"
    );
}

#[tokio::test]
async fn same_connection_cannot_take_a_held_key_twice() {
    let node = Batond::start(&[]);
    let mut c = node.connect().await;
    grant_token(&c.request("A k 0 30").await, "k");
    assert_eq!(c.request("A k 0.2 30").await, "T k");
}

#[tokio::test]
async fn lease_expiry_hands_the_key_to_the_waiter_with_a_new_token() {
    let node = Batond::start(&[]);
    let mut holder = node.connect().await;
    let mut waiter = node.connect().await;
    let t1 = grant_token(&holder.request("A k 0 0.5").await, "k");
    let granted = Instant::now();
    waiter.send("A k 0 10").await;
    let t2 = grant_token(&waiter.recv().await, "k");
    let after = granted.elapsed();
    assert!(t2 > t1, "handoff token {t2} is not above {t1}");
    assert!(
        after >= Duration::from_millis(450) && after < Duration::from_millis(1500),
        "a 0.5 s lease handed over after {after:?}"
    );
    assert_eq!(holder.request(&format!("R k {t1}")).await, "N R k");
    assert_eq!(holder.request(&format!("K k {t1} 5")).await, "N K k");
    assert_eq!(waiter.request(&format!("R k {t2}")).await, "R k");
}

#[tokio::test]
async fn waiters_are_served_first_come_first_served_with_new_tokens() {
    let node = Batond::start(&[]);
    let mut observer = node.connect().await;
    let mut holder = node.connect().await;
    let mut token = grant_token(&holder.request("A q 0 30").await, "q");
    let mut waiters = Vec::new();
    for i in 0..6 {
        let mut w = node.connect().await;
        enqueue(&mut w, &mut observer, "A q 0 30", i + 1).await;
        waiters.push(w);
    }
    let mut releaser = holder;
    for i in 0..waiters.len() {
        assert_eq!(releaser.request(&format!("R q {token}")).await, "R q");
        let next = grant_token(&waiters[i].recv().await, "q");
        assert!(
            next > token,
            "handoff {i}: token {next} is not above {token}"
        );
        token = next;
        for later in waiters.iter_mut().skip(i + 1) {
            if let Some(line) = later.recv_timeout(Duration::from_millis(30)).await {
                panic!("waiter behind {i} got {line:?} out of turn");
            }
        }
        releaser = node.connect().await;
    }
    assert_eq!(releaser.request(&format!("R q {token}")).await, "R q");
    let s = observer.status().await;
    assert_eq!(status_u64(&s, "locks"), 0, "{s:?}");
    assert_eq!(status_u64(&s, "waiters"), 0, "{s:?}");
}

#[tokio::test]
async fn pipelined_acquires_on_one_connection_queue_in_order() {
    let node = Batond::start(&[]);
    let mut holder = node.connect().await;
    let mut c = node.connect().await;
    let mut token = grant_token(&holder.request("A p 0 30").await, "p");
    c.send_raw(b"A p 0 30\nA p 0 30\nA p 0 30\n").await;
    holder
        .wait_status("showing 3 waiters", SETTLE, |s| {
            status_u64(s, "waiters") == 3
        })
        .await;
    assert_eq!(holder.request(&format!("R p {token}")).await, "R p");
    for _ in 0..3 {
        let next = grant_token(&c.recv().await, "p");
        assert!(next > token);
        token = next;
        c.expect_silence(Duration::from_millis(50)).await;
        assert_eq!(c.request(&format!("R p {token}")).await, "R p");
    }
}

/// Reads `n` lines and returns them sorted, for answers whose relative order
/// the protocol leaves open.
async fn recv_sorted(c: &mut LineClient, n: usize) -> Vec<String> {
    let mut lines = Vec::with_capacity(n);
    for _ in 0..n {
        lines.push(c.recv().await);
    }
    lines.sort();
    lines
}

#[tokio::test]
async fn a_waiting_acquire_does_not_hold_back_later_answers() {
    let node = Batond::start(&[]);
    let mut holder = node.connect().await;
    let mut c = node.connect().await;
    let t = grant_token(&holder.request("A busy 0 30").await, "busy");
    c.send_raw(b"A busy 0 30\nA free 0 30\nS\nR nope 5\n").await;
    let lines = recv_sorted(&mut c, 3).await;
    let free = grant_token(&lines[0], "free");
    assert!(free > t);
    assert_eq!(lines[1], "N R nope", "{lines:?}");
    assert!(lines[2].starts_with("S "), "{lines:?}");
    c.expect_silence(Duration::from_millis(200)).await;
    assert_eq!(holder.request(&format!("R busy {t}")).await, "R busy");
    let busy = grant_token(&c.recv().await, "busy");
    assert!(busy > free);
}

#[tokio::test]
async fn timed_out_answer_comes_after_later_immediate_ones() {
    let node = Batond::start(&[]);
    let mut holder = node.connect().await;
    let mut c = node.connect().await;
    grant_token(&holder.request("A busy 0 30").await, "busy");
    c.send_raw(b"A busy 0.5 30\nA other 0 30\nS\n").await;
    let lines = recv_sorted(&mut c, 2).await;
    grant_token(&lines[0], "other");
    assert!(lines[1].starts_with("S "), "{lines:?}");
    assert_eq!(c.recv().await, "T busy");
}

#[tokio::test]
async fn a_closed_waiter_leaves_the_queue() {
    let node = Batond::start(&[]);
    let mut observer = node.connect().await;
    let mut holder = node.connect().await;
    let t = grant_token(&holder.request("A k 0 30").await, "k");
    let mut first = node.connect().await;
    let mut second = node.connect().await;
    enqueue(&mut first, &mut observer, "A k 0 30", 1).await;
    enqueue(&mut second, &mut observer, "A k 0 30", 2).await;
    drop(first);
    observer
        .wait_status("dropping the closed waiter", SETTLE, |s| {
            status_u64(s, "waiters") == 1
        })
        .await;
    assert_eq!(holder.request(&format!("R k {t}")).await, "R k");
    let t2 = grant_token(&second.recv().await, "k");
    assert!(t2 > t);
    let s = observer.status().await;
    assert_eq!(status_u64(&s, "locks"), 1, "{s:?}");
    assert_eq!(status_u64(&s, "token"), t2, "{s:?}");
}

#[tokio::test]
async fn a_waiter_that_closes_its_write_side_and_then_resets_leaves_the_queue() {
    let node = Batond::start(&[]);
    let mut observer = node.connect().await;
    let mut holder = node.connect().await;
    let t = grant_token(&holder.request("A k 0 30").await, "k");
    let mut gone = node.connect().await;
    enqueue(&mut gone, &mut observer, "A k 0 30", 1).await;
    gone.shutdown_write().await;
    drop(gone);
    observer
        .wait_status("dropping the closed waiter", SETTLE, |s| {
            status_u64(s, "waiters") == 0
        })
        .await;
    assert_eq!(holder.request(&format!("R k {t}")).await, "R k");
    let s = observer.status().await;
    assert_eq!(status_u64(&s, "locks"), 0, "nobody should hold k: {s:?}");
}

#[tokio::test]
async fn a_grant_survives_its_connection_closing() {
    let node = Batond::start(&[]);
    let mut first = node.connect().await;
    let t = grant_token(&first.request("A k 0 30").await, "k");
    drop(first);
    let mut other = node.connect().await;
    assert_eq!(other.request("A k 0.5 30").await, "T k");
    assert_eq!(status_u64(&other.status().await, "locks"), 1);
    assert_eq!(other.request(&format!("K k {t} 30")).await, "K k");
    assert_eq!(other.request(&format!("R k {t}")).await, "R k");
    grant_token(&other.request("A k 1 30").await, "k");
}

#[tokio::test]
async fn a_timed_out_waiter_is_skipped_at_handoff() {
    let node = Batond::start(&[]);
    let mut observer = node.connect().await;
    let mut holder = node.connect().await;
    let t = grant_token(&holder.request("A k 0 30").await, "k");
    let mut short = node.connect().await;
    let mut long = node.connect().await;
    enqueue(&mut short, &mut observer, "A k 0.3 30", 1).await;
    enqueue(&mut long, &mut observer, "A k 0 30", 2).await;
    assert_eq!(short.recv().await, "T k");
    assert_eq!(holder.request(&format!("R k {t}")).await, "R k");
    grant_token(&long.recv().await, "k");
    short.expect_silence(Duration::from_millis(200)).await;
}
