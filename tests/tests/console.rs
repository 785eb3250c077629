//! The operator's console (`/ui`) in a real browser: headless Chromium
//! driven over its DevTools protocol against real `batond` processes. The
//! page lists a held key with its token; a Raft cluster's page lists its
//! three members, names the leader, shows a killed follower unreachable
//! and removes it from the membership; a follower's page says where the locks are served; a
//! force-release from the page frees the key for the next waiter; a
//! non-admin gets 403 and no key.
//!
//! Each test takes screenshots; with `BATON_CONSOLE_SHOTS=docs/console`
//! they are written there (the ones docs/operations.md shows), else under
//! the target directory.

mod auth_support;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use auth_support::{node_with_users, BILLING_SECRET, OPS_SECRET};
use baton_tests::browser::{Browser, Page};
use baton_tests::http::{http_get, http_send};
use baton_tests::raft::{RaftCluster, SERIAL, SETTLE};
use baton_tests::{free_addr, grant_token, Batond};
use serde_json::json;

/// Long enough for a loaded machine: the page refreshes every 2 s.
const SEEN: Duration = Duration::from_secs(20);
/// A killed follower is unreachable after about 1 s on the leader.
const SEEN_DOWN: Duration = Duration::from_secs(30);

fn shot_path(name: &str) -> PathBuf {
    match std::env::var_os("BATON_CONSOLE_SHOTS") {
        Some(dir) => PathBuf::from(dir).join(name),
        None => PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join("console")
            .join(name),
    }
}

async fn open_console(browser: &mut Browser, http: SocketAddr, user: Option<(&str, &str)>) {
    let page = browser.page();
    if let Some((name, secret)) = user {
        page.basic_auth(name, secret).await;
    }
    page.navigate(&format!("http://{http}/ui")).await;
}

/// The text of the token cell of `key`'s row in the locks table.
fn token_cell(key: &str) -> String {
    let selector = json!(format!("#locks-table tr[data-key=\"{key}\"] td.token"));
    format!("document.querySelector({selector})?.textContent")
}

/// A single node with its HTTP endpoint.
fn node_with_http() -> (Batond, SocketAddr) {
    let http = free_addr();
    (Batond::start(&["--http-listen", &http.to_string()]), http)
}

/// Lists the locks under `prefix`, as typed in the search box.
async fn search(page: &mut Page, prefix: &str) {
    let set = format!(
        "document.getElementById('prefix').value = {}",
        json!(prefix)
    );
    page.eval(&set).await;
    page.click("#search button[type=submit]").await;
}

async fn wait_text(page: &mut Page, what: &str, expression: &str, want: &str) {
    let expr = format!("(({expression}) || '').includes({})", json!(want));
    page.wait_for(what, &expr, SEEN).await;
}

#[tokio::test]
async fn the_page_lists_a_held_key_with_its_token() {
    let _one_browser = SERIAL.lock().await;
    let (node, http) = node_with_http();
    let mut holder = node.connect().await;
    let token = grant_token(&holder.request("A jobs/report 0 300").await, "jobs/report");
    let mut other = node.connect().await;
    grant_token(&other.request("A orders/42 0 300").await, "orders/42");

    let mut browser = Browser::launch(1280, 900).await;
    open_console(&mut browser, http, None).await;
    let page = browser.page();
    let cell = token_cell("jobs/report");
    wait_text(page, "the held key's token", &cell, &token.to_string()).await;
    wait_text(
        page,
        "the serving node",
        "document.getElementById('serving').textContent",
        &node.addr().to_string(),
    )
    .await;

    // Searching by prefix narrows the table; the page refreshes by itself.
    search(page, "orders/").await;
    page.wait_for(
        "only orders/ listed",
        "document.querySelectorAll('#locks-table tbody tr').length === 1 && !!document.querySelector('tr[data-key=\"orders/42\"]')",
        SEEN,
    )
    .await;
    let mut third = node.connect().await;
    grant_token(&third.request("A orders/43 0 300").await, "orders/43");
    page.wait_for(
        "a new lock appears without a reload",
        "!!document.querySelector('tr[data-key=\"orders/43\"]')",
        SEEN,
    )
    .await;

    // The charts move with the traffic the page's scrapes of /metrics see.
    for _ in 0..20 {
        let token = grant_token(&third.request("A jobs/busy 0 30").await, "jobs/busy");
        assert_eq!(
            third.request(&format!("R jobs/busy {token}")).await,
            "R jobs/busy"
        );
    }
    page.wait_for(
        "grants in the chart",
        "series(CHARTS.find((c) => c.rate === 'grants')).flat().some((v) => v > 0)",
        SEEN,
    )
    .await;
    search(page, "").await;
    page.wait_for(
        "every key again",
        "document.querySelectorAll('#locks-table tbody tr').length === 3",
        SEEN,
    )
    .await;
    // A few samples in the charts before the picture.
    page.wait_for("charts with history", "state.samples.length >= 6", SEEN)
        .await;
    page.screenshot(&shot_path("locks.png"), true).await;
    page.set_size(390, 844, true).await;
    page.screenshot(&shot_path("phone.png"), true).await;
}

/// Protocol 1.2's entries (mode, permits, holders with values) as the
/// page renders them, whichever node serves them.
#[tokio::test]
async fn shared_holders_are_rendered_with_their_tokens_and_values() {
    let _one_browser = SERIAL.lock().await;
    let (_node, http) = node_with_http();
    let mut browser = Browser::launch(1280, 900).await;
    open_console(&mut browser, http, None).await;
    let page = browser.page();
    page.wait_for("the page's script", "typeof lockRow === 'function'", SEEN)
        .await;
    let entry = json!({
        "key": "pool/db", "token": "7", "lease_left_ms": 5000, "waiters": 2,
        "permits": 3, "mode": "shared",
        "holders": [
            { "token": "7", "lease_left_ms": 5000, "value": "worker-a" },
            { "token": "9", "lease_left_ms": 8000, "value": null }
        ]
    });
    let row = page.eval(&format!("lockRow({entry}).innerText")).await;
    let row = row.as_str().unwrap_or_default();
    assert!(row.contains("shared 2/3") && row.contains("7, 9"), "{row}");
    let plain = json!({ "key": "k", "token": "5", "lease_left_ms": 1000, "waiters": 0 });
    let row = page.eval(&format!("lockRow({plain}).innerText")).await;
    let row = row.as_str().unwrap_or_default();
    assert!(row.contains("exclusive") && row.contains('5'), "{row}");
}

#[tokio::test]
async fn a_force_release_from_the_page_frees_the_key_for_the_next_waiter() {
    let _one_browser = SERIAL.lock().await;
    let (node, http) = node_with_http();
    let mut holder = node.connect().await;
    let token = grant_token(&holder.request("A jobs/stuck 0 300").await, "jobs/stuck");
    let mut waiter = node.connect().await;
    waiter.send("A jobs/stuck 60 300").await;

    let mut browser = Browser::launch(1280, 900).await;
    open_console(&mut browser, http, None).await;
    let page = browser.page();
    wait_text(
        page,
        "the held key",
        &token_cell("jobs/stuck"),
        &token.to_string(),
    )
    .await;
    page.click("#locks-table tr[data-key=\"jobs/stuck\"]").await;
    let button = format!("#holders button.force-release[data-token=\"{token}\"]");
    page.wait_for(
        "the detail's release button",
        &format!("!!document.querySelector({})", json!(button)),
        SEEN,
    )
    .await;
    wait_text(
        page,
        "the queue length",
        "document.getElementById('detail-state').textContent",
        "1 waiting",
    )
    .await;
    page.click(&button).await;
    // The confirmation names the key and the token it will release.
    let question = page.eval("document.getElementById('confirm').hidden ? '' : document.getElementById('confirm-text').textContent").await;
    let question = question.as_str().unwrap_or_default().to_string();
    assert!(
        question.contains("jobs/stuck") && question.contains(&token.to_string()),
        "{question}"
    );
    page.screenshot(&shot_path("force-release.png"), false)
        .await;
    page.click("#confirm-yes").await;
    wait_text(
        page,
        "the release's result",
        "document.getElementById('action-result').textContent",
        "Released jobs/stuck",
    )
    .await;

    let granted = waiter
        .recv_timeout(SEEN)
        .await
        .unwrap_or_else(|| panic!("the waiter got nothing after the force-release"));
    let next = grant_token(&granted, "jobs/stuck");
    assert!(next > token, "{next} after {token}");
    // The old holder's token no longer releases anything.
    assert_eq!(
        holder.request(&format!("R jobs/stuck {token}")).await,
        "N R jobs/stuck"
    );
    wait_text(
        page,
        "the new holder's token",
        &token_cell("jobs/stuck"),
        &next.to_string(),
    )
    .await;
}

#[tokio::test]
async fn a_raft_clusters_page_names_the_leader_and_shows_a_killed_follower_unreachable() {
    let _one_browser = SERIAL.lock().await;
    let http: Vec<SocketAddr> = (0..3).map(|_| free_addr()).collect();
    let mut cluster = RaftCluster::start_each(3, |i| {
        vec!["--http-listen".to_string(), http[i].to_string()]
    });
    let (leader, _) = cluster.wait_leader(SETTLE).await;
    let follower = (leader + 1) % 3;
    let leader_addr = cluster.peers[leader].to_string();

    let mut browser = Browser::launch(1280, 1000).await;
    open_console(&mut browser, http[leader], None).await;
    let page = browser.page();
    page.wait_for(
        "three members",
        "document.querySelectorAll('#members tbody tr').length === 3",
        SEEN,
    )
    .await;
    let leader_row = json!(format!("#members tr[data-addr=\"{leader_addr}\"]"));
    page.wait_for(
        "the leader named",
        &format!("document.querySelector({leader_row})?.dataset.state === 'leader'"),
        SEEN,
    )
    .await;
    wait_text(
        page,
        "the serving node",
        "document.getElementById('serving').textContent",
        &leader_addr,
    )
    .await;
    for addr in &cluster.peers {
        let row = json!(format!("#members tr[data-addr=\"{addr}\"]"));
        page.wait_for(
            &format!("{addr} reachable"),
            &format!("document.querySelector({row})?.dataset.up === 'true'"),
            SEEN,
        )
        .await;
    }
    page.screenshot(&shot_path("cluster.png"), true).await;

    cluster.nodes[follower].kill();
    let killed = json!(format!(
        "#members tr[data-addr=\"{}\"]",
        cluster.peers[follower]
    ));
    page.wait_for(
        "the killed follower unreachable",
        &format!("document.querySelector({killed})?.dataset.up === 'false'"),
        SEEN_DOWN,
    )
    .await;
    page.screenshot(&shot_path("cluster-follower-down.png"), true)
        .await;

    // The dead follower removed from the page, as `baton member remove`.
    let dead = cluster.peers[follower].to_string();
    page.click(&format!("#members button.remove[data-addr=\"{dead}\"]"))
        .await;
    let question = page
        .eval("document.getElementById('confirm-text').textContent")
        .await;
    assert!(
        question.as_str().unwrap_or_default().contains(&dead),
        "{question}"
    );
    page.click("#confirm-yes").await;
    wait_text(
        page,
        "the removal",
        "document.getElementById('member-result').textContent",
        &format!("Removed {dead}"),
    )
    .await;
    page.wait_for(
        "two members left",
        "document.querySelectorAll('#members tbody tr').length === 2",
        SEEN,
    )
    .await;
    let members = http_get(http[leader], "/v1/members", None).await;
    assert!(
        members.code == 200 && !members.body.contains(&dead),
        "{members:?}"
    );

    // The other follower's console says where the locks are served.
    let other = 3 - leader - follower;
    open_console(&mut browser, http[other], None).await;
    let page = browser.page();
    wait_text(
        page,
        "a follower's note",
        "document.getElementById('locks-note').textContent",
        &format!("the serving node is {leader_addr}"),
    )
    .await;
    wait_text(
        page,
        "a follower names the serving node",
        "document.getElementById('serving').textContent",
        &leader_addr,
    )
    .await;
}

#[tokio::test]
async fn a_non_admin_gets_403_and_no_key() {
    let _one_browser = SERIAL.lock().await;
    let http = free_addr();
    let (node, _users, _dir) = node_with_users(&["--http-listen", &http.to_string()]);
    let mut ops = node.connect().await;
    assert_eq!(ops.request(&format!("U ops {OPS_SECRET}")).await, "U ops");
    let token = grant_token(
        &ops.request("A billing/secret-key 0 300").await,
        "billing/secret-key",
    );

    for path in ["/ui", "/ui/console.js", "/v1/locks"] {
        let reply = http_get(http, path, Some(("billing", BILLING_SECRET))).await;
        assert_eq!(reply.code, 403, "{path}: {reply:?}");
        assert!(!reply.body.contains("billing/secret-key"), "{reply:?}");
        let anonymous = http_get(http, path, None).await;
        assert_eq!(anonymous.code, 401, "{path}: {anonymous:?}");
    }
    let release = json!({ "key": "billing/secret-key", "token": token.to_string() }).to_string();
    let refused = http_send(http, "POST", "/v1/force-release", Some(&release)).await;
    assert_eq!(refused.code, 401, "{refused:?}");

    let mut browser = Browser::launch(1280, 900).await;
    open_console(&mut browser, http, Some(("billing", BILLING_SECRET))).await;
    let page = browser.page();
    wait_text(
        page,
        "the refusal",
        "document.body.innerText",
        "permission denied",
    )
    .await;
    let text = page.eval("document.documentElement.outerHTML").await;
    let text = text.as_str().unwrap_or_default();
    assert!(
        !text.contains("billing/secret-key") && !text.contains(&token.to_string()),
        "{text}"
    );

    // The admin sees it.
    open_console(&mut browser, http, Some(("ops", OPS_SECRET))).await;
    wait_text(
        browser.page(),
        "the admin's view",
        &token_cell("billing/secret-key"),
        &token.to_string(),
    )
    .await;
}
