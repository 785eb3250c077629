//! Per connection, a read sees every write of the same connection sent
//! before it, in every mode (docs/protocol.md, "Looking at a key: `Q`"):
//! on a Raft leader too, where a write is answered only once it commits.
//! Each round pipelines a write and a `Q` of its key in one send, and the
//! `Q` must report the key as the write left it: a renewal's lease, a set
//! value, a release, a release that handed the key to a waiter; and a
//! `W` answered at once shows the value set before it.

use std::time::{Duration, Instant};

use baton_tests::raft::{RaftCluster, SERIAL, SETTLE};
use baton_tests::{grant_token, LineClient};

/// Rounds of each kind: enough that a read overtaking the write before
/// it shows up (it did in most rounds before reads waited for writes).
const ROUNDS: usize = 40;
/// Every kind's rounds end by then, however slow the machine.
const KIND_BUDGET: Duration = Duration::from_secs(60);

/// Sends `write` and `Q k` in one write; gives (the write's answer, the
/// query's), whichever order they come in.
async fn write_then_query(client: &mut LineClient, write: &str) -> (String, String) {
    write_then_read(client, write, "Q k").await
}

/// Sends `write` and `read` (a `Q` or `W`) in one write; gives (the
/// write's answer, the read's), whichever order they come in.
async fn write_then_read(client: &mut LineClient, write: &str, read: &str) -> (String, String) {
    client
        .send_raw(format!("{write}\n{read}\n").as_bytes())
        .await;
    let (first, second) = (client.recv().await, client.recv().await);
    if first.starts_with(&read[..2]) {
        (second, first)
    } else {
        (first, second)
    }
}

/// The value of `name=` in a `Q` answer, if it has one.
fn maybe_field<'a>(answer: &'a str, name: &str) -> Option<&'a str> {
    let prefix = format!("{name}=");
    answer
        .split(' ')
        .find_map(|f| f.strip_prefix(prefix.as_str()))
}

/// The value of `name=` in a `Q` answer.
fn field<'a>(answer: &'a str, name: &str) -> &'a str {
    maybe_field(answer, name).unwrap_or_else(|| panic!("no {name}= in {answer:?}"))
}

/// Counts the rounds whose `Q` missed the write before it; each round
/// runs `round(i)`, which says whether its `Q` saw its write.
struct Stale {
    kind: &'static str,
    rounds: usize,
    stale: Vec<String>,
}

impl Stale {
    fn new(kind: &'static str) -> Stale {
        Stale {
            kind,
            rounds: 0,
            stale: Vec::new(),
        }
    }

    fn check(&mut self, seen: bool, what: String) {
        self.rounds += 1;
        if !seen {
            self.stale.push(what);
        }
    }

    fn report(&self) -> String {
        format!(
            "{}: {} of {} reads missed the write before them{}",
            self.kind,
            self.stale.len(),
            self.rounds,
            self.stale
                .first()
                .map_or(String::new(), |s| format!(" (first: {s})")),
        )
    }
}

async fn renewals(client: &mut LineClient) -> Stale {
    let mut stale = Stale::new("K then Q");
    let token = grant_token(&client.request("A k 0 60").await, "k");
    let start = Instant::now();
    for i in 0..ROUNDS {
        if start.elapsed() > KIND_BUDGET {
            break;
        }
        // Alternately 20 and 60 s: the lease left tells which applied.
        let lease = if i % 2 == 0 { 20 } else { 60 };
        let (renewed, query) = write_then_query(client, &format!("K k {token} {lease}")).await;
        assert_eq!(renewed, "K k");
        let left: f64 = field(&query, "lease").parse().expect("a lease");
        let seen = if lease == 20 {
            left <= 20.0
        } else {
            left > 40.0
        };
        stale.check(seen, format!("K k {token} {lease} then {query}"));
    }
    client.request(&format!("R k {token}")).await;
    stale
}

async fn values(client: &mut LineClient) -> Stale {
    let mut stale = Stale::new("V then Q");
    let token = grant_token(&client.request("A k 0 60").await, "k");
    let start = Instant::now();
    for i in 0..ROUNDS {
        if start.elapsed() > KIND_BUDGET {
            break;
        }
        let (set, query) = write_then_query(client, &format!("V k {token} v{i}")).await;
        assert_eq!(set, "V k");
        // A key without a value answers the 1.1 line, without `holder=`.
        let holder = maybe_field(&query, "holder").unwrap_or_default();
        let seen = holder.starts_with(&format!("{token},")) && holder.ends_with(&format!(",v{i}"));
        stale.check(seen, format!("V k {token} v{i} then {query}"));
    }
    client.request(&format!("R k {token}")).await;
    stale
}

/// A `W` whose client saw an older state is answered at once, with the
/// state its own `V` before it left.
async fn watches(client: &mut LineClient) -> Stale {
    let mut stale = Stale::new("V then W");
    let token = grant_token(&client.request("A k 0 60").await, "k");
    let older = client.request(&format!("V k {token} older")).await;
    assert_eq!(older, "V k");
    let seen = field(&client.request("Q k").await, "state").to_owned();
    let start = Instant::now();
    for i in 0..ROUNDS {
        if start.elapsed() > KIND_BUDGET {
            break;
        }
        let set = format!("V k {token} v{i}");
        let (set_answer, watched) = write_then_read(client, &set, &format!("W k 10 {seen}")).await;
        assert_eq!(set_answer, "V k");
        let holder = maybe_field(&watched, "holder").unwrap_or_default();
        let saw = holder.ends_with(&format!(",v{i}"));
        stale.check(saw, format!("V k {token} v{i} then {watched}"));
    }
    client.request(&format!("R k {token}")).await;
    stale
}

async fn releases(client: &mut LineClient) -> Stale {
    let mut stale = Stale::new("R then Q");
    let start = Instant::now();
    for _ in 0..ROUNDS {
        if start.elapsed() > KIND_BUDGET {
            break;
        }
        let token = grant_token(&client.request("A k 0 60").await, "k");
        let (released, query) = write_then_query(client, &format!("R k {token}")).await;
        assert_eq!(released, "R k");
        let seen = field(&query, "token") == "-";
        stale.check(seen, format!("R k {token} then {query}"));
    }
    stale
}

/// Two connections take turns: the holder releases with a `Q` behind,
/// while the other waits for the key; the `Q` must name the waiter's
/// grant, whose token the waiter then receives.
async fn hand_overs(holder: &mut LineClient, waiter: &mut LineClient) -> Stale {
    let mut stale = Stale::new("R then Q, a waiter queued");
    let mut token = grant_token(&holder.request("A k 0 60").await, "k");
    let start = Instant::now();
    for _ in 0..ROUNDS {
        if start.elapsed() > KIND_BUDGET {
            break;
        }
        waiter.send("A k 30 60").await;
        // Queued once the leader's table counts it (polled: the acquire
        // is read by another connection's task).
        let queued = Instant::now() + Duration::from_secs(10);
        while field(&holder.request("Q k").await, "waiters") != "1" {
            assert!(Instant::now() < queued, "the waiter never queued");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let (released, query) = write_then_query(holder, &format!("R k {token}")).await;
        assert_eq!(released, "R k");
        let next = grant_token(&waiter.recv().await, "k");
        let seen = field(&query, "token") == next.to_string();
        stale.check(seen, format!("R k {token} (next {next}) then {query}"));
        token = next;
        std::mem::swap(holder, waiter);
    }
    holder.request(&format!("R k {token}")).await;
    stale
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raft_leader_s_query_sees_the_writes_its_connection_pipelined_before_it() {
    let _serial = SERIAL.lock().await;
    let mut cluster = RaftCluster::start(3);
    let (leader, _) = cluster.wait_leader(SETTLE).await;
    let mut client = LineClient::connect(cluster.peers[leader]).await;
    let mut other = LineClient::connect(cluster.peers[leader]).await;
    let kinds = [
        renewals(&mut client).await,
        values(&mut client).await,
        watches(&mut client).await,
        releases(&mut client).await,
        hand_overs(&mut client, &mut other).await,
    ];
    let reports: Vec<String> = kinds.iter().map(Stale::report).collect();
    println!("{}", reports.join("\n"));
    assert!(
        kinds.iter().all(|k| k.stale.is_empty() && k.rounds > 0),
        "{}",
        reports.join("\n")
    );
}
