//! Conformance of a real `batond` to the text of docs/protocol.md, one
//! exchange per rule: every request and answer form with its exact bytes,
//! every documented error reason, each limit at and one past its boundary,
//! numbers, whitespace, case and CRLF as the text specifies, pipelining,
//! and the `S` fields. The exchanges that make sense in a cluster run
//! unchanged on a Raft leader and a priority active; followers and
//! standbys give the redirect forms.
//!
//! Patterns: `{#}` is a token (a decimal u64 above 0, no leading zero),
//! `{~}` seconds with exactly three decimals, `{*}` any non-empty field
//! text; everything else is literal.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use baton_tests::cluster::Cluster;
use baton_tests::raft::{RaftCluster, SERIAL as RAFT_SERIAL, SETTLE as RAFT_SETTLE};
use baton_tests::{grant_token, parse_status, Batond, LineClient};

#[path = "protocol_conformance/table.rs"]
mod table;

use table::{documented_errors, fits};

/// The maxima every node of these tests runs with, so that the
/// documented `exceeds the maximum` reasons can be checked exactly.
pub(crate) const LIMIT_FLAGS: [&str; 4] = ["--max-wait", "5", "--max-lease", "10"];

/// Sends `request` (raw bytes, LF added) and checks the one answer.
async fn exchange(c: &mut LineClient, request: &[u8], pattern: &str) -> String {
    let mut bytes = request.to_vec();
    bytes.push(b'\n');
    c.send_raw(&bytes).await;
    let answer = c.recv().await;
    assert!(
        fits(&answer, pattern),
        "{:?} was answered {answer:?}, the text says {pattern:?}",
        String::from_utf8_lossy(request)
    );
    answer
}

/// The state tag docs/protocol.md defines for holders `(token, shared,
/// value)` in token order: FNV-1a 64 over token, mode and value.
fn state_tag(holders: &[(u64, bool, &str)]) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes {
            hash ^= u64::from(b);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    for (token, shared, value) in holders {
        eat(&token.to_be_bytes());
        eat(&[u8::from(*shared), value.len() as u8]);
        eat(value.as_bytes());
    }
    let newest = holders.iter().map(|h| h.0).max().unwrap_or_default();
    format!("{newest}.{}.{hash:016x}", holders.len())
}

/// The 1.1 requests, every success and failure form, on a serving node.
async fn requests_of_1_1(c: &mut LineClient) {
    let t = grant_token(&exchange(c, b"A c/a 0 10", "A c/a {#}").await, "c/a");
    exchange(
        c,
        b"Q c/a",
        &format!("Q c/a token={t} lease={{~}} waiters=0"),
    )
    .await;
    exchange(c, format!("K c/a {t} 10").as_bytes(), "K c/a").await;
    let sent = Instant::now();
    exchange(c, b"A c/a 0.2 10", "T c/a").await;
    let took = sent.elapsed();
    assert!(took >= Duration::from_millis(200), "T after {took:?}");
    assert!(took < Duration::from_millis(3200), "T after {took:?}");
    exchange(
        c,
        b"U someone secret",
        "E U someone authentication is not enabled",
    )
    .await;
    exchange(c, format!("R c/a {t}").as_bytes(), "R c/a").await;
    exchange(c, format!("R c/a {t}").as_bytes(), "N R c/a").await;
    exchange(c, format!("K c/a {t} 5").as_bytes(), "N K c/a").await;
    exchange(c, b"Q c/a", "Q c/a token=- lease=- waiters=0").await;
    // Never granted: N too, not E.
    exchange(c, b"R c/never 1", "N R c/never").await;
    exchange(c, b"K c/never 18446744073709551615 1", "N K c/never").await;
}

/// The 1.2 requests and answer forms, state tags computed as the text says.
async fn requests_of_1_2(c: &mut LineClient) {
    let t = granted(c, "A c/v 0 10 value=v1", "c/v").await;
    let tag = state_tag(&[(t, false, "v1")]);
    let extended = format!(
        "Q c/v token={t} lease={{~}} waiters=0 permits=1 mode=exclusive holders=1 holder={t},{{~}},v1 state={tag}"
    );
    exchange(c, b"Q c/v", &extended).await;
    exchange(c, b"W c/v 1 -", &format!("W{}", &extended[1..])).await;
    exchange(c, format!("V c/v {t} a=b,c").as_bytes(), "V c/v").await;
    let tag = state_tag(&[(t, false, "a=b,c")]);
    exchange(
        c,
        b"Q c/v",
        &format!("Q c/v {{*}} {{*}} {{*}} {{*}} {{*}} {{*}} holder={t},{{~}},a=b,c state={tag}"),
    )
    .await;
    exchange(c, format!("V c/v {t} -").as_bytes(), "V c/v").await;
    // Without its value the key is plain again: the 1.1 line, tag = token.
    exchange(
        c,
        b"Q c/v",
        &format!("Q c/v token={t} lease={{~}} waiters=0"),
    )
    .await;
    let sent = Instant::now();
    let plain = format!("W c/v token={t} lease={{~}} waiters=0 state={t}");
    exchange(c, format!("W c/v 0.3 {t}").as_bytes(), &plain).await;
    assert!(
        sent.elapsed() >= Duration::from_millis(300),
        "a watch of the same tag waits"
    );
    exchange(c, format!("R c/v {t}").as_bytes(), "R c/v").await;
    exchange(c, format!("V c/v {t} x").as_bytes(), "N V c/v").await;
    exchange(c, format!("V c/v {t} -").as_bytes(), "N V c/v").await;
    exchange(
        c,
        format!("W c/v 1 {t}").as_bytes(),
        "W c/v token=- lease=- waiters=0 state=-",
    )
    .await;
    exchange(c, b"W c/v 0.2 -", "W c/v token=- lease=- waiters=0 state=-").await;

    let (p1, p2) = (
        granted(c, "A c/p 0 10 permits=2", "c/p").await,
        granted(c, "A c/p 0 10 permits=2", "c/p").await,
    );
    for other in ["", " permits=3", " mode=shared"] {
        let line = format!("A c/p 0 10{other}");
        exchange(c, line.as_bytes(), "E A c/p the key has 2 permits").await;
    }
    exchange(c, b"A c/p 0.2 10 permits=2", "T c/p").await;
    two_holders_are_reported(c, "c/p", (p1, p2), "permits=2 mode=exclusive").await;
    // Free again: the key takes the permits of the acquire that comes.
    let p = granted(c, "A c/p 0 10", "c/p").await;
    exchange(c, format!("R c/p {p}").as_bytes(), "R c/p").await;

    let (s1, s2) = (
        granted(c, "A c/s 0 10 mode=shared", "c/s").await,
        granted(c, "A c/s 0 10 mode=shared permits=1", "c/s").await,
    );
    exchange(c, b"A c/s 0.2 10 mode=exclusive", "T c/s").await;
    two_holders_are_reported(c, "c/s", (s1, s2), "permits=1 mode=shared").await;
}

/// The grant of an acquire that the text says is granted at once.
async fn granted(c: &mut LineClient, request: &str, key: &str) -> u64 {
    let answer = exchange(c, request.as_bytes(), &format!("A {key} {{#}}")).await;
    grant_token(&answer, key)
}

/// `Q` of a key with two holders without values, as the text writes it,
/// its tag computed by the text's rule; then both are released.
async fn two_holders_are_reported(c: &mut LineClient, key: &str, (a, b): (u64, u64), kind: &str) {
    let tag = state_tag(&[
        (a, kind.ends_with("shared"), ""),
        (b, kind.ends_with("shared"), ""),
    ]);
    let holders = format!("holders=2 holder={a},{{~}},- holder={b},{{~}},- state={tag}");
    let q = format!("Q {key} token={b} lease={{~}} waiters=0 {kind} {holders}");
    exchange(c, format!("Q {key}").as_bytes(), &q).await;
    for t in [a, b] {
        exchange(c, format!("R {key} {t}").as_bytes(), &format!("R {key}")).await;
    }
}

/// Every documented refusal, answered exactly and changing nothing.
async fn documented_errors_are_answered_exactly(c: &mut LineClient) {
    for (line, answer) in documented_errors() {
        exchange(c, &line, &answer).await;
    }
    let status = parse_status(&c.request("S").await);
    assert_eq!(
        (status["locks"].as_str(), status["waiters"].as_str()),
        ("0", "0"),
        "{status:?}"
    );
}

/// Limits and numbers at their boundary, accepted.
async fn boundaries_are_accepted(c: &mut LineClient) {
    let key250 = "k".repeat(250);
    let value128 = "v".repeat(128);
    for (line, key) in [
        (format!("A {key250} 5 10"), key250.as_str()),
        (format!("A b/v 0.001 10 value={value128}"), "b/v"),
        ("A b/p 5.000 10.000 permits=10000".to_owned(), "b/p"),
        ("A b/z 004 010".to_owned(), "b/z"),
        ("A b/m 0 1 mode=exclusive permits=1".to_owned(), "b/m"),
    ] {
        let t = grant_token(
            &exchange(c, line.as_bytes(), &format!("A {key} {{#}}")).await,
            key,
        );
        // Leading zeros are read as decimal in tokens too.
        exchange(c, format!("R {key} 0{t}").as_bytes(), &format!("R {key}")).await;
    }
}

/// CR, spaces and the line length as the text says: only one CR right
/// before the LF is dropped, and it counts in the 1024 bytes.
async fn framing(c: &mut LineClient) {
    // "Q <250 bytes> " is 253 bytes: the padding makes the line's length.
    let pad = |n: usize| format!("Q {} {}", "k".repeat(250), "x".repeat(n));
    for (bytes, answer) in [
        (format!("{}\n", pad(770)), "too many fields"),
        (format!("{}\n", pad(771)), "E ? ? line too long"),
        (format!("{}\r\n", pad(769)), "too many fields"),
        (format!("{}\r\n", pad(770)), "E ? ? line too long"),
        ("S\r\r\n".to_owned(), "E ? ? unknown op"),
        ("\r\n".to_owned(), "E ? ? empty line"),
        ("S\rS\n".to_owned(), "E ? ? unknown op"),
    ] {
        c.send_raw(bytes.as_bytes()).await;
        let line = c.recv().await;
        assert!(
            line.ends_with(answer),
            "{} bytes {:?}: {line:?}",
            bytes.len(),
            &bytes[..4]
        );
    }
    c.send_raw(b"S\r\n").await;
    assert!(c.recv().await.starts_with("S role="));
}

/// Runs every exchange that a serving node of any mode answers alike.
async fn serving_node_conforms(addr: SocketAddr) {
    let mut c = LineClient::connect(addr).await;
    c.set_timeout(Duration::from_secs(10));
    requests_of_1_1(&mut c).await;
    requests_of_1_2(&mut c).await;
    documented_errors_are_answered_exactly(&mut c).await;
    boundaries_are_accepted(&mut c).await;
    framing(&mut c).await;
}

/// A client that sends its requests and then closes its sending side
/// (`printf ... | nc -N`) reads every answer due, then the end of the
/// stream; its acquire still queued leaves the queue unanswered.
async fn half_closed_connections_get_every_answer_due(addr: SocketAddr) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut holder = LineClient::connect(addr).await;
    let t = grant_token(&holder.request("A h/held 0 10").await, "h/held");
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    // No A or W of a free key: one read together with the close is dropped
    // (the client is gone as far as grants go), one read before it is
    // served, and which comes first is the network's choice.
    let requests = "R h/x 1\nQ h/held\nK h/x 1 1\nV h/x 1 v\nA h/held 4 10\nS\n";
    stream.write_all(requests.as_bytes()).await.expect("write");
    stream.shutdown().await.expect("half-close");
    let mut text = String::new();
    let read = tokio::time::timeout(Duration::from_secs(10), stream.read_to_string(&mut text));
    read.await
        .expect("the node closes once it has answered")
        .expect("read");
    let mut answers: Vec<&str> = text.lines().collect();
    answers.sort_unstable();
    assert_eq!(answers.len(), 5, "{text:?}");
    let query = format!("Q h/held token={t} lease={{~}} waiters={{*}}");
    let status = "S role={*} mode={*} self={*}";
    for (answer, want) in answers
        .iter()
        .zip(["N K h/x", "N R h/x", "N V h/x", &query, status])
    {
        let answer = answer.splitn(5, ' ').take(4).collect::<Vec<_>>().join(" ");
        let want = want.splitn(5, ' ').take(4).collect::<Vec<_>>().join(" ");
        assert!(fits(&answer, &want), "{answer:?} for {want:?} in {text:?}");
    }
    let status = holder
        .wait_status("without the waiter", Duration::from_secs(5), |s| {
            s["waiters"] == "0"
        })
        .await;
    assert_eq!(status["locks"], "1", "{status:?}");
    assert_eq!(holder.request(&format!("R h/held {t}")).await, "R h/held");
}

/// The `S` fields a serving node must give, with their documented values.
fn check_status(line: &str, role: &str, mode: &str, addr: SocketAddr) {
    let s = parse_status(line);
    assert_eq!(s.get("role").map(String::as_str), Some(role), "{line}");
    assert_eq!(s.get("mode").map(String::as_str), Some(mode), "{line}");
    assert_eq!(s.get("self"), Some(&addr.to_string()), "{line}");
    for number in ["token", "locks", "waiters"] {
        assert!(
            s.get(number).is_some_and(|v| v.parse::<u64>().is_ok()),
            "{number}: {line}"
        );
    }
    assert!(s.contains_key("active"), "{line}");
    let fields: Vec<&str> = line.split(' ').collect();
    let n = fields.len();
    assert!(
        fields[n - 1].starts_with("version="),
        "version= is last: {line}"
    );
    assert_eq!(
        fields[n - 2],
        "protocol=1.2",
        "protocol= right before version=: {line}"
    );
}

#[tokio::test]
async fn a_single_node_answers_every_rule_of_the_text() {
    let node = Batond::start(&LIMIT_FLAGS);
    serving_node_conforms(node.addr()).await;
    half_closed_connections_get_every_answer_due(node.addr()).await;
    let mut c = node.connect().await;
    let status = c.request("S").await;
    check_status(&status, "single", "single", node.addr());
    assert_eq!(parse_status(&status)["active"], node.addr().to_string());
}

#[tokio::test]
async fn pipelined_requests_get_one_answer_each_and_a_wait_holds_back_none() {
    let node = Batond::start(&LIMIT_FLAGS);
    let mut c = node.connect().await;
    let lines = [
        "A p/1 0 10",
        "S",
        "",
        "Q p/2",
        "X",
        "A p/1 1 10",
        "R p/1 1",
        "R p/1 1",
        "K p/1 1 1",
        "S",
        "A p/2 0 10 permits=0",
        "W p/2 0.1 -",
    ];
    let burst: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let sent = Instant::now();
    c.send_raw(burst.as_bytes()).await;
    let mut answers = Vec::new();
    for _ in &lines {
        answers.push(c.recv().await);
    }
    let t = grant_token(&answers[0], "p/1");
    let last = answers.pop().unwrap_or_default();
    assert_eq!(
        last, "T p/1",
        "the waiting acquire is answered last: {answers:?}"
    );
    assert!(
        sent.elapsed() >= Duration::from_secs(1),
        "T before the wait ran out"
    );
    let statuses: Vec<&String> = answers.iter().filter(|a| a.starts_with("S ")).collect();
    assert_eq!(statuses.len(), 2, "{answers:?}");
    assert!(statuses[0].contains(" waiters=0 ") || statuses[0].contains(" waiters=1 "));
    let mut rest: Vec<&str> = answers[1..]
        .iter()
        .map(String::as_str)
        .filter(|a| !a.starts_with("S "))
        .collect();
    rest.sort_unstable();
    let mut want = vec![
        "E ? ? empty line",
        "Q p/2 token=- lease=- waiters=0",
        "E ? ? unknown op",
        "N R p/1",
        "N R p/1",
        "N K p/1",
        "E A p/2 permits must be a decimal integer from 1 to 10000",
        "W p/2 token=- lease=- waiters=0 state=-",
    ];
    want.sort_unstable();
    assert_eq!(rest, want);
    // Releases of one key on one connection are answered in order.
    c.send_raw(format!("R p/1 {t}\nR p/1 {t}\n").as_bytes())
        .await;
    assert_eq!(c.recv().await, "R p/1");
    assert_eq!(c.recv().await, "N R p/1");
    c.expect_silence(Duration::from_millis(100)).await;
}

#[tokio::test]
async fn the_quota_refusals_read_as_the_text_says() {
    let flags = [
        "--max-locks",
        "2",
        "--max-waiters",
        "1",
        "--max-watches-per-connection",
        "1",
    ];
    let node = Batond::start(&flags);
    let mut c = node.connect().await;
    let t1 = grant_token(&exchange(&mut c, b"A l/1 0 10", "A l/1 {#}").await, "l/1");
    grant_token(&exchange(&mut c, b"A l/2 0 10", "A l/2 {#}").await, "l/2");
    exchange(&mut c, b"A l/3 0 10", "E A l/3 too many locks").await;
    exchange(&mut c, b"A l/3 0 10 mode=shared", "E A l/3 too many locks").await;
    let mut waiter = node.connect().await;
    waiter.send("A l/1 5 10").await;
    c.wait_status("showing the waiter", Duration::from_secs(5), |s| {
        s["waiters"] == "1"
    })
    .await;
    exchange(&mut c, b"A l/2 5 10", "E A l/2 too many waiters").await;
    c.send("W l/9 5 -").await;
    c.expect_silence(Duration::from_millis(100)).await;
    exchange(&mut c, b"W l/8 5 -", "E W l/8 too many watches").await;
    exchange(&mut c, format!("R l/1 {t1}").as_bytes(), "R l/1").await;
    grant_token(&waiter.recv().await, "l/1");

    let node = Batond::start(&["--max-pending", "1"]);
    let mut holder = node.connect().await;
    let h = grant_token(&holder.request("A m 0 10").await, "m");
    let mut c = node.connect().await;
    c.send("A m 5 10").await;
    holder
        .wait_status("showing the waiter", Duration::from_secs(5), |s| {
            s["waiters"] == "1"
        })
        .await;
    let refused = "E A n too many pending requests on this connection (max 1)";
    exchange(&mut c, b"A n 5 10", refused).await;
    // Only acquires are refused: other requests are answered as ever.
    exchange(&mut c, b"Q n", "Q n token=- lease=- waiters=0").await;
    assert_eq!(holder.request(&format!("R m {h}")).await, "R m");
    grant_token(&c.recv().await, "m");
}

#[tokio::test]
async fn with_users_a_malformed_line_is_refused_as_such_before_authentication() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("users.toml");
    let secret = "s".repeat(250);
    let users = format!("[[user]]\nname = \"u\"\nsecret = \"{secret}\"\nprefixes = [\"u/\"]\n");
    std::fs::write(&path, users).expect("write the users file");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    }
    let path = path.to_string_lossy().into_owned();
    let node = Batond::start(&["--auth-file", &path]);
    let mut c = node.connect().await;
    for (line, answer) in [
        ("S", "E S ? authentication required".to_owned()),
        ("Q u/k", "E Q u/k authentication required".to_owned()),
        ("", "E ? ? empty line".to_owned()),
        ("A u/k 1", "E A u/k missing lease".to_owned()),
        ("U u", "E U u missing secret".to_owned()),
        ("U u x", "E U u authentication failed".to_owned()),
        (
            &*format!("U u {secret}s"),
            "E U u secret is 251 bytes, longer than 250".to_owned(),
        ),
        (&*format!("U u {secret}"), "U u".to_owned()),
        ("A v/k 1 1", "E A v/k permission denied".to_owned()),
        ("W v/k 1 -", "E W v/k permission denied".to_owned()),
        ("A u/k 1 1", "A u/k {#}".to_owned()),
    ] {
        exchange(&mut c, line.as_bytes(), &answer).await;
    }
}

/// What a node that does not serve answers: `M` to every request on a
/// key, naming `serving`; `E` to a malformed line; `S` about itself.
async fn redirects_to(addr: SocketAddr, serving: SocketAddr, role: &str, mode: &str) {
    let mut c = LineClient::connect(addr).await;
    for (line, op) in [
        ("A k 1 1", "A"),
        ("A k 1 1 permits=2 mode=exclusive value=x", "A"),
        ("R k 1", "R"),
        ("K k 1 1", "K"),
        ("Q k", "Q"),
        ("V k 1 x", "V"),
        ("V k 1 -", "V"),
        ("W k 1 -", "W"),
    ] {
        exchange(&mut c, line.as_bytes(), &format!("M {op} k {serving}")).await;
    }
    exchange(&mut c, b"A k 1", "E A k missing lease").await;
    exchange(
        &mut c,
        b"W k 1 x",
        "E W k seen must be - or a state tag from a Q or W answer",
    )
    .await;
    exchange(&mut c, b"", "E ? ? empty line").await;
    exchange(&mut c, b"U u s", "E U u authentication is not enabled").await;
    let status = c.request("S").await;
    check_status(&status, role, mode, addr);
    assert_eq!(parse_status(&status)["active"], serving.to_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raft_leader_answers_every_rule_and_followers_redirect() {
    let _serial = RAFT_SERIAL.lock().await;
    let mut cluster = RaftCluster::start_with(3, &LIMIT_FLAGS);
    let (leader, _) = cluster.wait_leader(RAFT_SETTLE).await;
    let serving = cluster.peers[leader];
    serving_node_conforms(serving).await;
    let mut c = LineClient::connect(serving).await;
    check_status(&c.request("S").await, "leader", "raft", serving);
    half_closed_connections_get_every_answer_due(serving).await;
    for i in (0..3).filter(|&i| i != leader) {
        redirects_to(cluster.peers[i], serving, "follower", "raft").await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_priority_active_answers_every_rule_and_standbys_redirect() {
    let mut cluster = Cluster::start(2, &LIMIT_FLAGS);
    let active = cluster.wait_single_active(Duration::from_secs(10)).await;
    let serving = cluster.addr(active);
    serving_node_conforms(serving).await;
    let mut c = LineClient::connect(serving).await;
    check_status(&c.request("S").await, "active", "priority", serving);
    half_closed_connections_get_every_answer_due(serving).await;
    redirects_to(cluster.addr(1 - active), serving, "standby", "priority").await;
}
