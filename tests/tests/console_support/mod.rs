//! What the console's browser tests share: opening the page, reading its
//! table, waiting for its text, and where screenshots go (with
//! `BATON_CONSOLE_SHOTS=docs/console` the ones docs/operations.md shows,
//! else under the target directory).

#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use baton_tests::browser::{Browser, Page};
use serde_json::json;

/// Long enough for a loaded machine: the page refreshes every 2 s.
pub const SEEN: Duration = Duration::from_secs(20);

pub fn shot_path(name: &str) -> PathBuf {
    match std::env::var_os("BATON_CONSOLE_SHOTS") {
        Some(dir) => PathBuf::from(dir).join(name),
        None => PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join("console")
            .join(name),
    }
}

/// Opens `http://<http>/ui`, sending `user`'s basic auth with every request.
pub async fn open_console(browser: &mut Browser, http: SocketAddr, user: Option<(&str, &str)>) {
    let page = browser.page();
    if let Some((name, secret)) = user {
        page.basic_auth(name, secret).await;
    }
    page.navigate(&format!("http://{http}/ui")).await;
}

/// The text of the cell `class` of `key`'s row in the locks table.
pub fn lock_cell(key: &str, class: &str) -> String {
    let selector = json!(format!("#locks-table tr[data-key=\"{key}\"] td.{class}"));
    format!("document.querySelector({selector})?.textContent")
}

/// The text of the token cell of `key`'s row in the locks table.
pub fn token_cell(key: &str) -> String {
    lock_cell(key, "token")
}

/// Lists the locks under `prefix`, as typed in the search box.
pub async fn search(page: &mut Page, prefix: &str) {
    type_into(page, "prefix", prefix).await;
    page.click("#search button[type=submit]").await;
}

/// Sets the value of the input `id`.
pub async fn type_into(page: &mut Page, id: &str, text: &str) {
    let set = format!(
        "document.getElementById({}).value = {}",
        json!(id),
        json!(text)
    );
    page.eval(&set).await;
}

/// Waits until `expression`'s text contains `want`.
pub async fn wait_text(page: &mut Page, what: &str, expression: &str, want: &str) {
    wait_text_within(page, what, expression, want, SEEN).await;
}

pub async fn wait_text_within(
    page: &mut Page,
    what: &str,
    expression: &str,
    want: &str,
    within: Duration,
) {
    let expr = format!("(({expression}) || '').includes({})", json!(want));
    page.wait_for(what, &expr, within).await;
}

/// The expression of the text of the element `id`.
pub fn text_of(id: &str) -> String {
    format!("document.getElementById({}).textContent", json!(id))
}

/// The expression of the member row of `addr`'s `data-` attribute `name`.
pub fn member_data(addr: &str, name: &str) -> String {
    let row = json!(format!("#members tr[data-addr=\"{addr}\"]"));
    format!("document.querySelector({row})?.dataset.{name}")
}
