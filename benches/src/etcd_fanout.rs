//! etcd's side of the watch fan-out, where its election maps: an
//! `Election.Observe` is a watch of the election's key, and a campaign
//! puts it. So: W watches of one key spread over the same connections as
//! Baton's (one gRPC watch stream each, carrying its share, as the Go
//! client multiplexes a client's watches), each stream's creations
//! confirmed, then one put from another connection. Figure: milliseconds
//! from the put being sent until the last watcher has its event.

use std::net::SocketAddr;
use std::time::Duration;

use etcd_client::{Client, WatchStream, Watcher};
use tokio::task::JoinSet;
use tokio::time::{timeout_at, Instant};

use crate::error::BenchError;
use crate::fanout::{gather, spread, Answered, Fanout, WATCHES_PER_CONNECTION};
use crate::histogram::Histogram;

/// How long opening the connections and creating the watches may take.
const SETUP_LIMIT: Duration = Duration::from_secs(60);

fn peer(error: impl std::fmt::Display) -> BenchError {
    BenchError::Peer {
        target: "etcd",
        message: error.to_string(),
    }
}

/// Runs `future` until `at`, a peer error past it.
async fn until<T>(
    at: Instant,
    what: &str,
    future: impl std::future::Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T, BenchError> {
    timeout_at(at, future)
        .await
        .map_err(|_| peer(format!("{what} timed out")))?
        .map_err(peer)
}

async fn connect(addr: SocketAddr, at: Instant) -> Result<Client, BenchError> {
    until(
        at,
        "connect",
        Client::connect([format!("http://{addr}")], None),
    )
    .await
}

/// One connection's watches, all created.
struct Watches {
    _client: Client,
    /// Kept: dropping it would end the stream, and the watches with it.
    _watcher: Watcher,
    stream: WatchStream,
    count: usize,
}

/// Opens a connection with `count` watches of `key` on one stream and
/// waits until the server has confirmed creating each.
async fn watches(
    addr: SocketAddr,
    key: &str,
    count: usize,
    at: Instant,
) -> Result<Watches, BenchError> {
    let mut client = connect(addr, at).await?;
    let (mut watcher, mut stream) = until(at, "watch", client.watch(key, None)).await?;
    for _ in 1..count {
        until(at, "watch", watcher.watch(key, None)).await?;
    }
    let mut created = 1;
    while created < count {
        match until(at, "watch creation", stream.message()).await? {
            Some(response) if response.created() => created += 1,
            Some(_) => return Err(peer("a watch had an event before the put")),
            None => return Err(peer("the watch stream ended")),
        }
    }
    Ok(Watches {
        _client: client,
        _watcher: watcher,
        stream,
        count,
    })
}

/// Runs one fan-out of `watchers` on a fresh key of the etcd at `addr`.
pub async fn run(
    addr: SocketAddr,
    watchers: usize,
    prefix: &str,
    drain: Duration,
) -> Result<Fanout, BenchError> {
    let key = format!("{prefix}fan");
    let setup_until = Instant::now() + SETUP_LIMIT;
    let mut all = Vec::new();
    for count in spread(watchers, WATCHES_PER_CONNECTION) {
        all.push(watches(addr, &key, count, setup_until).await?);
    }
    let mut putter = connect(addr, setup_until).await?;
    let started = Instant::now();
    let give_up_at = started + drain;
    let mut tasks = JoinSet::new();
    for watches in all {
        tasks.spawn(await_events(watches, started, give_up_at));
    }
    let put = until(give_up_at, "put", putter.put(key.as_str(), "leader", None)).await?;
    let revision = put
        .header()
        .map(|header| header.revision())
        .ok_or_else(|| peer("put response without a header"))?;
    let fanout = gather(tasks, |&seen: &i64| match seen == revision {
        true => Ok(()),
        false => Err(peer(format!(
            "a watcher saw revision {seen}, not the put's {revision}"
        ))),
    })
    .await?;
    let _ = until(give_up_at, "delete", putter.delete(key.as_str(), None)).await;
    Ok(fanout)
}

/// Reads events until each watch of `watches` has had one: each one's
/// latency from `started`, the latest, and the revision they report.
async fn await_events(
    mut watches: Watches,
    started: Instant,
    give_up_at: Instant,
) -> Result<Answered<i64>, BenchError> {
    let mut latencies = Histogram::new();
    let mut latest = Duration::ZERO;
    let mut revision = None;
    let mut seen = 0;
    while seen < watches.count {
        let Some(response) = until(give_up_at, "events", watches.stream.message()).await? else {
            return Err(peer(
                "the watch stream ended before every watch had its event",
            ));
        };
        let now = Instant::now();
        for event in response.events() {
            let at = event.kv().map(|kv| kv.mod_revision());
            if revision.is_some() && at != revision {
                return Err(peer("watch events of one put differ"));
            }
            revision = at;
            latencies.record(now - started);
            latest = now - started;
            seen += 1;
        }
    }
    Ok((latencies, latest, revision.unwrap_or_default()))
}
