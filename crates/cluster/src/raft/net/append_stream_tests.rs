//! Which requests the feed hands out, and when (tokio's paused clock).

use std::time::Duration;

use futures_util::stream::BoxStream;
use openraft::entry::EntryPayload;
use openraft::impls::leader_id_adv::LeaderId;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::*;
use crate::raft::types::{Entry, LogId, Vote};

/// Longer than the production hold: tokio's timers tick in milliseconds.
const HOLD: Duration = Duration::from_millis(5);

fn log_id(index: u64) -> Option<LogId> {
    Some(LogId {
        leader_id: LeaderId {
            term: 3,
            node_id: 0,
        },
        index,
    })
}

/// A request from the leader of term 3 starting after `prev`, carrying
/// `entries` entries and commit index `commit`.
fn request(prev: u64, entries: u64, commit: u64) -> Request {
    AppendEntriesRequest {
        vote: Vote {
            leader_id: LeaderId {
                term: 3,
                node_id: 0,
            },
            committed: true,
        },
        prev_log_id: log_id(prev),
        entries: (prev + 1..=prev + entries)
            .map(|index| Entry {
                log_id: log_id(index).unwrap_or_else(|| unreachable!()),
                payload: EntryPayload::Blank,
            })
            .collect(),
        leader_commit: log_id(commit),
    }
}

/// What a test compares of a request: where it starts, how many
/// entries, its commit index, its leader.
type Seen = (Option<u64>, usize, Option<u64>, u64);

fn seen(request: &Request) -> Seen {
    (
        request.prev_log_id.as_ref().map(|l| l.index),
        request.entries.len(),
        request.leader_commit.as_ref().map(|l| l.index),
        request.vote.leader_id.node_id,
    )
}

type Sender = mpsc::UnboundedSender<Request>;
type Input = BoxStream<'static, Request>;

fn feed() -> (Sender, Feed<Input>) {
    let (send, receive) = mpsc::unbounded_channel();
    let input = futures_util::stream::unfold(receive, |mut receive| async move {
        receive.recv().await.map(|request| (request, receive))
    });
    (send, Feed::new(Box::pin(input), HOLD))
}

/// What the feed hands out next, and how long that took.
async fn next(feed: &mut Feed<Input>) -> (Option<Seen>, Duration) {
    let started = Instant::now();
    let request = feed.next_to_send().await;
    (request.as_ref().map(seen), started.elapsed())
}

fn some(request: Request) -> Option<Seen> {
    Some(seen(&request))
}

#[tokio::test(start_paused = true)]
async fn a_request_with_entries_goes_at_once() {
    let (send, mut feed) = feed();
    let _ = send.send(request(5, 2, 4));
    assert_eq!(
        next(&mut feed).await,
        (some(request(5, 2, 4)), Duration::ZERO)
    );
}

#[tokio::test(start_paused = true)]
async fn a_commit_alone_waits_the_hold_then_goes() {
    let (send, mut feed) = feed();
    let _ = send.send(request(7, 0, 7));
    assert_eq!(next(&mut feed).await, (some(request(7, 0, 7)), HOLD));
}

#[tokio::test(start_paused = true)]
async fn entries_from_the_same_place_carry_the_held_commit() {
    let (send, mut feed) = feed();
    let _ = send.send(request(7, 0, 7));
    let later = send.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(1)).await;
        let _ = later.send(request(7, 0, 7));
        tokio::time::sleep(Duration::from_millis(1)).await;
        let _ = later.send(request(7, 1, 7));
    });
    // The second commit-only request replaced the first one, and the
    // entries replaced both, without waiting out the hold.
    assert_eq!(
        next(&mut feed).await,
        (some(request(7, 1, 7)), Duration::from_millis(2))
    );
}

#[tokio::test(start_paused = true)]
async fn a_chain_of_commits_waits_no_longer_than_one_hold() {
    let (send, mut feed) = feed();
    let _ = send.send(request(7, 0, 6));
    let later = send.clone();
    tokio::spawn(async move {
        for commit in [7, 7, 7] {
            tokio::time::sleep(Duration::from_millis(2)).await;
            let _ = later.send(request(7, 0, commit));
        }
    });
    assert_eq!(next(&mut feed).await, (some(request(7, 0, 7)), HOLD));
}

#[tokio::test(start_paused = true)]
async fn a_request_from_elsewhere_lets_the_held_one_go_first() {
    let (send, mut feed) = feed();
    let _ = send.send(request(7, 0, 7));
    // A probe further back, then a lower commit, then another leader's.
    let _ = send.send(request(4, 0, 7));
    let _ = send.send(request(4, 0, 3));
    let mut other_leader = request(4, 3, 7);
    other_leader.vote.leader_id.node_id = 1;
    let _ = send.send(other_leader.clone());
    drop(send);
    assert_eq!(
        next(&mut feed).await,
        (some(request(7, 0, 7)), Duration::ZERO)
    );
    assert_eq!(
        next(&mut feed).await,
        (some(request(4, 0, 7)), Duration::ZERO)
    );
    assert_eq!(
        next(&mut feed).await,
        (some(request(4, 0, 3)), Duration::ZERO)
    );
    assert_eq!(next(&mut feed).await, (some(other_leader), Duration::ZERO));
    assert_eq!(next(&mut feed).await, (None, Duration::ZERO));
}

#[tokio::test(start_paused = true)]
async fn a_heartbeat_alone_in_its_stream_goes_at_once() {
    // openraft sends each heartbeat as a stream of one request.
    let heartbeat = request(7, 0, 7);
    let expected = seen(&heartbeat);
    let mut feed = Feed::new(futures_util::stream::iter([heartbeat]), HOLD);
    let started = Instant::now();
    assert_eq!(feed.next_to_send().await.as_ref().map(seen), Some(expected));
    assert_eq!(started.elapsed(), Duration::ZERO);
    assert!(feed.next_to_send().await.is_none());
}
