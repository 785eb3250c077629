//! Protocol 1.2 on a real single `batond` (docs/protocol.md 1.2): semaphores,
//! shared (readers-writer) locks, holder values (`V`), watches (`W`) with
//! their limits, `S protocol=1.2`, the caps of `--max-locks`, permissions,
//! durability across a restart with `--data-dir`, and every 1.1 exchange
//! byte for byte as before.

mod auth_support;

use std::time::Duration;

use auth_support::{login, node_with_users, BILLING_SECRET};
use baton_tests::http::{http_get, Scrape};
use baton_tests::{assert_error, free_addr, grant_token, parse_status, Batond, LineClient};

const QUIET: Duration = Duration::from_millis(300);

/// The field `name=` of a `Q` or `W` line.
fn field<'a>(line: &'a str, name: &str) -> &'a str {
    line.split(' ')
        .find_map(|f| f.strip_prefix(name).and_then(|f| f.strip_prefix('=')))
        .unwrap_or_else(|| panic!("no {name}= in {line:?}"))
}

/// The tokens of a line's `holder=` fields, in order.
fn holders(line: &str) -> Vec<u64> {
    line.split(' ')
        .filter_map(|f| f.strip_prefix("holder="))
        .map(|h| h.split(',').next().unwrap_or("").parse().expect("token"))
        .collect()
}

#[tokio::test]
async fn a_semaphore_grants_its_permits_and_no_more() {
    let node = Batond::start(&[]);
    let mut a = node.connect().await;
    let t1 = grant_token(&a.request("A pool 0 30 permits=3").await, "pool");
    let t2 = grant_token(&a.request("A pool 0 30 permits=3").await, "pool");
    let t3 = grant_token(&a.request("A pool 0 30 permits=3 value=w3").await, "pool");
    assert!(t1 < t2 && t2 < t3);
    let mut waiter = node.connect().await;
    waiter.send("A pool 0 30 permits=3").await;
    waiter.expect_silence(QUIET).await;
    // Another count of permits, or a shared acquire, changes nothing.
    assert_eq!(
        a.request("A pool 0 30 permits=4").await,
        "E A pool the key has 3 permits"
    );
    assert_eq!(
        a.request("A pool 0 30").await,
        "E A pool the key has 3 permits"
    );
    assert_eq!(
        a.request("A pool 0 30 mode=shared").await,
        "E A pool the key has 3 permits"
    );
    let q = a.request("Q pool").await;
    assert_eq!(field(&q, "token"), t3.to_string());
    assert_eq!(field(&q, "waiters"), "1");
    assert_eq!(field(&q, "permits"), "3");
    assert_eq!(field(&q, "mode"), "exclusive");
    assert_eq!(field(&q, "holders"), "3");
    assert_eq!(holders(&q), vec![t1, t2, t3]);
    assert!(
        q.contains(&format!(" holder={t3},")) && q.contains(",w3 state="),
        "{q}"
    );
    // Each permit is released on its own; the waiter gets the freed one.
    assert_eq!(a.request(&format!("R pool {t2}")).await, "R pool");
    let t4 = grant_token(&waiter.recv().await, "pool");
    assert!(t4 > t3);
    assert_eq!(a.request(&format!("K pool {t1} 30")).await, "K pool");
    assert_eq!(a.request(&format!("R pool {t2}")).await, "N R pool");
    assert_eq!(holders(&a.request("Q pool").await), vec![t1, t3, t4]);
}

#[tokio::test]
async fn readers_share_a_key_and_a_waiting_writer_is_not_overtaken() {
    let node = Batond::start(&[]);
    let mut c = node.connect().await;
    let r1 = grant_token(&c.request("A rw 0 30 mode=shared").await, "rw");
    let r2 = grant_token(&c.request("A rw 0 30 mode=shared").await, "rw");
    let mut writer = node.connect().await;
    writer.send("A rw 0 30").await;
    writer.expect_silence(QUIET).await;
    // A reader arriving behind the writer waits behind it.
    let mut late = [node.connect().await, node.connect().await];
    for reader in &mut late {
        reader.send("A rw 0 30 mode=shared").await;
    }
    late[0].expect_silence(QUIET).await;
    assert_eq!(
        c.request("A rw 0 30 mode=shared permits=2").await,
        "E A rw shared locks take no permits"
    );
    let q = c.request("Q rw").await;
    assert_eq!(
        (
            field(&q, "mode"),
            field(&q, "holders"),
            field(&q, "waiters")
        ),
        ("shared", "2", "3")
    );
    assert_eq!(c.request(&format!("R rw {r1}")).await, "R rw");
    writer.expect_silence(QUIET).await;
    assert_eq!(c.request(&format!("R rw {r2}")).await, "R rw");
    let w = grant_token(&writer.recv().await, "rw");
    late[1].expect_silence(QUIET).await;
    assert_eq!(writer.request(&format!("R rw {w}")).await, "R rw");
    // Both readers at the head are granted together, each its own token.
    // Sent on two connections, the two may have queued in either order.
    let first = grant_token(&late[0].recv().await, "rw");
    let second = grant_token(&late[1].recv().await, "rw");
    let (a, b) = (first.min(second), first.max(second));
    assert!(w < a && a < b, "{w} {a} {b}");
    assert_eq!(holders(&c.request("Q rw").await), vec![a, b]);
}

#[tokio::test]
async fn values_are_set_cleared_and_reported() {
    let node = Batond::start(&[]);
    let mut c = node.connect().await;
    let t = grant_token(
        &c.request("A leader 0 30 value=10.0.0.7:8080").await,
        "leader",
    );
    let q = c.request("Q leader").await;
    assert_eq!(field(&q, "holders"), "1");
    assert!(
        q.contains(&format!(" holder={t},")) && q.contains(",10.0.0.7:8080 state="),
        "{q}"
    );
    assert_eq!(
        c.request(&format!("V leader {t} node-b,zone=2")).await,
        "V leader"
    );
    assert!(c
        .request("Q leader")
        .await
        .contains(",node-b,zone=2 state="));
    assert_eq!(
        c.request(&format!("V leader {} x", t + 1)).await,
        "N V leader"
    );
    assert_eq!(c.request("V nobody 1 x").await, "N V nobody");
    assert_eq!(c.request(&format!("V leader {t} -")).await, "V leader");
    // Without a value the key is plain again: the 1.1 answer.
    let q = c.request("Q leader").await;
    assert_eq!(q.split(' ').count(), 5, "{q}");
    let long = "v".repeat(129);
    assert_eq!(
        c.request(&format!("V leader {t} {long}")).await,
        "E V leader value is 129 bytes, longer than 128"
    );
    assert_eq!(
        c.request("A k 0 30 value=-").await,
        "E A k value cannot be -, which means no value"
    );
    assert_eq!(
        c.request("A k 0 30 flavour=x").await,
        "E A k unknown option flavour"
    );
    assert_eq!(
        c.request("A k 0 30 permits=2 permits=2").await,
        "E A k repeated option permits"
    );
    assert_eq!(
        c.request("A k 0 30 permits=10001").await,
        "E A k permits must be a decimal integer from 1 to 10000"
    );
}

#[tokio::test]
async fn a_watch_is_answered_at_once_on_each_change_or_when_its_wait_runs_out() {
    let node = Batond::start(&[]);
    let mut c = node.connect().await;
    // Saw something else: answered at once, with the state tag.
    assert_eq!(
        c.request("W k 5 7").await,
        "W k token=- lease=- waiters=0 state=-"
    );
    let mut w = node.connect().await;
    w.send("W k 30 -").await;
    let mut second = node.connect().await;
    second.send("W k 30 -").await;
    w.expect_silence(QUIET).await;
    let t = grant_token(&c.request("A k 0 30").await, "k");
    let seen = w.recv().await;
    assert!(seen.starts_with(&format!("W k token={t} lease=")), "{seen}");
    assert_eq!(field(&seen, "state"), t.to_string());
    assert!(second.recv().await.starts_with(&format!("W k token={t} ")));
    // A waiter's arrival alone answers nothing; a value does.
    w.send(&format!("W k 30 {t}")).await;
    let mut queued = node.connect().await;
    queued.send("A k 0 30").await;
    w.expect_silence(QUIET).await;
    assert_eq!(c.request(&format!("V k {t} me")).await, "V k");
    let valued = w.recv().await;
    assert_eq!(field(&valued, "holders"), "1");
    let tag = field(&valued, "state").to_owned();
    assert!(tag.starts_with(&format!("{t}.1.")), "{valued}");
    // The hand-over to the waiter answers the watch of the valued state.
    w.send(&format!("W k 30 {tag}")).await;
    assert_eq!(c.request(&format!("R k {t}")).await, "R k");
    let next = grant_token(&queued.recv().await, "k");
    assert_eq!(field(&w.recv().await, "state"), next.to_string());
    // A wait that runs out answers the unchanged state: no T for W.
    let start = std::time::Instant::now();
    let same = w.request(&format!("W k 0.3 {next}")).await;
    assert!(start.elapsed() >= Duration::from_millis(250), "{same}");
    assert_eq!(field(&same, "state"), next.to_string());
    assert_error(&w.request("W k 1 07").await, "W", Some("k"));
    assert_error(&w.request("W k 1").await, "W", Some("k"));
}

#[tokio::test]
async fn an_expiry_answers_a_watch() {
    let node = Batond::start(&[]);
    let mut c = node.connect().await;
    let t = grant_token(&c.request("A lapse 0 0.4").await, "lapse");
    let gone = c.request(&format!("W lapse 10 {t}")).await;
    assert_eq!(gone, "W lapse token=- lease=- waiters=0 state=-");
}

#[tokio::test]
async fn watches_have_their_limits_and_leave_with_their_connection() {
    let node = Batond::start(&["--max-watches", "2", "--max-watches-per-connection", "1"]);
    let mut a = node.connect().await;
    a.send("W k 30 -").await;
    a.expect_silence(Duration::from_millis(100)).await;
    assert_eq!(a.request("W j 30 -").await, "E W j too many watches");
    let mut b = node.connect().await;
    b.send("W k 30 -").await;
    b.expect_silence(Duration::from_millis(100)).await;
    let mut c = node.connect().await;
    assert_eq!(c.request("W k 30 -").await, "E W k too many watches");
    // Gone with a's connection: its place is free again.
    drop(a);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        c.send("W k 0.2 -").await;
        match c.recv().await.as_str() {
            "E W k too many watches" => assert!(std::time::Instant::now() < deadline),
            other => {
                assert!(other.starts_with("W k "), "{other}");
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Watches are not waiters.
    let s = parse_status(&c.request("S").await);
    assert_eq!(s.get("waiters").map(String::as_str), Some("0"));
}

#[tokio::test]
async fn each_permit_and_each_shared_grant_count_against_max_locks() {
    let node = Batond::start(&["--max-locks", "3"]);
    let mut c = node.connect().await;
    grant_token(&c.request("A pool 0 30 permits=5").await, "pool");
    grant_token(&c.request("A pool 0 30 permits=5").await, "pool");
    grant_token(&c.request("A rw 0 30 mode=shared").await, "rw");
    assert_eq!(
        c.request("A rw 0 30 mode=shared").await,
        "E A rw too many locks"
    );
    assert_eq!(
        c.request("A pool 0 30 permits=5").await,
        "E A pool too many locks"
    );
    let s = parse_status(&c.request("S").await);
    assert_eq!(s.get("locks").map(String::as_str), Some("3"));
}

#[tokio::test]
async fn status_says_protocol_1_2_and_1_1_exchanges_are_unchanged() {
    let node = Batond::start(&[]);
    let mut c = node.connect().await;
    let s = c.request("S").await;
    assert!(s.contains(" protocol=1.2 version="), "{s}");
    assert!(!s
        .split(' ')
        .next_back()
        .unwrap_or("")
        .starts_with("protocol="));
    // docs/protocol.md 1.1's example session, byte for byte.
    let t = grant_token(&c.request("A orders/42 5 30").await, "orders/42");
    assert_eq!(c.request(&format!("R orders/42 {t}")).await, "R orders/42");
    assert_eq!(
        c.request(&format!("R orders/42 {t}")).await,
        "N R orders/42"
    );
    assert_eq!(
        c.request("A bad-lease 0 0").await,
        "E A bad-lease lease must be greater than 0"
    );
    let t = grant_token(&c.request("A orders/43 0 10").await, "orders/43");
    let q = c.request("Q orders/43").await;
    assert!(
        q.starts_with(&format!("Q orders/43 token={t} lease=")) && q.ends_with(" waiters=0"),
        "{q}"
    );
    assert_eq!(q.split(' ').count(), 5, "{q}");
    assert_eq!(
        c.request(&format!("K orders/43 {t} 60")).await,
        "K orders/43"
    );
    assert_eq!(c.request("A k 1 1 x").await, "E A k too many fields");
    assert_eq!(c.request("A k 1 1 x=y").await, "E A k unknown option x");
}

#[tokio::test]
async fn w_and_v_need_the_key_s_permission() {
    let (node, _path, _dir) = node_with_users(&[]);
    let mut billing = login(&node, "billing", BILLING_SECRET).await;
    assert_eq!(
        billing.request("W orders/1 1 -").await,
        "E W orders/1 permission denied"
    );
    assert_eq!(
        billing.request("V orders/1 1 x").await,
        "E V orders/1 permission denied"
    );
    let t = grant_token(&billing.request("A billing/1 0 30").await, "billing/1");
    assert_eq!(
        billing.request(&format!("V billing/1 {t} me")).await,
        "V billing/1"
    );
    let w = billing.request("W billing/1 1 -").await;
    assert!(w.starts_with(&format!("W billing/1 token={t} ")), "{w}");
}

#[tokio::test]
async fn semaphores_shared_grants_and_values_survive_a_restart_with_a_data_dir() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().display().to_string();
    let mut node = Batond::start(&["--data-dir", &path]);
    let mut c = node.connect().await;
    let p1 = grant_token(&c.request("A pool 0 60 permits=2 value=a").await, "pool");
    let p2 = grant_token(&c.request("A pool 0 60 permits=2").await, "pool");
    let r1 = grant_token(&c.request("A rw 0 60 mode=shared").await, "rw");
    let before = (c.request("Q pool").await, c.request("Q rw").await);
    // Past the persister's next write (a few times a second).
    tokio::time::sleep(Duration::from_millis(600)).await;
    node.kill();
    node.restart();
    let mut c = node.connect().await;
    let after = (c.request("Q pool").await, c.request("Q rw").await);
    assert_eq!(holders(&after.0), vec![p1, p2], "{after:?}");
    assert_eq!(field(&after.0, "state"), field(&before.0, "state"));
    assert_eq!(field(&after.1, "state"), field(&before.1, "state"));
    assert_eq!(field(&after.1, "mode"), "shared");
    assert!(
        after.0.contains(&format!(" holder={p1},")) && after.0.contains(",a holder="),
        "{after:?}"
    );
    assert_eq!(c.request("A pool 0.2 1 permits=2").await, "T pool");
    let r2 = grant_token(&c.request("A rw 0 60 mode=shared").await, "rw");
    assert!(r2 > r1);
}

/// A client that speaks only 1.1 sees nothing new.
#[tokio::test]
async fn a_1_1_client_reads_every_answer_as_before() {
    let node = Batond::start(&[]);
    let mut old = LineClient::connect(node.addr()).await;
    let t = grant_token(&old.request("A k 0 30").await, "k");
    let mut other = node.connect().await;
    other.send("A k 0 30").await;
    other.expect_silence(QUIET).await;
    let q = old.request("Q k").await;
    assert_eq!(
        q,
        format!("Q k token={t} lease={} waiters=1", field(&q, "lease"))
    );
    assert_eq!(old.request(&format!("R k {t}")).await, "R k");
    grant_token(&other.recv().await, "k");
}

#[tokio::test]
async fn v1_locks_lists_holders_permits_modes_and_values_and_metrics_count_the_new_ops() {
    let http = free_addr();
    let node = Batond::start(&["--http-listen", &http.to_string()]);
    let mut c = node.connect().await;
    let t1 = grant_token(&c.request("A pool 0 60 permits=2 value=w1").await, "pool");
    let t2 = grant_token(&c.request("A pool 0 60 permits=2").await, "pool");
    grant_token(&c.request("A rw 0 60 mode=shared").await, "rw");
    assert_eq!(c.request(&format!("V pool {t2} w2")).await, "V pool");
    assert_eq!(c.request("V pool 1 x").await, "N V pool");
    c.request("W pool 1 -").await;
    let page = http_get(http, "/v1/locks", None).await;
    assert_eq!(page.code, 200, "{page:?}");
    let page: serde_json::Value = serde_json::from_str(&page.body).expect("json");
    let pool = &page["locks"][0];
    assert_eq!(pool["key"], "pool");
    assert_eq!(pool["token"], t2.to_string());
    assert_eq!(
        (&pool["permits"], &pool["mode"]),
        (&2.into(), &"exclusive".into())
    );
    let holders: Vec<(String, String)> = pool["holders"]
        .as_array()
        .expect("holders")
        .iter()
        .map(|h| {
            (
                h["token"].as_str().expect("token").to_owned(),
                h["value"].as_str().unwrap_or("-").to_owned(),
            )
        })
        .collect();
    assert_eq!(
        holders,
        [
            (t1.to_string(), "w1".to_owned()),
            (t2.to_string(), "w2".to_owned())
        ]
    );
    assert_eq!(page["locks"][1]["mode"], "shared");
    let scrape = Scrape::parse(&http_get(http, "/metrics", None).await.body);
    assert_eq!(scrape.get("baton_requests_total{op=\"set_value\"}"), 2.0);
    assert_eq!(scrape.get("baton_requests_total{op=\"watch\"}"), 1.0);
    assert_eq!(scrape.get("baton_values_set_total"), 1.0);
    assert_eq!(scrape.get("baton_watches_answered_total"), 1.0);
    assert_eq!(scrape.get("baton_errors_total{reason=\"not_held\"}"), 1.0);
}

#[tokio::test]
async fn q_lists_the_sixteen_oldest_holders_and_counts_them_all() {
    let node = Batond::start(&[]);
    let mut c = node.connect().await;
    let value = "v".repeat(128);
    let mut tokens = Vec::new();
    for _ in 0..18 {
        let line = c
            .request(&format!(
                "A {} 0 86400 permits=20 value={value}",
                "k".repeat(250)
            ))
            .await;
        tokens.push(grant_token(&line, &"k".repeat(250)));
    }
    let q = c.request(&format!("Q {}", "k".repeat(250))).await;
    assert_eq!(field(&q, "holders"), "18");
    assert_eq!(
        field(&q, "token"),
        tokens[17].to_string(),
        "the newest holder"
    );
    assert_eq!(holders(&q), tokens[..16].to_vec(), "the 16 oldest");
    assert!(q.len() < 4096, "{} bytes", q.len());
}

#[tokio::test]
async fn the_watch_limits_are_config_file_keys_too() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("batond.toml");
    std::fs::write(&path, "max-watches = 5\nmax-watches-per-connection = 1\n").expect("write");
    let node = Batond::start(&["--config", &path.display().to_string()]);
    let mut c = node.connect().await;
    c.send("W a 30 -").await;
    c.expect_silence(Duration::from_millis(100)).await;
    assert_eq!(c.request("W b 30 -").await, "E W b too many watches");
}
