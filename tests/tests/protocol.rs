//! Black-box conformance of single requests against docs/protocol.md: the example
//! session, grants, release, renew, status, framing, and every malformed input
//! the contract names (each answered `E`, nothing changed, connection usable).

use std::time::{Duration, Instant};

use baton_tests::{assert_any_error, assert_error, grant_token, status_u64, Batond, LineClient};

/// The counters that must not move when a request is refused.
async fn counters(c: &mut LineClient) -> (u64, u64, u64) {
    let s = c.status().await;
    (
        status_u64(&s, "token"),
        status_u64(&s, "locks"),
        status_u64(&s, "waiters"),
    )
}

#[tokio::test]
async fn example_session_from_the_protocol() {
    let node = Batond::start(&[]);
    let mut c = node.connect().await;
    let t1 = grant_token(&c.request("A orders/42 5 30").await, "orders/42");
    let t2 = grant_token(&c.request("A orders/43 0 10").await, "orders/43");
    assert!(t2 > t1, "tokens must increase: {t1} then {t2}");
    assert_eq!(c.request(&format!("R orders/42 {t1}")).await, "R orders/42");
    assert_eq!(
        c.request(&format!("R orders/42 {t1}")).await,
        "N R orders/42"
    );
    assert_eq!(
        c.request(&format!("K orders/43 {t2} 60")).await,
        "K orders/43"
    );
    let e = c.request("A bad-lease 0 0").await;
    assert_error(&e, "A", Some("bad-lease"));
}

#[tokio::test]
async fn release_then_acquire_again_gets_a_higher_token() {
    let node = Batond::start(&[]);
    let mut c = node.connect().await;
    let t1 = grant_token(&c.request("A k 5 30").await, "k");
    assert_eq!(c.request(&format!("R k {t1}")).await, "R k");
    let t2 = grant_token(&c.request("A k 5 30").await, "k");
    assert!(
        t2 > t1,
        "a new grant needs a new, higher token: {t1} then {t2}"
    );
}

#[tokio::test]
async fn stale_release_and_renew_are_refused_with_n() {
    let node = Batond::start(&[]);
    let mut c = node.connect().await;
    assert_eq!(c.request("R never 1").await, "N R never");
    assert_eq!(c.request("K never 1 10").await, "N K never");
    let t = grant_token(&c.request("A k 0 30").await, "k");
    assert_eq!(c.request(&format!("R k {}", t + 1)).await, "N R k");
    assert_eq!(c.request(&format!("K k {} 10", t + 1)).await, "N K k");
    assert_eq!(c.request(&format!("R k {}", u64::MAX)).await, "N R k");
    // The wrong tokens did not end the grant.
    let mut other = node.connect().await;
    assert_eq!(other.request("A k 0.3 10").await, "T k");
    assert_eq!(c.request(&format!("R k {t}")).await, "R k");
    assert_eq!(c.request(&format!("R k {t}")).await, "N R k");
    assert_eq!(c.request(&format!("K k {t} 10")).await, "N K k");
}

#[tokio::test]
async fn release_from_another_connection() {
    let node = Batond::start(&[]);
    let mut a = node.connect().await;
    let mut b = node.connect().await;
    let t = grant_token(&a.request("A shared 0 30").await, "shared");
    assert_eq!(b.request(&format!("R shared {t}")).await, "R shared");
    assert_eq!(a.request(&format!("R shared {t}")).await, "N R shared");
    let t2 = grant_token(&b.request("A shared 1 30").await, "shared");
    assert!(t2 > t);
}

#[tokio::test]
async fn lease_expires_without_release() {
    let node = Batond::start(&[]);
    let mut c = node.connect().await;
    let t = grant_token(&c.request("A k 0 0.3").await, "k");
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert_eq!(c.request(&format!("R k {t}")).await, "N R k");
    assert_eq!(c.request(&format!("K k {t} 10")).await, "N K k");
    assert_eq!(status_u64(&c.status().await, "locks"), 0);
}

#[tokio::test]
async fn renew_restarts_the_lease_from_the_renewal() {
    let node = Batond::start(&[]);
    let mut holder = node.connect().await;
    let mut waiter = node.connect().await;
    // Lease 2 s, renewed at 0.5 s for 3 s: without the renewal the waiter
    // would get the key at 2 s; with it, not before 3.5 s. The margins are
    // wide so a loaded machine cannot blur the two.
    let t = grant_token(&holder.request("A k 0 2").await, "k");
    let granted = Instant::now();
    waiter.send("A k 0 10").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(holder.request(&format!("K k {t} 3")).await, "K k");
    let renewed = Instant::now();
    let quiet_until = renewed + Duration::from_millis(2700);
    waiter
        .expect_silence(quiet_until.saturating_duration_since(Instant::now()))
        .await;
    let line = waiter.recv().await;
    let t2 = grant_token(&line, "k");
    assert!(t2 > t, "the handoff needs a higher token: {t} then {t2}");
    let after = renewed.elapsed();
    assert!(
        after < Duration::from_millis(4500),
        "lease renewed for 3 s lasted {after:?} (granted {:?} ago)",
        granted.elapsed()
    );
    assert_eq!(holder.request(&format!("R k {t}")).await, "N R k");
}

#[tokio::test]
async fn renew_can_shorten_the_lease() {
    let node = Batond::start(&[]);
    let mut holder = node.connect().await;
    let mut waiter = node.connect().await;
    let t = grant_token(&holder.request("A k 0 60").await, "k");
    waiter.send("A k 0 10").await;
    waiter.expect_silence(Duration::from_millis(200)).await;
    assert_eq!(holder.request(&format!("K k {t} 0.3")).await, "K k");
    let renewed = Instant::now();
    let t2 = grant_token(&waiter.recv().await, "k");
    let after = renewed.elapsed();
    assert!(t2 > t);
    assert!(
        after >= Duration::from_millis(250) && after < Duration::from_millis(1800),
        "a 0.3 s renewal handed the key over after {after:?}"
    );
}

#[tokio::test]
async fn tokens_strictly_increase_across_keys_and_connections() {
    let node = Batond::start(&[]);
    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(node.connect().await);
    }
    let mut last = 0;
    for i in 0..30 {
        let c = &mut clients[i % 3];
        let key = format!("key/{i}");
        let t = grant_token(&c.request(&format!("A {key} 0 30")).await, &key);
        assert!(t > last, "token {t} for {key} is not above {last}");
        last = t;
        if i % 2 == 0 {
            assert_eq!(c.request(&format!("R {key} {t}")).await, format!("R {key}"));
        }
    }
}

#[tokio::test]
async fn status_fields_on_a_fresh_node_and_after_work() {
    let node = Batond::start(&[]);
    let mut c = node.connect().await;
    let s = c.status().await;
    let me = node.addr().to_string();
    assert_eq!(s.get("role").map(String::as_str), Some("single"), "{s:?}");
    assert_eq!(s.get("mode").map(String::as_str), Some("single"), "{s:?}");
    assert_eq!(s.get("self"), Some(&me), "{s:?}");
    assert_eq!(s.get("active"), Some(&me), "{s:?}");
    assert_eq!(status_u64(&s, "locks"), 0);
    assert_eq!(status_u64(&s, "waiters"), 0);
    let start_token = status_u64(&s, "token");

    let ta = grant_token(&c.request("A a 0 30").await, "a");
    let tb = grant_token(&c.request("A b 0 30").await, "b");
    assert!(ta > start_token);
    let mut w1 = node.connect().await;
    let mut w2 = node.connect().await;
    w1.send("A a 0 30").await;
    // w1 must queue first: it is the one expected to get the key next.
    c.wait_status("showing 1 waiter", Duration::from_secs(5), |s| {
        status_u64(s, "waiters") == 1
    })
    .await;
    w2.send("A a 0 30").await;
    let s = c
        .wait_status("showing 2 waiters", Duration::from_secs(5), |s| {
            status_u64(s, "waiters") == 2
        })
        .await;
    assert_eq!(status_u64(&s, "locks"), 2, "{s:?}");
    assert_eq!(
        status_u64(&s, "token"),
        tb,
        "token= is the last token issued: {s:?}"
    );

    assert_eq!(c.request(&format!("R a {ta}")).await, "R a");
    let t3 = grant_token(&w1.recv().await, "a");
    let s = c.status().await;
    assert_eq!(status_u64(&s, "locks"), 2, "{s:?}");
    assert_eq!(status_u64(&s, "waiters"), 1, "{s:?}");
    assert_eq!(status_u64(&s, "token"), t3, "{s:?}");

    assert_eq!(c.request(&format!("R b {tb}")).await, "R b");
    let s = c.status().await;
    assert_eq!(status_u64(&s, "locks"), 1, "{s:?}");
}

#[tokio::test]
async fn status_requests_are_answered_in_order() {
    let node = Batond::start(&[]);
    let mut c = node.connect().await;
    let mut holder = node.connect().await;
    let t = grant_token(&holder.request("A k 0 30").await, "k");
    // S, then something that changes the counters, then S: the second
    // answer must reflect the change, so the two cannot be swapped.
    c.send_raw(format!("S\nR k {t}\nS\n").as_bytes()).await;
    let mut statuses = Vec::new();
    let mut released = false;
    for _ in 0..3 {
        let line = c.recv().await;
        if line.starts_with("S ") {
            statuses.push(baton_tests::parse_status(&line));
        } else {
            assert_eq!(line, "R k");
            released = true;
        }
    }
    assert!(released);
    assert_eq!(statuses.len(), 2);
    assert_eq!(status_u64(&statuses[0], "locks"), 1, "{statuses:?}");
    assert_eq!(status_u64(&statuses[1], "locks"), 0, "{statuses:?}");
}

#[tokio::test]
async fn crlf_line_endings_are_accepted() {
    let node = Batond::start(&[]);
    let mut c = node.connect().await;
    c.send_raw(b"A k 0 30\r\n").await;
    let t = grant_token(&c.recv().await, "k");
    c.send_raw(format!("K k {t} 30\r\n").as_bytes()).await;
    assert_eq!(c.recv().await, "K k");
    c.send_raw(format!("R k {t}\r\n").as_bytes()).await;
    assert_eq!(c.recv().await, "R k");
    c.send_raw(b"S\r\n").await;
    assert!(c.recv().await.starts_with("S "));
}

#[tokio::test]
async fn valid_keys_and_durations_are_accepted() {
    let node = Batond::start(&[]);
    let mut c = node.connect().await;
    let long = "k".repeat(250);
    let keys = [
        "orders/42".to_owned(),
        "jobs:nightly".to_owned(),
        "ключ/日本/🔒".to_owned(),
        "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~".to_owned(),
        "x".to_owned(),
        long,
    ];
    for key in &keys {
        let t = grant_token(&c.request(&format!("A {key} 0.5 2.125")).await, key);
        assert_eq!(
            c.request(&format!("K {key} {t} 30")).await,
            format!("K {key}")
        );
        assert_eq!(c.request(&format!("R {key} {t}")).await, format!("R {key}"));
    }
    for (wait, lease) in [
        ("0", "1"),
        ("30", "2.001"),
        ("1.5", "1.50"),
        ("86400", "86400"),
    ] {
        let line = c.request(&format!("A d {wait} {lease}")).await;
        let t = grant_token(&line, "d");
        assert_eq!(c.request(&format!("R d {t}")).await, "R d");
    }
}

/// How precisely a refusal must name its request.
enum Want {
    /// `E <op> <key>`.
    Exact(&'static str, &'static str),
    /// `E <op> <anything>`: the key itself is the problem, or unreadable.
    Op(&'static str),
    /// Any `E`: not even the op can be read.
    Any,
}

fn malformed_lines() -> Vec<(Vec<u8>, Want)> {
    use Want::*;
    let long_key = "k".repeat(251);
    let mut cases: Vec<(Vec<u8>, Want)> = vec![
        (b"".to_vec(), Exact("?", "?")),
        (b"X k 1 1".to_vec(), Any),
        (b"a k 1 1".to_vec(), Any),
        (b"T k".to_vec(), Any),
        (b"N R k".to_vec(), Any),
        (b" A k 1 1".to_vec(), Any),
        (b"A".to_vec(), Op("A")),
        (b"A k".to_vec(), Exact("A", "k")),
        (b"A k 1".to_vec(), Exact("A", "k")),
        (b"A k 1 1 1".to_vec(), Exact("A", "k")),
        (b"A k 1 1 ".to_vec(), Op("A")),
        (b"A  k 1 1".to_vec(), Any),
        (b"A k  1 1".to_vec(), Op("A")),
        (b"A k 1  1".to_vec(), Op("A")),
        (b"A k\x01x 1 1".to_vec(), Op("A")),
        (b"A k\x7fx 1 1".to_vec(), Op("A")),
        (b"A k\tx 1 1".to_vec(), Op("A")),
        (b"A \x00 1 1".to_vec(), Op("A")),
        (b"A k\x1bx 1 1".to_vec(), Op("A")),
        (format!("A {long_key} 1 1").into_bytes(), Op("A")),
        (b"R".to_vec(), Op("R")),
        (b"R k".to_vec(), Exact("R", "k")),
        (b"R k 1 2".to_vec(), Exact("R", "k")),
        (b"K k 1".to_vec(), Exact("K", "k")),
        (b"K k 1 5 5".to_vec(), Exact("K", "k")),
        (b"S x".to_vec(), Op("S")),
        (b"S ".to_vec(), Op("S")),
        (format!("R {long_key} 1").into_bytes(), Op("R")),
    ];
    // Durations: not numbers, too many decimals, negative, exponent, hex,
    // zero lease, above the default maxima of one day, overflowing.
    for bad in [
        "abc",
        "1.2345",
        "-1",
        "1e3",
        "0x10",
        "1,5",
        "1.2.3",
        "86400.001",
        "86401",
        "99999999999999999999999",
    ] {
        cases.push((format!("A k {bad} 1").into_bytes(), Exact("A", "k")));
        cases.push((format!("A k 1 {bad}").into_bytes(), Exact("A", "k")));
        cases.push((format!("K k 1 {bad}").into_bytes(), Exact("K", "k")));
    }
    for zero in ["0", "0.0", "0.000"] {
        cases.push((format!("A k 1 {zero}").into_bytes(), Exact("A", "k")));
        cases.push((format!("K k 1 {zero}").into_bytes(), Exact("K", "k")));
    }
    // Tokens: zero, not numbers, negative, fractional, above u64.
    for bad in [
        "0",
        "abc",
        "-1",
        "1.5",
        "18446744073709551616",
        "99999999999999999999999",
    ] {
        cases.push((format!("R k {bad}").into_bytes(), Exact("R", "k")));
        cases.push((format!("K k {bad} 5").into_bytes(), Exact("K", "k")));
    }
    cases
}

#[tokio::test]
async fn malformed_requests_get_e_change_nothing_and_keep_the_connection() {
    let node = Batond::start(&[]);
    let mut c = node.connect().await;
    // Some state that a faulty parser could disturb.
    let t = grant_token(&c.request("A held 0 60").await, "held");
    let mut waiter = node.connect().await;
    waiter.send("A held 0 60").await;
    let before = c
        .wait_status("showing the waiter", Duration::from_secs(5), |s| {
            status_u64(s, "waiters") == 1
        })
        .await;
    let before = (
        status_u64(&before, "token"),
        status_u64(&before, "locks"),
        status_u64(&before, "waiters"),
    );
    for (line, want) in malformed_lines() {
        let mut bytes = line.clone();
        bytes.push(b'\n');
        c.send_raw(&bytes).await;
        let answer = c.recv().await;
        let shown = String::from_utf8_lossy(&line);
        assert!(
            !answer.contains('\r'),
            "answer to {shown:?} has a CR: {answer:?}"
        );
        let check = std::panic::catch_unwind(|| match want {
            Want::Exact(op, key) => assert_error(&answer, op, Some(key)),
            Want::Op(op) => assert_error(&answer, op, None),
            Want::Any => assert_any_error(&answer),
        });
        if check.is_err() {
            panic!("request {shown:?} was answered {answer:?}");
        }
        assert_eq!(
            counters(&mut c).await,
            before,
            "request {shown:?} (answered {answer:?}) changed the node"
        );
    }
    waiter.expect_silence(Duration::from_millis(50)).await;
    assert_eq!(c.request(&format!("R held {t}")).await, "R held");
    grant_token(&waiter.recv().await, "held");
}

#[tokio::test]
async fn over_configured_maxima_is_refused() {
    let node = Batond::start(&["--max-wait", "5", "--max-lease", "10"]);
    let mut c = node.connect().await;
    let before = counters(&mut c).await;
    for (line, op) in [
        ("A k 6 5", "A"),
        ("A k 5.001 5", "A"),
        ("A k 5 11", "A"),
        ("A k 5 10.001", "A"),
        ("K k 1 11", "K"),
    ] {
        let answer = c.request(line).await;
        assert_error(&answer, op, Some("k"));
        assert_eq!(counters(&mut c).await, before, "{line:?} changed the node");
    }
    // At the maxima is allowed; wait 0 (no limit) is not above a maximum.
    let t = grant_token(&c.request("A k 5 10").await, "k");
    assert_eq!(c.request(&format!("K k {t} 10")).await, "K k");
    assert_error(&c.request(&format!("K k {t} 10.5")).await, "K", Some("k"));
    assert_eq!(c.request(&format!("R k {t}")).await, "R k");
    let t = grant_token(&c.request("A k 0 10").await, "k");
    assert_eq!(c.request(&format!("R k {t}")).await, "R k");
}

#[tokio::test]
async fn line_of_1025_bytes_is_too_long_and_the_connection_goes_on() {
    let node = Batond::start(&[]);
    let mut c = node.connect().await;
    // 1024 bytes + LF: one byte over the limit.
    let mut line = vec![b'x'; 1024];
    line.push(b'\n');
    c.send_raw(&line).await;
    assert_eq!(c.recv().await, "E ? ? line too long");
    assert!(c.request("S").await.starts_with("S "));

    // 1023 bytes + LF is within the limit: refused for its content only.
    let mut line = b"A ".to_vec();
    line.extend(std::iter::repeat_n(b'x', 1021));
    line.push(b'\n');
    assert_eq!(line.len(), 1024);
    c.send_raw(&line).await;
    let answer = c.recv().await;
    assert_error(&answer, "A", None);
    assert_ne!(answer, "E ? ? line too long");

    // A long request line (valid prefix, then junk) is discarded up to its
    // LF, and the request after it in the same write is served.
    let mut burst = b"A k 0 10 ".to_vec();
    burst.extend(std::iter::repeat_n(b'y', 20_000));
    burst.extend_from_slice(b"\nA k 0 10\n");
    c.send_raw(&burst).await;
    assert_eq!(c.recv().await, "E ? ? line too long");
    grant_token(&c.recv().await, "k");
    c.expect_silence(Duration::from_millis(200)).await;
}

#[tokio::test]
async fn long_line_written_in_pieces_gets_one_error() {
    let node = Batond::start(&[]);
    let mut c = node.connect().await;
    for _ in 0..10 {
        c.send_raw(&[b'z'; 700]).await;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    c.send_raw(b"\nS\n").await;
    assert_eq!(c.recv().await, "E ? ? line too long");
    assert!(c.recv().await.starts_with("S "));
    c.expect_silence(Duration::from_millis(200)).await;
}
