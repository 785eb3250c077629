//! A lease ends at its end (docs/protocol.md, "Guarantees"), not when the
//! node's timer gets round to expiring it: black-box with real `batond`
//! processes, a renewal, a value set or a release that reaches the node
//! past the lease's end is answered as for a grant no longer held (`N K`,
//! `N V`, `N R`), and the key passes to the next waiter with a higher
//! token. Single node and the active of a priority cluster.
//!
//! Landing between a lease's end and the node's timer takes no pause of
//! the node: the holder writes `Q` and the request together, and the node
//! handles them in order. A `Q` that no longer reports the grant says the
//! lease had ended before the request behind it, which must then be
//! refused. Renewals and value sets are probed until one is refused, so
//! one of them races the timer; a release goes once, aimed just past the
//! lease's end. The node before the fix accepted them, in every run.

use std::time::{Duration, Instant};

use baton_tests::cluster::Cluster;
use baton_tests::{grant_token, Batond, LineClient};

/// How long a key is probed before the test gives up on it.
const PROBE_FOR: Duration = Duration::from_secs(10);

/// Keys probed in turn: each lease end is one race with the node's timer.
const ROUNDS: usize = 20;

/// The token `Q` reports for a key: `None` when free (`token=-`).
fn queried_token(line: &str, key: &str) -> Option<u64> {
    let rest = line
        .strip_prefix(&format!("Q {key} token="))
        .unwrap_or_else(|| panic!("expected a Q answer for {key}, got {line:?}"));
    let token = rest.split(' ').next().unwrap_or_default();
    (token != "-").then(|| {
        token
            .parse()
            .unwrap_or_else(|_| panic!("bad token in {line:?}"))
    })
}

/// What a probe found: the request accepted while the grant was live, or
/// refused.
enum Probe {
    Accepted,
    Refused,
}

/// Writes `Q key` and `request` (which names the grant `token` of `key`)
/// in one write and reads both answers. An accepted request must come
/// with a `Q` that still reported the grant.
async fn probe(holder: &mut LineClient, key: &str, token: u64, request: &str) -> Probe {
    let op = &request[..1];
    holder
        .send_raw(format!("Q {key}\n{request}\n").as_bytes())
        .await;
    let queried = holder.recv().await;
    let answer = holder.recv().await;
    let live = queried_token(&queried, key) == Some(token);
    if answer == format!("{op} {key}") {
        assert!(
            live,
            "{request:?} accepted though the lease had ended: {queried:?}"
        );
        return Probe::Accepted;
    }
    assert_eq!(answer, format!("N {op} {key}"), "after {queried:?}");
    Probe::Refused
}

/// One round on `key`: `holder` takes it with a lease of `lease`, `waiter`
/// queues behind, and `request` (with `{t}` for the token) is probed until
/// refused; the waiter must then hold the key with a higher token.
async fn one_round(
    holder: &mut LineClient,
    waiter: &mut LineClient,
    key: &str,
    lease: &str,
    request: &str,
) {
    let token = grant_token(&holder.request(&format!("A {key} 0 {lease}")).await, key);
    waiter.send(&format!("A {key} 0 30")).await;
    let request = request.replace("{t}", &token.to_string());
    let started = Instant::now();
    while let Probe::Accepted = probe(holder, key, token, &request).await {
        assert!(
            started.elapsed() < PROBE_FOR,
            "{request:?} still accepted after {PROBE_FOR:?}"
        );
    }
    let next = grant_token(&waiter.recv().await, key);
    assert!(next > token, "handed on with token {next} after {token}");
    let released = waiter.request(&format!("R {key} {next}")).await;
    assert_eq!(released, format!("R {key}"));
}

/// Asks `Q` until `key`'s grant `token` is in its last millisecond; then
/// waits until that millisecond is over by the latest count: 1 ms after
/// the answer that said so. A release sent then lands just past the
/// lease's end, by at most about two round trips.
async fn past_the_last_ms(holder: &mut LineClient, key: &str, token: u64) {
    let started = Instant::now();
    loop {
        let queried = holder.request(&format!("Q {key}")).await;
        let last_ms_over = Instant::now() + Duration::from_millis(1);
        if queried_token(&queried, key) != Some(token) {
            return;
        }
        if queried.contains(" lease=0.001 ") {
            // A sleep would overshoot by more than the window aimed at.
            while Instant::now() < last_ms_over {
                std::hint::spin_loop();
            }
            return;
        }
        assert!(
            started.elapsed() < PROBE_FOR,
            "the lease runs on: {queried:?}"
        );
    }
}

/// One round of a release on `key` sent just past its lease's end (or, if
/// the aim is off, just before: released), then the waiter holds the key
/// with a higher token.
async fn one_release(holder: &mut LineClient, waiter: &mut LineClient, key: &str) {
    let token = grant_token(&holder.request(&format!("A {key} 0 0.02")).await, key);
    waiter.send(&format!("A {key} 0 30")).await;
    past_the_last_ms(holder, key, token).await;
    probe(holder, key, token, &format!("R {key} {token}")).await;
    let next = grant_token(&waiter.recv().await, key);
    assert!(next > token, "handed on with token {next} after {token}");
    let released = waiter.request(&format!("R {key} {next}")).await;
    assert_eq!(released, format!("R {key}"));
}

/// The requests a holder probes its grant with: renewals that keep a
/// lease 1 ms long, value sets on a lease of 20 ms, releases sent about a
/// lease's end.
#[derive(Clone, Copy, Debug)]
enum Change {
    Renew,
    SetValue,
    Release,
}

/// [`ROUNDS`] rounds of `change` on `node`, each on a key of its own.
async fn rounds(node: &Batond, change: Change) {
    let mut holder = node.connect().await;
    let mut waiter = node.connect().await;
    for round in 0..ROUNDS {
        let key = format!("{change:?}/{round}");
        let (holder, waiter) = (&mut holder, &mut waiter);
        match change {
            Change::Renew => {
                let renew = format!("K {key} {{t}} 0.001");
                one_round(holder, waiter, &key, "0.001", &renew).await;
            }
            Change::SetValue => {
                let set_value = format!("V {key} {{t}} probe");
                one_round(holder, waiter, &key, "0.02", &set_value).await;
            }
            Change::Release => one_release(holder, waiter, &key).await,
        }
    }
}

#[tokio::test]
async fn a_single_node_refuses_a_renewal_past_the_lease_end() {
    rounds(&Batond::start(&[]), Change::Renew).await;
}

#[tokio::test]
async fn a_single_node_refuses_a_value_set_past_the_lease_end() {
    rounds(&Batond::start(&[]), Change::SetValue).await;
}

#[tokio::test]
async fn a_single_node_refuses_a_release_past_the_lease_end() {
    rounds(&Batond::start(&[]), Change::Release).await;
}

#[tokio::test]
async fn a_priority_active_refuses_requests_past_the_lease_end() {
    let mut cluster = Cluster::start(2, &[]);
    let active = cluster.wait_single_active(Duration::from_secs(20)).await;
    for change in [Change::Renew, Change::SetValue, Change::Release] {
        rounds(cluster.node_mut(active), change).await;
    }
}
