//! The operator's console (`/ui`) of a Raft cluster in a real browser:
//! headless Chromium over its DevTools protocol against real `batond`
//! processes. The leader's page lists the three members and names the
//! leader, shows a killed follower unreachable and the change in its
//! recent changes, removes it from the membership, and adds a fourth node
//! started with `--join`, which then votes, and removes it again. A
//! follower's page says plainly that it cannot show the leader's picture
//! and marks what it does not know instead of guessing. A priority
//! cluster's standby shows every member, the active named, a killed
//! standby unreachable as it sees it, and where the locks are served.

mod console_support;

use std::net::SocketAddr;
use std::time::Duration;

use baton_tests::browser::{Browser, Page};
use baton_tests::cluster::Cluster;
use baton_tests::http::http_get;
use baton_tests::raft::{RaftCluster, SERIAL, SETTLE};
use baton_tests::{free_addr, Batond};
use console_support::{
    member_data, open_console, shot_path, text_of, type_into, wait_text, wait_text_within, SEEN,
};
use serde_json::Value;

/// A killed follower is unreachable after about 1 s on the leader.
const SEEN_DOWN: Duration = Duration::from_secs(30);
/// A node added from the page votes once it has caught up; the page asks
/// for up to a minute.
const SEEN_VOTER: Duration = Duration::from_secs(70);

/// A node that joins the running cluster at `addr`, with its endpoint.
fn start_joining(addr: SocketAddr, data_dir: &std::path::Path, http: SocketAddr) -> Batond {
    let data = data_dir.to_string_lossy().into_owned();
    let http = http.to_string();
    let flags = ["--mode", "raft", "--join", "--data-dir", &data];
    Batond::start_at(addr, &[&flags[..], &["--http-listen", &http]].concat())
}

/// The members `/v1/members` lists, with their membership.
async fn members(http: SocketAddr) -> Vec<(String, String)> {
    let reply = http_get(http, "/v1/members", None).await;
    assert_eq!(reply.code, 200, "{reply:?}");
    let body: Value = serde_json::from_str(&reply.body).expect("JSON");
    body["members"]
        .as_array()
        .expect("members")
        .iter()
        .map(|m| {
            (
                m["addr"].to_string().replace('"', ""),
                m["membership"].to_string().replace('"', ""),
            )
        })
        .collect()
}

async fn wait_rows(page: &mut Page, what: &str, rows: usize) {
    let expr = format!("document.querySelectorAll('#members tbody tr').length === {rows}");
    page.wait_for(what, &expr, SEEN).await;
}

/// Clicks the member row's Remove and confirms; waits for the answer.
async fn remove_from_page(page: &mut Page, addr: &str) {
    page.click(&format!("#members button.remove[data-addr=\"{addr}\"]"))
        .await;
    let question = page.eval(&text_of("confirm-text")).await;
    assert!(
        question.as_str().unwrap_or_default().contains(addr),
        "{question}"
    );
    page.click("#confirm-yes").await;
    wait_text(
        page,
        "the removal",
        &text_of("member-result"),
        &format!("Removed {addr}"),
    )
    .await;
}

#[tokio::test]
async fn a_raft_clusters_page_shows_its_members_and_changes_the_membership() {
    let _one_browser = SERIAL.lock().await;
    let http: Vec<SocketAddr> = (0..4).map(|_| free_addr()).collect();
    let mut cluster = RaftCluster::start_each(3, |i| {
        vec!["--http-listen".to_string(), http[i].to_string()]
    });
    let (leader, _) = cluster.wait_leader(SETTLE).await;
    let follower = (leader + 1) % 3;
    let other = 3 - leader - follower;
    let leader_addr = cluster.peers[leader].to_string();

    let mut browser = Browser::launch(1280, 1000).await;
    open_console(&mut browser, http[leader], None).await;
    let page = browser.page();
    wait_rows(page, "three members", 3).await;
    let named = format!("{} === 'leader'", member_data(&leader_addr, "state"));
    page.wait_for("the leader named", &named, SEEN).await;
    wait_text(page, "the serving node", &text_of("serving"), &leader_addr).await;
    for addr in &cluster.peers {
        let up = format!("{} === 'true'", member_data(&addr.to_string(), "up"));
        page.wait_for(&format!("{addr} reachable"), &up, SEEN).await;
    }
    page.screenshot(&shot_path("cluster.png"), true).await;

    // A killed follower: unreachable, and in the page's recent changes.
    cluster.nodes[follower].kill();
    let dead = cluster.peers[follower].to_string();
    let down = format!("{} === 'false'", member_data(&dead, "up"));
    page.wait_for("the killed follower unreachable", &down, SEEN_DOWN)
        .await;
    let change = format!("{dead}: follower → down");
    wait_text(page, "the change listed", &text_of("changes"), &change).await;
    page.screenshot(&shot_path("cluster-follower-down.png"), true)
        .await;

    // The dead follower removed from the page, as `baton member remove`.
    remove_from_page(page, &dead).await;
    wait_rows(page, "two members left", 2).await;
    assert!(!members(http[leader]).await.iter().any(|(a, _)| *a == dead));

    // A fourth node, started with --join, added from the page: it votes.
    let fourth = free_addr();
    let dir = tempfile::tempdir().expect("dir");
    let mut joined = start_joining(fourth, dir.path(), http[3]);
    let fourth = fourth.to_string();
    type_into(page, "member-addr", &fourth).await;
    page.click("#member-add button[type=submit]").await;
    let voter = format!("{fourth} is a voter");
    wait_text_within(
        page,
        "the addition",
        &text_of("member-result"),
        &voter,
        SEEN_VOTER,
    )
    .await;
    wait_rows(page, "three members again", 3).await;
    let follows = format!("{} === 'follower'", member_data(&fourth, "state"));
    page.wait_for("the fourth node a follower", &follows, SEEN)
        .await;
    let listed = members(http[leader]).await;
    assert!(
        listed.contains(&(fourth.clone(), "voter".to_string())),
        "{listed:?}"
    );

    // A follower's page: it says it cannot show the leader's picture, and
    // does not guess the other members' reachability.
    open_console(&mut browser, http[other], None).await;
    let page = browser.page();
    wait_text(
        page,
        "a follower names the serving node",
        &text_of("serving"),
        &leader_addr,
    )
    .await;
    wait_text(
        page,
        "a follower's note",
        &text_of("cluster-note"),
        "cannot show the serving node's picture",
    )
    .await;
    wait_text(
        page,
        "the leader named in the note",
        &text_of("cluster-note"),
        &leader_addr,
    )
    .await;
    wait_text(
        page,
        "the locks' note",
        &text_of("locks-note"),
        &format!("the serving node is {leader_addr}"),
    )
    .await;
    let unknown = format!("{} === 'unknown'", member_data(&fourth, "up"));
    page.wait_for("another follower's reachability not known", &unknown, SEEN)
        .await;
    let heard = format!("{} === 'true'", member_data(&leader_addr, "up"));
    page.wait_for("the leader heard", &heard, SEEN).await;
    page.screenshot(&shot_path("cluster-follower.png"), true)
        .await;

    // Back on the leader, a page opened after the events: the node's own
    // log of changes has them.
    open_console(&mut browser, http[leader], None).await;
    let page = browser.page();
    wait_rows(page, "three members on the leader", 3).await;
    for change in [
        format!("{dead}: follower → down"),
        format!("{dead} left the membership"),
        // A learner for less than a sample, or longer: either is said.
        format!("{fourth} joined as a "),
    ] {
        wait_text(
            page,
            "the node's log of changes",
            &text_of("changes"),
            &change,
        )
        .await;
    }
    remove_from_page(page, &fourth).await;
    wait_rows(page, "two members after the removal", 2).await;
    assert!(!members(http[leader])
        .await
        .iter()
        .any(|(a, _)| *a == fourth));
    joined.kill();
}

#[tokio::test]
async fn a_priority_standbys_page_names_the_active_and_sees_a_standby_go() {
    let _one_browser = SERIAL.lock().await;
    let http: Vec<SocketAddr> = (0..3).map(|_| free_addr()).collect();
    let mut cluster = Cluster::start_each(3, |i| {
        vec!["--http-listen".to_string(), http[i].to_string()]
    });
    // A fresh cluster settles on its first node; under load a later one
    // may serve for a moment before it hears the first (and hands back).
    cluster.wait_active(0, SETTLE).await;
    let active = 0;
    let standby = (active + 1) % 3;
    let gone = 3 - active - standby;
    let active_addr = cluster.addr(active).to_string();

    let mut browser = Browser::launch(1280, 1000).await;
    open_console(&mut browser, http[standby], None).await;
    let page = browser.page();
    wait_rows(page, "three members", 3).await;
    wait_text(page, "the serving node", &text_of("serving"), &active_addr).await;
    let named = format!("{} === 'active'", member_data(&active_addr, "state"));
    page.wait_for("the active named", &named, SEEN).await;
    wait_text(
        page,
        "the locks' note",
        &text_of("locks-note"),
        &format!("the serving node is {active_addr}"),
    )
    .await;
    let dead = cluster.addr(gone).to_string();
    let up = format!("{} === 'true'", member_data(&dead, "up"));
    page.wait_for("the other standby reachable", &up, SEEN)
        .await;

    cluster.kill(gone);
    let down = format!("{} === 'false'", member_data(&dead, "up"));
    page.wait_for("the killed standby unreachable", &down, SEEN_DOWN)
        .await;
    wait_text(
        page,
        "the change listed",
        &text_of("changes"),
        &format!("{dead}: standby → down"),
    )
    .await;
    // No membership changes online in a priority cluster: no form.
    assert_eq!(
        page.eval("document.getElementById('member-add').hidden")
            .await,
        serde_json::json!(true)
    );
}
