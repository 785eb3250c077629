//! Turns of one key on a node with two connections: a free one is taken,
//! and callers wait for one first come first served.

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test

use std::sync::Arc;
use std::time::Duration;

use baton_proto::Op;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::{ConnId, LineKey, NoTurn, Turn, Turns};
use crate::connection::match_key;

fn line(key: &[u8]) -> LineKey {
    ("node:1".to_owned(), match_key(Op::Acquire, Some(key)))
}

fn both() -> Vec<ConnId> {
    vec![1, 2]
}

/// Takes a turn of `line(b"k")` on connections 1 and 2, in a task.
fn take(turns: &Arc<Turns>, until: Option<Instant>) -> JoinHandle<Result<Turn, NoTurn>> {
    let turns = Arc::clone(turns);
    let (_keep, mut others) = watch::channel(0);
    tokio::spawn(async move {
        let taken = turns.take(&line(b"k"), both, &mut others, until).await;
        drop(_keep);
        taken
    })
}

/// Lets the spawned takers run as far as they can.
async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

async fn conn_of(taker: JoinHandle<Result<Turn, NoTurn>>) -> Turn {
    taker.await.unwrap().unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_second_call_of_a_key_takes_the_other_connection() {
    let turns = Arc::new(Turns::default());
    let first = conn_of(take(&turns, None)).await;
    let second = conn_of(take(&turns, None)).await;
    assert_eq!((first.conn, second.conn), (1, 2));
    // Another key, or another op, is free on the first connection.
    let (_keep, mut others) = watch::channel(0);
    let other_key = turns.take(&line(b"j"), both, &mut others, None).await;
    assert_eq!(other_key.unwrap().conn, 1);
    let watch_line = ("node:1".to_owned(), match_key(Op::Watch, Some(b"k")));
    let watch = turns.take(&watch_line, both, &mut others, None).await;
    assert_eq!(watch.unwrap().conn, 1);
}

#[tokio::test(start_paused = true)]
async fn callers_wait_for_a_free_connection_first_come_first_served() {
    let turns = Arc::new(Turns::default());
    let first = conn_of(take(&turns, None)).await;
    let second = conn_of(take(&turns, None)).await;
    let third = take(&turns, None);
    settle().await;
    let fourth = take(&turns, None);
    settle().await;
    assert!(!third.is_finished() && !fourth.is_finished());

    drop(second);
    let third = conn_of(third).await;
    assert_eq!(third.conn, 2);
    settle().await;
    assert!(!fourth.is_finished(), "every connection is busy again");

    // A newcomer does not pass the fourth when a connection frees.
    drop(first);
    let fifth = take(&turns, None);
    let fourth = conn_of(fourth).await;
    assert_eq!(fourth.conn, 1);
    settle().await;
    assert!(!fifth.is_finished());
    drop(third);
    assert_eq!(conn_of(fifth).await.conn, 2);
}

#[tokio::test(start_paused = true)]
async fn a_wait_that_runs_out_leaves_the_line_unsent() {
    let turns = Arc::new(Turns::default());
    let _first = conn_of(take(&turns, None)).await;
    let second = conn_of(take(&turns, None)).await;
    let short = take(&turns, Some(Instant::now() + Duration::from_secs(1)));
    settle().await;
    let long = take(&turns, Some(Instant::now() + Duration::from_secs(20)));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(short.await.unwrap().unwrap_err(), NoTurn::WaitRanOut);
    drop(second);
    assert_eq!(conn_of(long).await.conn, 2, "the next in line goes");
}

#[tokio::test(start_paused = true)]
async fn with_no_usable_connection_there_is_no_turn_to_wait_for() {
    let turns = Arc::new(Turns::default());
    let (_keep, mut others) = watch::channel(0);
    let none = turns.take(&line(b"k"), Vec::new, &mut others, None).await;
    assert_eq!(none.unwrap_err(), NoTurn::NoConnection);
}

#[tokio::test(start_paused = true)]
async fn a_connection_that_comes_up_is_taken_by_a_waiting_caller() {
    let turns = Arc::new(Turns::default());
    let (up, mut others) = watch::channel(0);
    let usable = Arc::new(std::sync::Mutex::new(vec![1]));
    let conns = {
        let usable = Arc::clone(&usable);
        move || usable.lock().unwrap().clone()
    };
    let _first = turns.take(&line(b"k"), &conns, &mut others, None).await;
    let waiting = {
        let turns = Arc::clone(&turns);
        let mut others = others.clone();
        let conns = conns.clone();
        tokio::spawn(async move { turns.take(&line(b"k"), conns, &mut others, None).await })
    };
    settle().await;
    assert!(!waiting.is_finished());
    usable.lock().unwrap().push(2);
    up.send_replace(1);
    assert_eq!(waiting.await.unwrap().unwrap().conn, 2);
}
