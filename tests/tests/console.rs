//! The operator's console (`/ui`) of a single node in a real browser:
//! headless Chromium driven over its DevTools protocol against real
//! `batond` processes. The page lists held keys with their tokens (and a
//! shared lock's or semaphore's holders, permits and values), refreshes by
//! itself, charts the rates and latencies, and fits a phone's screen; a
//! force-release from the page frees the key for the next waiter; an
//! anonymous browser gets the basic-auth prompt and a readable 401 page, a
//! non-admin a readable 403 page and no key; the page is served over the
//! node's TLS; one open page makes a few requests a second, all to its own
//! node. The Raft cluster's page is in console_cluster.rs.

mod auth_support;
mod console_support;
mod tls_support;

use std::net::SocketAddr;
use std::time::Duration;

use auth_support::{node_with_users, BILLING_SECRET, OPS_SECRET};
use baton_tests::browser::{Browser, Login, Page};
use baton_tests::http::{http_get, http_send, try_http_get};
use baton_tests::raft::SERIAL;
use baton_tests::{free_addr, grant_token, Batond};
use console_support::{
    lock_cell, open_console, search, shot_path, text_of, token_cell, wait_text, SEEN,
};
use serde_json::json;
use tls_support::{strs, Pki, TlsLines};

/// How long one open page's requests are counted.
const COUNTED: Duration = Duration::from_secs(10);
/// The most requests one page may make in [`COUNTED`]: a round of five
/// (cluster, changes, locks, metrics, the open key) every 2 s, once the
/// last is answered, and one round more for the edges of the window.
const MAX_REQUESTS_COUNTED: u64 = 5 * 6;

/// A single node with its HTTP endpoint.
fn node_with_http() -> (Batond, SocketAddr) {
    let http = free_addr();
    (Batond::start(&["--http-listen", &http.to_string()]), http)
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
    // Every figure the issue names has its chart.
    let titles = page
        .eval("[...document.querySelectorAll('#chart-grid .chart')].map((c) => c.dataset.chart).join('|')")
        .await;
    let titles = titles.as_str().unwrap_or_default();
    for chart in [
        "requests /s",
        "grants /s",
        "hand-overs /s",
        "expiries /s",
        "wait timeouts /s",
        "connections open",
        "acquire wait p50 / p99 (ms)",
        "hand-over p50 / p99 (ms)",
    ] {
        assert!(titles.split('|').any(|t| t == chart), "{chart} in {titles}");
    }
    page.screenshot(&shot_path("locks.png"), true).await;

    // On a phone: nothing wider than the screen but the tables, which
    // scroll inside their own box.
    page.set_size(390, 844, true).await;
    page.wait_for(
        "the page within a phone's width",
        "document.documentElement.scrollWidth <= window.innerWidth",
        SEEN,
    )
    .await;
    let wide = page
        .eval("[...document.querySelectorAll('main > section > *:not(.scroll)')].filter((e) => e.getBoundingClientRect().right > window.innerWidth + 1).map((e) => e.id || e.tagName).join(',')")
        .await;
    assert_eq!(wide, json!(""), "wider than the phone");
    page.screenshot(&shot_path("phone.png"), true).await;
}

/// The rows of the locks table, their keys in order.
const ROW_KEYS: &str =
    "[...document.querySelectorAll('#locks-table tbody tr')].map((r) => r.dataset.key).join(' ')";

#[tokio::test]
async fn the_table_is_paged_by_prefix() {
    let _one_browser = SERIAL.lock().await;
    let (node, http) = node_with_http();
    let mut client = node.connect().await;
    let keys: Vec<String> = (0..30).map(|i| format!("batch/{i:02}")).collect();
    for key in &keys {
        grant_token(&client.request(&format!("A {key} 0 300")).await, key);
    }
    grant_token(&client.request("A other/1 0 300").await, "other/1");

    let mut browser = Browser::launch(1280, 900).await;
    open_console(&mut browser, http, None).await;
    let page = browser.page();
    page.wait_for(
        "the table",
        "typeof state === 'object' && state.next !== undefined",
        SEEN,
    )
    .await;
    page.eval("document.getElementById('limit').value = '25'")
        .await;
    search(page, "batch/").await;
    let first = keys[..25].join(" ");
    page.wait_for(
        "the first page",
        &format!("{ROW_KEYS} === {}", json!(first)),
        SEEN,
    )
    .await;
    page.click("#next-page").await;
    let second = keys[25..].join(" ");
    page.wait_for(
        "the second page",
        &format!("{ROW_KEYS} === {}", json!(second)),
        SEEN,
    )
    .await;
    wait_text(page, "its number", &text_of("page-no"), "page 2").await;
    assert_eq!(
        page.eval("document.getElementById('next-page').disabled")
            .await,
        json!(true)
    );
    page.click("#prev-page").await;
    page.wait_for(
        "the first page again",
        &format!("{ROW_KEYS} === {}", json!(first)),
        SEEN,
    )
    .await;
}

/// Protocol 1.2's locks as the table lists them: a shared lock with two
/// holders and a semaphore of three permits with one, their values, and
/// the key's detail with every holder.
#[tokio::test]
async fn shared_locks_and_semaphores_are_listed_with_holders_permits_and_values() {
    let _one_browser = SERIAL.lock().await;
    let (node, http) = node_with_http();
    let mut client = node.connect().await;
    let reader = grant_token(
        &client
            .request("A pool/db 0 300 mode=shared value=worker-a")
            .await,
        "pool/db",
    );
    let second = grant_token(
        &client.request("A pool/db 0 300 mode=shared").await,
        "pool/db",
    );
    let gpu = grant_token(
        &client
            .request("A pool/gpu 0 300 permits=3 value=job-1")
            .await,
        "pool/gpu",
    );

    let mut browser = Browser::launch(1280, 900).await;
    open_console(&mut browser, http, None).await;
    let page = browser.page();
    let both = format!("{reader}, {second}");
    wait_text(
        page,
        "both shared holders' tokens",
        &token_cell("pool/db"),
        &both,
    )
    .await;
    for (key, class, want) in [
        ("pool/db", "mode", "shared"),
        ("pool/db", "holders", "2"),
        ("pool/db", "value", "worker-a"),
        ("pool/gpu", "mode", "exclusive"),
        ("pool/gpu", "holders", "1/3"),
        ("pool/gpu", "token", &gpu.to_string()),
        ("pool/gpu", "value", "job-1"),
    ] {
        let cell = page.eval(&lock_cell(key, class)).await;
        assert_eq!(cell, json!(want), "{key} {class}");
    }
    page.click("#locks-table tr[data-key=\"pool/db\"]").await;
    page.wait_for(
        "the shared lock's two holders",
        "document.querySelectorAll('#holders tbody tr').length === 2",
        SEEN,
    )
    .await;
    wait_text(
        page,
        "its state",
        &text_of("detail-state"),
        "shared, 2 holding, 0 waiting",
    )
    .await;
    wait_text(
        page,
        "a holder's value",
        "document.getElementById('holders').innerText",
        "worker-a",
    )
    .await;
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

/// A browser opening `/ui` of `http` that answers the login prompt with `login`.
async fn console_with_login(http: SocketAddr, login: Login) -> Browser {
    let mut browser = Browser::launch(1280, 900).await;
    let page = browser.page();
    page.answer_logins(login).await;
    page.navigate(&format!("http://{http}/ui")).await;
    browser
}

/// The page's whole document, to look for what it must not show.
async fn document(page: &mut Page) -> String {
    let html = page.eval("document.documentElement.outerHTML").await;
    html.as_str().unwrap_or_default().to_string()
}

#[tokio::test]
async fn an_anonymous_or_non_admin_browser_gets_a_readable_refusal_and_no_key() {
    let _one_browser = SERIAL.lock().await;
    let http = free_addr();
    let (node, _users, _dir) = node_with_users(&["--http-listen", &http.to_string()]);
    let mut ops = node.connect().await;
    assert_eq!(ops.request(&format!("U ops {OPS_SECRET}")).await, "U ops");
    let token = grant_token(
        &ops.request("A billing/secret-key 0 300").await,
        "billing/secret-key",
    );
    let secret_shown =
        |text: &str| text.contains("billing/secret-key") || text.contains(&token.to_string());

    // Over HTTP: the console's refusals are pages, /v1/'s stay JSON.
    for path in ["/ui", "/ui/console.js", "/v1/locks"] {
        let html = path.starts_with("/ui");
        let kind = if html {
            "text/html"
        } else {
            "application/json"
        };
        let denied = http_get(http, path, Some(("billing", BILLING_SECRET))).await;
        assert_eq!(denied.code, 403, "{path}: {denied:?}");
        assert!(
            denied
                .header("content-type")
                .unwrap_or_default()
                .starts_with(kind),
            "{denied:?}"
        );
        assert!(!secret_shown(&denied.body), "{denied:?}");
        let anonymous = http_get(http, path, None).await;
        assert_eq!(anonymous.code, 401, "{path}: {anonymous:?}");
        assert!(
            anonymous
                .header("content-type")
                .unwrap_or_default()
                .starts_with(kind),
            "{anonymous:?}"
        );
        assert!(
            anonymous
                .header("www-authenticate")
                .unwrap_or_default()
                .starts_with("Basic "),
            "{anonymous:?}"
        );
    }
    let release = json!({ "key": "billing/secret-key", "token": token.to_string() }).to_string();
    let refused = http_send(http, "POST", "/v1/force-release", Some(&release)).await;
    assert_eq!(refused.code, 401, "{refused:?}");

    // Nobody signed in: the browser asks for a user (basic auth); the
    // person cancels and reads why.
    let mut browser = console_with_login(http, Login::Cancel).await;
    let page = browser.page();
    wait_text(
        page,
        "the 401 page",
        "document.querySelector('h1')?.textContent",
        "401 Unauthorized",
    )
    .await;
    assert_eq!(page.eval("document.contentType").await, json!("text/html"));
    let prompt = page.prompts().first().cloned().unwrap_or_default();
    assert_eq!(
        prompt["scheme"].as_str().map(str::to_lowercase),
        Some("basic".to_string()),
        "{prompt}"
    );
    assert_eq!(prompt["source"], json!("Server"), "{prompt}");
    assert!(!secret_shown(&document(page).await));

    // A user that is not an admin: a 403 page that says why, no key.
    let mut browser =
        console_with_login(http, Login::As("billing".into(), BILLING_SECRET.into())).await;
    let page = browser.page();
    wait_text(
        page,
        "the 403 page",
        "document.querySelector('h1')?.textContent",
        "403 Forbidden",
    )
    .await;
    wait_text(page, "why", "document.body.innerText", "permission denied").await;
    page.screenshot(&shot_path("forbidden.png"), false).await;
    assert!(!secret_shown(&document(page).await));

    // The admin, typed into the same prompt: the console and the key.
    let mut browser = console_with_login(http, Login::As("ops".into(), OPS_SECRET.into())).await;
    let page = browser.page();
    wait_text(
        page,
        "the admin's view",
        &token_cell("billing/secret-key"),
        &token.to_string(),
    )
    .await;
    assert!(!page.prompts().is_empty(), "the browser asked for a user");
}

#[tokio::test]
async fn the_console_is_served_over_the_nodes_tls() {
    let _one_browser = SERIAL.lock().await;
    let pki = Pki::new();
    let http = free_addr();
    let mut flags = pki.main.node_flags();
    flags.extend(["--http-listen".to_string(), http.to_string()]);
    let node = Batond::start(&strs(&flags));
    let mut client = TlsLines::connect(node.addr(), &pki.main.ca)
        .await
        .expect("TLS");
    client.send_raw(b"A tls/console 0 300\n").await;
    let token = grant_token(&client.recv().await.expect("a grant"), "tls/console");

    // The test's CA is not in the browser's store: its errors are ignored,
    // the page is still fetched over TLS.
    let mut browser = Browser::launch_with(1280, 900, &["--ignore-certificate-errors"]).await;
    let page = browser.page();
    page.navigate(&format!("https://{http}/ui")).await;
    wait_text(
        page,
        "the key over TLS",
        &token_cell("tls/console"),
        &token.to_string(),
    )
    .await;
    assert_eq!(page.eval("location.protocol").await, json!("https:"));
    // Plain HTTP gets no page from a TLS endpoint.
    let plain = try_http_get(http, "/ui").await;
    assert!(plain.as_ref().map_or(true, |r| r.code != 200), "{plain:?}");
}

#[tokio::test]
async fn one_open_page_asks_a_few_times_a_second_and_only_its_own_node() {
    let _one_browser = SERIAL.lock().await;
    let (node, http) = node_with_http();
    let mut holder = node.connect().await;
    let token = grant_token(
        &holder.request("A jobs/watched 0 300").await,
        "jobs/watched",
    );
    let mut browser = Browser::launch(1280, 900).await;
    open_console(&mut browser, http, None).await;
    let page = browser.page();
    wait_text(
        page,
        "the held key",
        &token_cell("jobs/watched"),
        &token.to_string(),
    )
    .await;
    // With a key's detail open: the most the page asks each round.
    page.click("#locks-table tr[data-key=\"jobs/watched\"]")
        .await;
    wait_text(
        page,
        "the detail",
        &text_of("detail-state"),
        "waiting in its queue",
    )
    .await;

    let start = page
        .eval("performance.now()")
        .await
        .as_f64()
        .unwrap_or_default();
    // The window itself is the measure: its length, not a condition.
    tokio::time::sleep(COUNTED).await;
    let end = start + COUNTED.as_secs_f64() * 1000.0;
    let counted = format!(
        "performance.getEntriesByType('resource').filter((e) => e.startTime >= {start} && e.startTime < {end}).length"
    );
    let requests = page.eval(&counted).await.as_u64().unwrap_or(u64::MAX);
    assert!(
        (COUNTED.as_secs() / 2..=MAX_REQUESTS_COUNTED).contains(&requests),
        "{requests} requests in {COUNTED:?}"
    );
    println!("one open page: {requests} requests in {COUNTED:?}");
    // Nothing from anywhere else: every request, link and source is the node's.
    let foreign = page
        .eval("[...performance.getEntriesByType('resource').map((e) => e.name), ...[...document.querySelectorAll('[src],[href]')].map((e) => e.src || e.href)].filter((u) => new URL(u, location.href).origin !== location.origin)")
        .await;
    assert_eq!(foreign, json!([]), "fetched from elsewhere");
}
