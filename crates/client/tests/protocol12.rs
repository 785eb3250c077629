//! Protocol 1.2 from the client's side, against an in-process fake node
//! (baton_tests::fake_node) speaking the 1.2 lines: acquire options, `V`,
//! the extended `Q`, watches (redirects, failover, reconnects, a dropped
//! stream) and elections.

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use baton_client::{Error, KeyStateExt, LockMode, StateTag};
use baton_tests::fake_node::FakeNode;
use common::{client, secs};
use futures_util::StreamExt;

/// Polls `check` every 20 ms until it holds; panics after 10 s.
async fn until(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + secs(10);
    while !check() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not within 10 s: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The lines of `fake` that start with `prefix`.
fn lines_of(fake: &FakeNode, prefix: &str) -> Vec<String> {
    fake.lines()
        .into_iter()
        .filter(|l| l.starts_with(prefix))
        .collect()
}

/// A port nothing listens on: a client given it and a fake keeps one
/// usable connection, so every request shares it.
fn nowhere() -> SocketAddr {
    baton_tests::free_addr()
}

/// The next item of a stream, within 10 s.
async fn next<S: futures_util::Stream + Unpin>(stream: &mut S) -> S::Item {
    tokio::time::timeout(secs(10), stream.next())
        .await
        .expect("an item within 10 s")
        .expect("the stream goes on")
}

#[tokio::test]
async fn semaphore_and_value_options_go_on_the_wire() {
    let fake = FakeNode::start().await;
    let client = client(&[fake.addr]).await;

    let first = client
        .acquire("pool", secs(5), secs(30))
        .permits(3)
        .value("w1")
        .await
        .unwrap();
    assert_eq!(lines_of(&fake, "A "), ["A pool 5 30 permits=3 value=w1"]);
    assert_eq!(first.value().unwrap().as_bytes(), b"w1");
    let second = client
        .acquire("pool", secs(5), secs(30))
        .permits(3)
        .await
        .unwrap();
    assert!(second.token() > first.token());

    let state = client.inspect("pool").await.unwrap();
    assert_eq!((state.holder_count(), state.permits()), (2, 3));
    let holders = state.holders();
    assert_eq!(holders[0].token, first.token(), "oldest first");
    assert_eq!(holders[0].value.as_ref().unwrap().as_bytes(), b"w1");
    assert_eq!(holders[1].value, None);

    // Another number of permits is the node's refusal, changing nothing.
    let plain = client.acquire("pool", secs(1), secs(30)).await;
    assert!(
        matches!(&plain, Err(Error::Rejected { reason }) if reason == "the key has 3 permits"),
        "{plain:?}"
    );
    first.release().await.unwrap();
    second.release().await.unwrap();
}

#[tokio::test]
async fn shared_grants_coexist_and_exclude_a_writer() {
    let fake = FakeNode::start().await;
    let client = client(&[fake.addr]).await;

    let a = client
        .acquire("cfg", secs(5), secs(30))
        .shared()
        .await
        .unwrap();
    let b = client.try_acquire("cfg", secs(30)).shared().await.unwrap();
    assert_eq!(lines_of(&fake, "A ")[0], "A cfg 5 30 mode=shared");
    let state = client.inspect("cfg").await.unwrap();
    assert_eq!((state.mode(), state.holder_count()), (LockMode::Shared, 2));
    let writer = client.try_acquire("cfg", secs(30)).await;
    assert!(matches!(writer, Err(Error::TimedOut { .. })), "{writer:?}");
    a.release().await.unwrap();
    b.release().await.unwrap();
    client.try_acquire("cfg", secs(30)).await.unwrap();
}

#[tokio::test]
async fn bad_options_are_refused_before_anything_is_sent() {
    let fake = FakeNode::start().await;
    let client = client(&[fake.addr]).await;
    let zero = client.acquire("k", secs(1), secs(30)).permits(0).await;
    assert!(matches!(zero, Err(Error::InvalidOption { .. })), "{zero:?}");
    let over = client.acquire("k", secs(1), secs(30)).permits(10_001).await;
    assert!(matches!(over, Err(Error::InvalidOption { .. })), "{over:?}");
    let both = client
        .acquire("k", secs(1), secs(30))
        .shared()
        .permits(2)
        .await;
    assert!(matches!(both, Err(Error::InvalidOption { .. })), "{both:?}");
    for bad in ["a b", "-", ""] {
        let value = client.acquire("k", secs(1), secs(30)).value(bad).await;
        assert!(
            matches!(value, Err(Error::InvalidValue(_))),
            "{bad:?}: {value:?}"
        );
    }
    let guard = client.acquire("k", secs(1), secs(30)).await.unwrap();
    let value = guard.set_value(vec![b'v'; 129]).await;
    assert!(matches!(value, Err(Error::InvalidValue(_))), "{value:?}");
    assert_eq!(
        lines_of(&fake, "A "),
        ["A k 1 30"],
        "only the good acquire went out"
    );
    assert!(lines_of(&fake, "V ").is_empty());
}

#[tokio::test]
async fn a_guard_sets_and_clears_its_value_until_its_grant_is_gone() {
    let fake = FakeNode::start().await;
    let client = client(&[fake.addr]).await;
    let guard = client.acquire("svc", secs(5), secs(30)).await.unwrap();
    let token = guard.token();

    guard.set_value("10.0.0.7:80").await.unwrap();
    assert_eq!(
        lines_of(&fake, "V "),
        [format!("V svc {token} 10.0.0.7:80")]
    );
    let state = client.inspect("svc").await.unwrap();
    assert_eq!(
        state.holders()[0].value.as_ref().unwrap().as_bytes(),
        b"10.0.0.7:80"
    );
    assert!(matches!(state.tag(), StateTag::Holders { count: 1, .. }));
    guard.clear_value().await.unwrap();
    assert_eq!(guard.value(), None);
    assert_eq!(
        client.inspect("svc").await.unwrap().tag(),
        StateTag::Plain(token)
    );

    // By token: a grant that is gone is "not held".
    assert!(fake.expire("svc", token));
    let by_token = client.set_value("svc", token, "x").await;
    assert!(
        matches!(by_token, Err(Error::NotHeld { .. })),
        "{by_token:?}"
    );
    let lost = guard.set_value("x").await;
    assert!(matches!(lost, Err(Error::LeaseLost { .. })), "{lost:?}");
    assert!(guard.is_lost());
}

#[tokio::test]
async fn a_watch_yields_the_state_then_each_change() {
    let fake = FakeNode::start().await;
    let client = client(&[fake.addr]).await;
    let mut watch = client.watch("w").unwrap();
    let first = next(&mut watch).await.unwrap();
    assert_eq!(first.tag(), StateTag::Free);

    let guard = client.acquire("w", secs(5), secs(30)).await.unwrap();
    let held = next(&mut watch).await.unwrap();
    assert_eq!(held.tag(), StateTag::Plain(guard.token()));
    guard.set_value("v1").await.unwrap();
    let valued = next(&mut watch).await.unwrap();
    assert_eq!(
        valued.holders()[0].value.as_ref().unwrap().as_bytes(),
        b"v1"
    );
    guard.release().await.unwrap();
    assert_eq!(next(&mut watch).await.unwrap().tag(), StateTag::Free);

    // Each W carried the tag last seen.
    let token = held.tag().to_string();
    let sent = lines_of(&fake, "W ");
    assert_eq!(sent[0], "W w 30 -");
    assert_eq!(sent[1], format!("W w 30 {token}"));
    assert_eq!(sent[2], format!("W w 30 {}", valued.tag()));
}

#[tokio::test]
async fn pending_watches_of_one_key_are_each_answered() {
    let fake = FakeNode::start().await;
    // One usable connection: the watches share it.
    let client = client(&[fake.addr, nowhere()]).await;
    let mut watches = Vec::new();
    for _ in 0..3 {
        watches.push(client.watch_since("many", StateTag::Free).unwrap());
    }
    // Polled in turn, so each W is asked for; none can be answered yet. One
    // W of a key is in flight on a connection at a time: a node may answer
    // a later one first, and the two answers look alike. The others wait
    // in the client, and go out as each is answered.
    for watch in &mut watches {
        let quiet = tokio::time::timeout(Duration::from_millis(50), watch.next()).await;
        assert!(quiet.is_err(), "nothing changed yet");
    }
    until("one W pending", || fake.pending_watches() == 1).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(lines_of(&fake, "W ").len(), 1, "one W of the key in flight");

    let guard = client.acquire("many", secs(5), secs(30)).await.unwrap();
    for watch in &mut watches {
        let state = next(watch).await.unwrap();
        assert_eq!(state.tag(), StateTag::Plain(guard.token()));
    }
}

#[tokio::test]
async fn a_watch_follows_redirects_and_a_node_that_stops_serving() {
    let active = FakeNode::start().await;
    let standby = FakeNode::standby_of(&active).await;
    // The client knows only the standby: the W is redirected.
    let client = client(&[standby.addr]).await;
    let mut watch = client.watch_since("fo", StateTag::Free).unwrap();
    // A stream works while it is polled.
    let waiting = tokio::spawn(async move { next(&mut watch).await });
    until("the W on the active", || active.pending_watches() == 1).await;
    assert_eq!(lines_of(&standby, "W "), ["W fo 30 -"]);

    // The active hands over: its pending watch is answered `M W fo <standby>`
    // and the client sends the W again there, with the same tag.
    standby.serve();
    active.redirect_to(Some(standby.addr));
    until("the W on the new active", || standby.pending_watches() == 1).await;
    assert_eq!(lines_of(&standby, "W ").len(), 2);
    let guard = client.acquire("fo", secs(5), secs(30)).await.unwrap();
    let state = waiting.await.unwrap().unwrap();
    assert_eq!(state.tag(), StateTag::Plain(guard.token()));
}

#[tokio::test]
async fn a_watch_is_sent_again_when_its_connection_breaks() {
    let fake = FakeNode::start().await;
    let client = client(&[fake.addr]).await;
    let mut watch = client.watch_since("cut", StateTag::Free).unwrap();
    let waiting = tokio::spawn(async move {
        let state = next(&mut watch).await;
        (state, watch)
    });
    until("the W pending", || fake.pending_watches() == 1).await;
    fake.drop_connections();
    // Sent again once a connection is back (the reconnect takes up to 3 s).
    until("the W sent again", || fake.pending_watches() == 1).await;
    assert_eq!(lines_of(&fake, "W "), ["W cut 30 -", "W cut 30 -"]);
    let guard = client.acquire("cut", secs(5), secs(30)).await.unwrap();
    let (state, _watch) = waiting.await.unwrap();
    assert_eq!(state.unwrap().tag(), StateTag::Plain(guard.token()));
}

#[tokio::test]
async fn a_dropped_watch_is_not_sent_again() {
    let fake = FakeNode::start().await;
    let client = client(&[fake.addr]).await;
    let mut watch = client.watch_since("gone", StateTag::Free).unwrap();
    let quiet = tokio::time::timeout(Duration::from_millis(100), watch.next()).await;
    assert!(quiet.is_err());
    until("the W pending", || fake.pending_watches() == 1).await;
    drop(watch);
    let probes = lines_of(&fake, "S").len();
    fake.drop_connections();
    // Both connections dialled again and probed: a W still owned by the
    // client would have been sent again by now.
    until("reconnected", || lines_of(&fake, "S").len() >= probes + 2).await;
    client.inspect("gone").await.unwrap();
    assert_eq!(lines_of(&fake, "W ").len(), 1);
    assert_eq!(fake.pending_watches(), 0);
}

#[tokio::test]
async fn a_closed_client_ends_its_watches() {
    let fake = FakeNode::start().await;
    let client = client(&[fake.addr]).await;
    let mut watch = client.watch_since("end", StateTag::Free).unwrap();
    let waiting = tokio::spawn(async move { next(&mut watch).await });
    until("the W pending", || fake.pending_watches() == 1).await;
    client.close().await.unwrap();
    let ended = waiting.await.unwrap();
    assert!(matches!(ended, Err(Error::Closed)), "{ended:?}");
    assert!(matches!(client.watch("end"), Err(Error::Closed)));
}

#[tokio::test]
async fn an_elections_leader_change_is_observed() {
    let fake = FakeNode::start().await;
    let first = client(&[fake.addr]).await;
    let second = client(&[fake.addr]).await;
    let election = first.election("sched").unwrap();
    let mut observe = election.observe().unwrap();
    assert_eq!(next(&mut observe).await.unwrap(), None, "no leader yet");
    assert_eq!(election.leader().await.unwrap(), None);

    let leading = election.campaign("node-a", secs(30)).await.unwrap();
    let seen = next(&mut observe).await.unwrap().unwrap();
    assert_eq!(
        (seen.token, seen.value.unwrap().as_bytes()),
        (leading.token(), &b"node-a"[..])
    );

    // A second candidate waits for its turn.
    let rival = second.election("sched").unwrap();
    let campaign = tokio::spawn(async move { rival.campaign("node-b", secs(30)).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!campaign.is_finished(), "one leader at a time");

    leading.proclaim("node-a2").await.unwrap();
    let proclaimed = next(&mut observe).await.unwrap().unwrap();
    assert_eq!(proclaimed.value.unwrap().as_bytes(), b"node-a2");
    let leader = election.leader().await.unwrap().unwrap();
    assert_eq!(leader.value.unwrap().as_bytes(), b"node-a2");

    let old_token = leading.token();
    leading.resign().await.unwrap();
    let next_leader = tokio::time::timeout(secs(10), campaign)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(next_leader.token() > old_token);
    // Observed: the leader gone (maybe), then the new one.
    let mut seen = next(&mut observe).await.unwrap();
    if seen.is_none() {
        seen = next(&mut observe).await.unwrap();
    }
    let seen = seen.unwrap();
    assert_eq!(
        (seen.token, seen.value.unwrap().as_bytes()),
        (next_leader.token(), &b"node-b"[..])
    );
}

#[tokio::test]
async fn a_node_that_speaks_11_is_not_sent_12_requests() {
    // Its `S` answer has no protocol=1.2.
    let old = common::fake::FakeNode::start(common::fake::Script::Serve).await;
    let client = client(&[old.addr]).await;
    let guard = client.acquire("old", secs(1), secs(30)).await.unwrap();

    let options = client.acquire("o", secs(1), secs(30)).permits(2).await;
    assert!(
        matches!(options, Err(Error::Unsupported { .. })),
        "{options:?}"
    );
    let value = guard.set_value("v").await;
    assert!(matches!(value, Err(Error::Unsupported { .. })), "{value:?}");
    let mut watch = client.watch_since("old", StateTag::Free).unwrap();
    let watched = next(&mut watch).await;
    assert!(
        matches!(watched, Err(Error::Unsupported { .. })),
        "{watched:?}"
    );
    assert!(
        tokio::time::timeout(secs(1), watch.next())
            .await
            .unwrap()
            .is_none(),
        "ended"
    );
    let mut watch = client.watch("old").unwrap();
    let first = next(&mut watch).await;
    assert!(matches!(first, Err(Error::Unsupported { .. })), "{first:?}");
    let sent: Vec<String> = old.lines().into_iter().filter(|l| l != "S").collect();
    assert_eq!(sent, ["A old 1 30"], "nothing 1.2 went out");
}

#[tokio::test]
async fn a_watch_asks_for_the_nodes_maximum_wait_when_30_s_is_too_long() {
    let fake = FakeNode::start().await;
    fake.set_max_wait(Duration::from_millis(300));
    let client = client(&[fake.addr]).await;
    let mut watch = client.watch_since("short", StateTag::Free).unwrap();
    // The node's 0.3 s waits run out unchanged: the watch asks again.
    let quiet = tokio::time::timeout(secs(1), watch.next()).await;
    assert!(quiet.is_err(), "no change, no item: {quiet:?}");
    let sent = lines_of(&fake, "W ");
    assert_eq!(sent[0], "W short 30 -");
    assert!(
        sent.len() >= 3 && sent[1..].iter().all(|l| l == "W short 0 -"),
        "{sent:?}"
    );
    let guard = client
        .acquire("short", Duration::from_millis(200), secs(30))
        .await
        .unwrap();
    assert_eq!(
        next(&mut watch).await.unwrap().tag(),
        StateTag::Plain(guard.token())
    );
}
