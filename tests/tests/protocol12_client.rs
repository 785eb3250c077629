//! Protocol 1.2 through the Rust client against real nodes: semaphores,
//! shared locks, values, watches and elections on a single node, in a
//! priority cluster and in a 3-node Raft cluster, the serving node killed
//! (kill -9) under a pending watch and a waiting candidate: the client
//! redials, the observers see the next leader, and tokens keep rising.

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test

use std::net::SocketAddr;
use std::time::Duration;

use baton_client::{Client, Error, Guard, KeyStateExt, Leadership, LockMode, StateTag};
use baton_tests::cluster::{field, probe_status, Cluster};
use baton_tests::raft::{RaftCluster, SERIAL as RAFT_SERIAL, SETTLE as RAFT_SETTLE};
use baton_tests::Batond;
use futures_util::{Stream, StreamExt};

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

async fn client(addrs: &[SocketAddr]) -> Client {
    Client::builder()
        .servers(addrs.iter().map(ToString::to_string))
        .connect_timeout(secs(2))
        // Room for a Raft election on a loaded machine: until a leader is
        // agreed, followers answer `M ... -`.
        .request_timeout(secs(10))
        .build()
        .await
        .unwrap()
}

/// The next item of a stream, within `within`.
async fn next_within<S: Stream + Unpin>(stream: &mut S, within: Duration) -> S::Item {
    tokio::time::timeout(within, stream.next())
        .await
        .expect("an item in time")
        .expect("the stream goes on")
}

/// The next item of a stream, awaited in a task of its own: the test goes
/// on (kills a node) while it is pending, then takes the item and the
/// stream back.
fn pending_next<S>(mut stream: S, within: Duration) -> tokio::task::JoinHandle<(S::Item, S)>
where
    S: Stream + Unpin + Send + 'static,
    S::Item: Send,
{
    tokio::spawn(async move {
        let item = next_within(&mut stream, within).await;
        (item, stream)
    })
}

/// Waits until `key` has `n` waiters, as the serving node reports.
async fn until_waiters(client: &Client, key: &str, n: u64) {
    let deadline = tokio::time::Instant::now() + secs(20);
    loop {
        if client.inspect(key).await.is_ok_and(|s| s.waiters == n) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{key} never had {n} waiters"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Takes both permits of a 2-permit semaphore on `key`, with values "a"
/// and "b"; a third permit waits, another number of permits is refused.
async fn two_permits_held(client: &Client, key: &str) -> (Guard, Guard) {
    let mut held = Vec::new();
    for value in ["a", "b"] {
        let permit = client
            .acquire(key, secs(5), secs(60))
            .permits(2)
            .value(value);
        held.push(permit.await.unwrap());
    }
    assert!(held[1].token() > held[0].token());
    let full = client.try_acquire(key, secs(60)).permits(2).await;
    assert!(matches!(full, Err(Error::TimedOut { .. })), "{full:?}");
    let other = client.try_acquire(key, secs(60)).permits(3).await;
    assert!(
        matches!(&other, Err(Error::Rejected { reason }) if reason == "the key has 2 permits"),
        "{other:?}"
    );
    let b = held.pop().unwrap();
    (held.pop().unwrap(), b)
}

/// Waits until node `addr` reports `locks=n` (a priority standby has the
/// grants replicated).
async fn until_locks(addr: SocketAddr, n: u64) {
    let deadline = tokio::time::Instant::now() + secs(10);
    loop {
        let status = probe_status(addr, Duration::from_millis(500)).await;
        if status.is_some_and(|s| field(&s, "locks") == n.to_string()) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{addr} never had {n} locks"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_semaphore_permits_hand_over_in_order() {
    let node = Batond::start(&[]);
    let client = client(&[node.addr()]).await;
    let (a, b) = two_permits_held(&client, "sem").await;

    let state = client.inspect("sem").await.unwrap();
    assert_eq!((state.permits(), state.holder_count()), (2, 2));
    let values: Vec<_> = state
        .holders()
        .into_iter()
        .map(|h| (h.token, h.value))
        .collect();
    assert_eq!(values[0].0, a.token());
    assert_eq!(values[0].1.as_ref().unwrap().as_bytes(), b"a");
    assert_eq!(values[1].1.as_ref().unwrap().as_bytes(), b"b");

    // A waiter gets the permit a release frees, with a greater token.
    let waiting = {
        let client = client.clone();
        tokio::spawn(async move { client.acquire("sem", secs(10), secs(30)).permits(2).await })
    };
    until_waiters(&client, "sem", 1).await;
    a.release().await.unwrap();
    let c = waiting.await.unwrap().unwrap();
    assert!(c.token() > b.token());
    b.release().await.unwrap();
    c.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_shared_grants_exclude_a_writer_and_values_change() {
    let node = Batond::start(&[]);
    let client = client(&[node.addr()]).await;
    let r1 = client
        .acquire("rw", secs(5), secs(30))
        .shared()
        .await
        .unwrap();
    let r2 = client
        .acquire("rw", secs(5), secs(30))
        .shared()
        .await
        .unwrap();
    let state = client.inspect("rw").await.unwrap();
    assert_eq!((state.mode(), state.holder_count()), (LockMode::Shared, 2));
    let writer = client.try_acquire("rw", secs(30)).await;
    assert!(matches!(writer, Err(Error::TimedOut { .. })), "{writer:?}");

    r1.set_value("reader-1").await.unwrap();
    let state = client.inspect("rw").await.unwrap();
    assert_eq!(
        state.holders()[0].value.as_ref().unwrap().as_bytes(),
        b"reader-1"
    );
    r2.clear_value().await.unwrap();
    let token = r1.token();
    r1.release().await.unwrap();
    let gone = client.set_value("rw", token, "x").await;
    assert!(matches!(gone, Err(Error::NotHeld { .. })), "{gone:?}");
    r2.release().await.unwrap();
    client.try_acquire("rw", secs(30)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_watch_sees_each_change_and_survives_a_restart() {
    let mut node = Batond::start(&[]);
    let client = client(&[node.addr()]).await;
    let mut watch = client.watch("watched").unwrap();
    assert_eq!(
        next_within(&mut watch, secs(5)).await.unwrap().tag(),
        StateTag::Free
    );
    let guard = client
        .acquire("watched", secs(5), secs(30))
        .value("v1")
        .await
        .unwrap();
    let held = next_within(&mut watch, secs(5)).await.unwrap();
    assert_eq!(held.holders()[0].token, guard.token());
    guard.set_value("v2").await.unwrap();
    let changed = next_within(&mut watch, secs(5)).await.unwrap();
    assert_eq!(
        changed.holders()[0].value.as_ref().unwrap().as_bytes(),
        b"v2"
    );
    let token = guard.into_token();

    // Without a data directory the restarted node has forgotten the grant:
    // the watch, sent again after the reconnect, sees the key free.
    let mut watch = pending_next(watch, secs(20));
    tokio::time::sleep(Duration::from_millis(300)).await;
    node.restart();
    let (state, _watch) = (&mut watch).await.unwrap();
    assert_eq!(
        state.unwrap().tag(),
        StateTag::Free,
        "token {token} forgotten"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_election_hands_over_to_the_next_candidate() {
    let node = Batond::start(&[]);
    let first = client(&[node.addr()]).await;
    let second = client(&[node.addr()]).await;
    let election = first.election("elect/single").unwrap();
    let mut observe = election.observe().unwrap();
    assert_eq!(next_within(&mut observe, secs(5)).await.unwrap(), None);
    let leading = election.campaign("a", secs(5)).await.unwrap();
    let leader = next_within(&mut observe, secs(5)).await.unwrap().unwrap();
    assert_eq!(leader.value.unwrap().as_bytes(), b"a");

    let rival = second.election("elect/single").unwrap();
    let campaign = tokio::spawn(async move { rival.campaign("b", secs(5)).await });
    leading.proclaim("a2").await.unwrap();
    let leader = next_within(&mut observe, secs(5)).await.unwrap().unwrap();
    assert_eq!(leader.value.unwrap().as_bytes(), b"a2");
    let next = hand_over(leading, campaign, &mut observe, b"b").await;
    next.resign().await.unwrap();
}

/// A node whose `--max-wait` is shorter than a watch's wait: the watch and
/// the observer ask for the node's maximum and go on; a campaign asks
/// again each time that maximum runs out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_watch_and_campaign_on_a_node_with_a_short_max_wait() {
    let node = Batond::start(&["--max-wait", "2"]);
    let (first, second) = (client(&[node.addr()]).await, client(&[node.addr()]).await);
    let election = first.election("short").unwrap();
    let mut watch = first.watch("short").unwrap();
    let mut observe = election.observe().unwrap();
    assert_eq!(
        next_within(&mut watch, secs(5)).await.unwrap().tag(),
        StateTag::Free
    );
    assert_eq!(next_within(&mut observe, secs(5)).await.unwrap(), None);
    let leading = election.campaign("a", secs(10)).await.unwrap();
    let held = next_within(&mut watch, secs(5)).await.unwrap();
    assert_eq!(held.holders()[0].token, leading.token());
    assert_eq!(
        next_within(&mut observe, secs(5))
            .await
            .unwrap()
            .unwrap()
            .token,
        leading.token()
    );
    let rival = second.election("short").unwrap();
    let started = tokio::time::Instant::now();
    let campaign = tokio::spawn(async move { rival.campaign("b", secs(10)).await });
    until_waiters(&first, "short", 1).await;
    // Past the node's 2 s: the rival asked again, the watches were sent again.
    while started.elapsed() < Duration::from_millis(2_500) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    until_waiters(&first, "short", 1).await;
    assert!(!campaign.is_finished(), "the campaign gave up");
    leading.proclaim("a2").await.unwrap();
    let proclaimed = next_within(&mut observe, secs(5)).await.unwrap().unwrap();
    assert_eq!(proclaimed.value.unwrap().as_bytes(), b"a2");
    assert_eq!(
        next_within(&mut watch, secs(5)).await.unwrap().holders()[0]
            .value
            .as_ref()
            .unwrap()
            .as_bytes(),
        b"a2"
    );
    hand_over(leading, campaign, &mut observe, b"b").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn priority_watch_and_election_follow_a_failover() {
    let mut cluster = Cluster::start(3, &[]);
    cluster.wait_active(0, secs(10)).await;
    let peers = cluster.peers().to_vec();
    let client = client(&peers).await;
    let election = client.election("elect/priority").unwrap();
    let leading = election.campaign("node-a", secs(10)).await.unwrap();
    until_locks(peers[1], 1).await;

    let mut observe = election.observe().unwrap();
    let leader = next_within(&mut observe, secs(5)).await.unwrap().unwrap();
    assert_eq!(leader.token, leading.token());
    let mut observing = pending_next(observe, secs(30));

    // The active dies with the watch pending on it: the W is sent again to
    // the new active, which has the grant and its value.
    cluster.kill(0);
    cluster.wait_active(1, secs(10)).await;
    let still = election.leader().await.unwrap().unwrap();
    assert_eq!(
        (still.token, still.value.unwrap().as_bytes()),
        (leading.token(), &b"node-a"[..])
    );
    assert!(!observing.is_finished(), "the leader did not change");

    // Kept alive through the new active, proclaimed there, seen by the watch.
    leading.proclaim("node-a2").await.unwrap();
    let (item, mut observe) = (&mut observing).await.unwrap();
    let leader = item.unwrap().unwrap();
    assert_eq!(leader.value.unwrap().as_bytes(), b"node-a2");
    leading.resign().await.unwrap();
    assert_eq!(next_within(&mut observe, secs(10)).await.unwrap(), None);
}

/// The values of a key's holders, oldest first (`""` for none).
fn values(state: &baton_client::KeyState) -> Vec<String> {
    state
        .holders()
        .into_iter()
        .map(|h| h.value.map_or_else(String::new, |v| v.to_string()))
        .collect()
}

/// Resigns `leading`: the candidate whose campaign is `campaign` leads
/// next, with a greater token, and `observe` reports it with `value`.
async fn hand_over<S>(
    leading: Leadership,
    campaign: tokio::task::JoinHandle<baton_client::Result<Leadership>>,
    observe: &mut S,
    value: &[u8],
) -> Leadership
where
    S: Stream<Item = baton_client::Result<Option<baton_client::Leader>>> + Unpin,
{
    let old = leading.token();
    leading.resign().await.unwrap();
    let next = tokio::time::timeout(secs(20), campaign)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(next.token() > old, "{} after {old}", next.token());
    let seen = next_leader(observe).await;
    assert_eq!(
        (seen.token, seen.value.unwrap().as_bytes()),
        (next.token(), value)
    );
    next
}

/// The next leader an observer reports, past the free key a hand-over may
/// show between two leaders.
async fn next_leader<S>(observe: &mut S) -> baton_client::Leader
where
    S: Stream<Item = baton_client::Result<Option<baton_client::Leader>>> + Unpin,
{
    match next_within(observe, secs(10)).await.unwrap() {
        Some(leader) => leader,
        None => next_within(observe, secs(10)).await.unwrap().unwrap(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raft_semaphore_shared_locks_and_a_watch_ride_a_leader_kill() {
    let _serial = RAFT_SERIAL.lock().await;
    let mut cluster = RaftCluster::start(3);
    let (leader, _) = cluster.wait_leader(RAFT_SETTLE).await;
    // A follower first: the client follows its redirect.
    let mut peers = cluster.peers.clone();
    peers.rotate_left(leader + 1);
    let client = client(&peers).await;
    let (a, b) = two_permits_held(&client, "pool").await;
    b.set_value("b2").await.unwrap();

    // A writer waits for the reader; a reader behind the writer waits too.
    let reader = client
        .acquire("rw", secs(5), secs(60))
        .shared()
        .await
        .unwrap();
    let writing = {
        let client = client.clone();
        tokio::spawn(async move { client.acquire("rw", secs(20), secs(60)).await })
    };
    until_waiters(&client, "rw", 1).await;
    // Redirects bring every request to the leader's one connection, where
    // the writer's acquire of the key is in flight: this reader waits in
    // the client until the writer is answered, then queues behind it.
    let reading = {
        let client = client.clone();
        tokio::spawn(async move { client.acquire("rw", secs(20), secs(60)).shared().await })
    };
    let reader_token = reader.token();
    reader.release().await.unwrap();
    let writer = writing.await.unwrap().unwrap();
    assert!(writer.token() > reader_token);
    until_waiters(&client, "rw", 1).await;
    let rw = client.inspect("rw").await.unwrap();
    assert_eq!(
        (rw.mode(), rw.holder_count(), rw.waiters),
        (LockMode::Exclusive, 1, 1)
    );
    let writer_token = writer.token();
    writer.release().await.unwrap();
    let late = reading.await.unwrap().unwrap();
    assert!(late.token() > writer_token);

    // A watch of the pool is pending on the leader when it is killed.
    let mut watch = client.watch("pool").unwrap();
    let seen = next_within(&mut watch, secs(10)).await.unwrap();
    assert_eq!(values(&seen), ["a", "b2"]);
    let watching = pending_next(watch, secs(60));
    cluster.nodes[leader].kill();
    let (next, _) = cluster.wait_leader(RAFT_SETTLE).await;
    assert_ne!(next, leader);
    // The log kept both permits and their values: the watch, sent again
    // with the tag it had, waits on the new leader for the next change.
    let pool = client.inspect("pool").await.unwrap();
    assert_eq!(
        (pool.tag(), values(&pool)),
        (seen.tag(), vec!["a".into(), "b2".into()])
    );
    assert!(!watching.is_finished(), "the pool did not change");
    a.release().await.unwrap();
    let (state, _watch) = watching.await.unwrap();
    let state = state.unwrap();
    assert_eq!(state.holders()[0].token, b.token());
    assert_eq!(values(&state), ["b2"]);
    let c = client
        .acquire("pool", secs(5), secs(60))
        .permits(2)
        .await
        .unwrap();
    assert!(
        c.token() > late.token(),
        "{} after {}",
        c.token(),
        late.token()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raft_election_rides_a_leader_kill_with_a_candidate_waiting() {
    let _serial = RAFT_SERIAL.lock().await;
    let mut cluster = RaftCluster::start(3);
    let (leader, _) = cluster.wait_leader(RAFT_SETTLE).await;
    let peers = cluster.peers.clone();
    let (first, second, watcher) = (
        client(&peers).await,
        client(&peers).await,
        client(&peers).await,
    );
    let election = first.election("elect/raft").unwrap();
    let leading = election.campaign("node-a", secs(15)).await.unwrap();
    let rival = second.election("elect/raft").unwrap();
    let campaign = tokio::spawn(async move { rival.campaign("node-b", secs(15)).await });
    until_waiters(&first, "elect/raft", 1).await;
    let mut observe = watcher.election("elect/raft").unwrap().observe().unwrap();
    let now = next_within(&mut observe, secs(10)).await.unwrap().unwrap();
    assert_eq!(
        (now.token, now.value.unwrap().as_bytes()),
        (leading.token(), &b"node-a"[..])
    );
    let observing = pending_next(observe, secs(60));

    cluster.nodes[leader].kill();
    let (next, _) = cluster.wait_leader(RAFT_SETTLE).await;
    assert_ne!(next, leader);
    // The grant was committed: the same leader, kept alive through the new
    // Raft leader, proclaims there, and the observer (redialled) sees it.
    let still = election.leader().await.unwrap().unwrap();
    assert_eq!(still.token, leading.token());
    leading.proclaim("node-a2").await.unwrap();
    let (item, mut observe) = observing.await.unwrap();
    let proclaimed = item.unwrap().unwrap();
    assert_eq!(
        (proclaimed.token, proclaimed.value.unwrap().as_bytes()),
        (leading.token(), &b"node-a2"[..])
    );
    assert!(!leading.is_lost());

    // The waiting candidate's acquire, lost with the old leader, was sent
    // again: it queues on the new leader and leads after the resignation.
    until_waiters(&first, "elect/raft", 1).await;
    let successor = hand_over(leading, campaign, &mut observe, b"node-b").await;

    // The killed node comes back on its data directory, then the second
    // Raft leader dies: the clients redial, the successor stays leader and
    // proclaims through the third, and the next leader's token is greater.
    cluster.nodes[leader].restart();
    let (second_leader, _) = cluster.wait_leader(RAFT_SETTLE).await;
    let observing = pending_next(observe, secs(60));
    cluster.nodes[second_leader].kill();
    cluster.wait_leader(RAFT_SETTLE).await;
    successor.proclaim("node-b2").await.unwrap();
    let (item, mut observe) = observing.await.unwrap();
    assert_eq!(item.unwrap().unwrap().value.unwrap().as_bytes(), b"node-b2");
    assert!(!successor.is_lost());
    let old = successor.token();
    successor.resign().await.unwrap();
    assert_eq!(next_within(&mut observe, secs(10)).await.unwrap(), None);
    let again = election.campaign("node-a3", secs(15)).await.unwrap();
    assert!(again.token() > old, "{} after {old}", again.token());
    again.resign().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn priority_permits_shared_grants_and_a_waiting_candidate_ride_a_failover() {
    let mut cluster = Cluster::start(2, &[]);
    let active = cluster.wait_single_active(secs(10)).await;
    let peers = cluster.peers().to_vec();
    let (first, second) = (client(&peers).await, client(&peers).await);
    let mut pool = Vec::new();
    for value in ["w1", "w2"] {
        let permit = first
            .acquire("p/pool", secs(5), secs(60))
            .permits(2)
            .value(value)
            .await
            .unwrap();
        pool.push(permit);
    }
    let reader = first
        .acquire("p/rw", secs(5), secs(60))
        .shared()
        .await
        .unwrap();
    let election = first.election("p/elect").unwrap();
    let leading = election.campaign("node-a", secs(15)).await.unwrap();
    let rival = second.election("p/elect").unwrap();
    let campaign = tokio::spawn(async move { rival.campaign("node-b", secs(15)).await });
    until_waiters(&first, "p/elect", 1).await;
    let mut observe = second.election("p/elect").unwrap().observe().unwrap();
    let now = next_within(&mut observe, secs(10)).await.unwrap().unwrap();
    assert_eq!(now.token, leading.token());
    let observing = pending_next(observe, secs(60));
    until_locks(peers[1 - active], 4).await;

    cluster.kill(active);
    assert_eq!(cluster.wait_single_active(secs(10)).await, 1 - active);
    // The standby had every grant and value: the client, redialled, sees
    // them on the new active.
    let sem = first.inspect("p/pool").await.unwrap();
    assert_eq!(
        (sem.permits(), values(&sem)),
        (2, vec!["w1".into(), "w2".into()])
    );
    assert_eq!(
        first.inspect("p/rw").await.unwrap().mode(),
        LockMode::Shared
    );
    until_waiters(&first, "p/elect", 1).await;
    assert!(!observing.is_finished(), "the leader did not change");

    let old = leading.token();
    leading.resign().await.unwrap();
    let successor = tokio::time::timeout(secs(20), campaign)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(successor.token() > old);
    let (item, mut observe) = observing.await.unwrap();
    let seen = match item.unwrap() {
        Some(leader) => leader,
        None => next_leader(&mut observe).await,
    };
    assert_eq!(
        (seen.token, seen.value.unwrap().as_bytes()),
        (successor.token(), &b"node-b"[..])
    );
    for permit in pool {
        permit.release().await.unwrap();
    }
    reader.release().await.unwrap();
    successor.resign().await.unwrap();
}
