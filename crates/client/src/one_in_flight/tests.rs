//! The line of acquires and watches of one key, alone and on a connection
//! whose node would answer a later acquire before an older one.

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use baton_core::{AcquireOptions, Key, LockMode, StateTag, Token};
use baton_proto::{Request, Response};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use super::OneInFlight;
use crate::connection::{self, match_key, Call, Serving, Unsent};
use crate::lifecycle::Background;
use crate::liveness::Liveness;
use crate::turns::{NoTurn, Turns};

type Outcome = oneshot::Receiver<Result<Response, Unsent>>;

fn key() -> Key {
    Key::new(b"k").unwrap()
}

fn acquire(wait_ms: u64, lease_ms: u64) -> Request {
    Request::Acquire {
        key: key(),
        wait_ms,
        lease_ms,
        options: AcquireOptions::default(),
    }
}

fn call(req: Request) -> (Call, Outcome) {
    let (reply, outcome) = oneshot::channel();
    let reply = connection::Reply::new(reply);
    (Call { req, reply }, outcome)
}

fn wait_of(call: &Call) -> u64 {
    match &call.req {
        Request::Acquire { wait_ms, .. } | Request::Watch { wait_ms, .. } => *wait_ms,
        other => panic!("not an acquire or a watch: {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_second_acquire_of_a_key_waits_and_goes_with_what_is_left_of_its_wait() {
    let mut lines = OneInFlight::default();
    let start = Instant::now();
    let (first, _) = call(acquire(20_000, 30_000));
    assert!(lines.admit(first, start).is_some());
    let (second, _second) = call(acquire(20_000, 31_000));
    assert!(
        lines.admit(second, start).is_none(),
        "one in flight already"
    );
    // Other keys and other ops are not held back.
    let (query, _) = call(Request::Query { key: key() });
    assert!(lines.admit(query, start).is_some());

    let a_k = match_key(baton_proto::Op::Acquire, Some(b"k"));
    let later = start + Duration::from_millis(2_500);
    let next = lines.answered(&a_k, later).unwrap();
    assert_eq!(wait_of(&next), 17_500);
    // The key stays in flight with it: a third one waits again.
    let (third, _third) = call(acquire(0, 32_000));
    assert!(lines.admit(third, later).is_none());
    let next = lines.answered(&a_k, later).unwrap();
    assert_eq!(wait_of(&next), 0, "a wait of 0 stays 0");
    assert!(lines.answered(&a_k, later).is_none());
    // Free again.
    let (fourth, _) = call(acquire(5_000, 30_000));
    assert!(lines.admit(fourth, later).is_some());
}

#[tokio::test(start_paused = true)]
async fn a_kept_acquire_whose_wait_runs_out_ends_unsent_and_a_cancelled_one_leaves() {
    let mut lines = OneInFlight::default();
    let start = Instant::now();
    let (first, _) = call(acquire(20_000, 30_000));
    lines.admit(first, start).unwrap();
    let (short, mut short_outcome) = call(acquire(1_000, 31_000));
    let (cancelled, cancelled_outcome) = call(acquire(20_000, 32_000));
    let (long, _long) = call(acquire(20_000, 33_000));
    for kept in [short, cancelled, long] {
        assert!(lines.admit(kept, start).is_none());
    }
    assert_eq!(lines.next_deadline(), Some(start + Duration::from_secs(1)));
    drop(cancelled_outcome);
    lines.expire(start + Duration::from_millis(999));
    assert!(short_outcome.try_recv().is_err(), "not yet");
    lines.expire(start + Duration::from_secs(1));
    assert_eq!(short_outcome.try_recv().unwrap(), Err(Unsent));
    assert_eq!(lines.next_deadline(), Some(start + Duration::from_secs(20)));

    let a_k = match_key(baton_proto::Op::Acquire, Some(b"k"));
    let next = lines
        .answered(&a_k, start + Duration::from_secs(2))
        .unwrap();
    let Request::Acquire { lease_ms, .. } = next.req else {
        panic!("an acquire")
    };
    assert_eq!(lease_ms, 33_000, "the cancelled one left the line");
}

#[tokio::test(start_paused = true)]
async fn a_kept_acquire_found_out_of_time_when_its_turn_comes_ends_unsent() {
    let mut lines = OneInFlight::default();
    let start = Instant::now();
    let (first, _) = call(acquire(20_000, 30_000));
    lines.admit(first, start).unwrap();
    let (short, mut outcome) = call(acquire(1_000, 31_000));
    assert!(lines.admit(short, start).is_none());
    let a_k = match_key(baton_proto::Op::Acquire, Some(b"k"));
    assert!(lines
        .answered(&a_k, start + Duration::from_secs(1))
        .is_none());
    assert_eq!(outcome.try_recv().unwrap(), Err(Unsent));
}

/// A node on the other end of a duplex: answers `S` itself, hands every
/// other line to the test, and writes the lines the test gives it.
struct FakeNode {
    heard: mpsc::UnboundedReceiver<String>,
    say: mpsc::UnboundedSender<String>,
}

const STATUS: &str =
    "S role=single mode=single self=n:1 active=n:1 token=1 locks=0 waiters=0 version=0";

impl FakeNode {
    fn start(socket: DuplexStream) -> FakeNode {
        let (read, mut write) = tokio::io::split(socket);
        let (heard_tx, heard) = mpsc::unbounded_channel();
        let (say, mut said) = mpsc::unbounded_channel::<String>();
        let answer_status = say.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(read).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let _ = match line.as_str() {
                    "S" => answer_status.send(STATUS.to_owned()),
                    _ => heard_tx.send(line),
                };
            }
        });
        tokio::spawn(async move {
            while let Some(line) = said.recv().await {
                write
                    .write_all(format!("{line}\n").as_bytes())
                    .await
                    .unwrap();
            }
        });
        FakeNode { heard, say }
    }

    async fn next_line(&mut self) -> String {
        let line = tokio::time::timeout(Duration::from_secs(60), self.heard.recv());
        line.await.unwrap().unwrap()
    }

    fn reply(&self, line: &str) {
        self.say.send(line.to_owned()).unwrap();
    }

    /// Nothing has been heard since the last line taken, for a while.
    async fn hears_nothing(&mut self) {
        tokio::time::sleep(Duration::from_millis(300)).await;
        if let Ok(line) = self.heard.try_recv() {
            panic!("the client sent {line} while one of its key was in flight");
        }
    }
}

/// Hands `req` to the connection; its outcome comes on the receiver.
fn send(calls: &mpsc::UnboundedSender<Call>, req: Request) -> Outcome {
    let (call, outcome) = call(req);
    calls.send(call).unwrap();
    outcome
}

async fn outcome_of(outcome: Outcome) -> Result<Response, Unsent> {
    let outcome = tokio::time::timeout(Duration::from_secs(60), outcome);
    outcome.await.unwrap().unwrap()
}

fn granted(token: Token) -> Result<Response, Unsent> {
    Ok(Response::Granted { key: key(), token })
}

/// The wait a request line asks for, in seconds.
fn wait_in(line: &str) -> f64 {
    line.split(' ').nth(2).unwrap().parse().unwrap()
}

fn shared_acquire(wait_ms: u64) -> Request {
    let options = AcquireOptions {
        mode: LockMode::Shared,
        ..AcquireOptions::default()
    };
    Request::Acquire {
        key: key(),
        wait_ms,
        lease_ms: 30_000,
        options,
    }
}

/// Two readers (wait 20 s) then a writer (wait 1 s) of a held key, on one
/// connection: a node answers the writer's `T k` first, which the old
/// client handed to the first reader, and the first reader's shared grant
/// then reached the writer. Kept in the client, the writer times out
/// unsent and every grant reaches its own caller.
async fn readers_then_a_short_writer(node: &mut FakeNode, calls: &mpsc::UnboundedSender<Call>) {
    let reader = send(calls, shared_acquire(20_000));
    assert_eq!(node.next_line().await, "A k 20 30 mode=shared");
    let second_reader = send(calls, shared_acquire(20_000));
    let writer = send(calls, acquire(1_000, 30_000));
    node.hears_nothing().await;
    assert_eq!(outcome_of(writer).await, Err(Unsent));
    node.hears_nothing().await;
    node.reply("A k 1001");
    assert_eq!(outcome_of(reader).await, granted(1001));
    let line = node.next_line().await;
    assert!(line.ends_with(" 30 mode=shared"), "{line}");
    assert!((18.0..19.5).contains(&wait_in(&line)), "{line}");
    node.hears_nothing().await;
    node.reply("A k 1002");
    assert_eq!(outcome_of(second_reader).await, granted(1002));
}

/// A later watch whose tag differs is answered at once by a node; kept in
/// the client, it goes out once the older one is answered.
async fn two_watches_of_one_key(node: &mut FakeNode, calls: &mpsc::UnboundedSender<Call>) {
    let watch = |seen| Request::Watch {
        key: key(),
        wait_ms: 30_000,
        seen,
    };
    let older = send(calls, watch(StateTag::Plain(1002)));
    assert_eq!(node.next_line().await, "W k 30 1002");
    let later = send(calls, watch(StateTag::Free));
    node.hears_nothing().await;
    node.reply("W k token=- lease=- waiters=0 state=-");
    assert!(matches!(
        outcome_of(older).await,
        Ok(Response::Watched { .. })
    ));
    let line = node.next_line().await;
    assert!(line.starts_with("W k ") && line.ends_with(" -"), "{line}");
    node.reply("W k token=1003 lease=30.000 waiters=0 state=1003");
    assert!(matches!(
        outcome_of(later).await,
        Ok(Response::Watched { .. })
    ));
}

/// An acquire's turn of its key lasts until the node answers it, even
/// once its caller gave up: the key stays busy on the connection until
/// then (the grant that comes is released).
async fn a_given_up_acquire_keeps_its_turn_until_answered(
    node: &mut FakeNode,
    calls: &mpsc::UnboundedSender<Call>,
) {
    let turns = Arc::new(Turns::default());
    let line = (
        "node".to_owned(),
        match_key(baton_proto::Op::Acquire, Some(b"k")),
    );
    let (_up, mut others) = watch::channel(0);
    let only = || vec![7];
    let turn = turns.take(&line, only, &mut others, None).await.unwrap();
    let (reply, outcome) = oneshot::channel();
    let reply = connection::Reply::in_turn(reply, Some(turn));
    let req = acquire(20_000, 30_000);
    calls.send(Call { req, reply }).unwrap();
    assert_eq!(node.next_line().await, "A k 20 30");
    drop(outcome);
    let soon = Some(Instant::now() + Duration::from_secs(1));
    let busy = turns.take(&line, only, &mut others, soon).await;
    assert_eq!(busy.unwrap_err(), NoTurn::WaitRanOut);
    node.reply("A k 1005");
    assert_eq!(node.next_line().await, "R k 1005");
    let now = Some(Instant::now());
    assert!(turns.take(&line, only, &mut others, now).await.is_ok());
}

#[tokio::test(start_paused = true)]
async fn answers_of_one_key_on_one_connection_reach_their_own_callers() {
    let (client_end, node_end) = tokio::io::duplex(64 * 1024);
    let mut node = FakeNode::start(node_end);
    let (calls, mut calls_rx) = mpsc::unbounded_channel();
    let (_closing, mut shutdown) = watch::channel(false);
    let background = Arc::new(Background::default());
    let speaks_12 = AtomicBool::new(false);
    let (read, write) = tokio::io::split(client_end);
    let serving = Serving {
        calls: &mut calls_rx,
        shutdown: &mut shutdown,
        background: &background,
        liveness: Liveness::default(),
        speaks_12: &speaks_12,
    };
    let connection = connection::serve(read, write, serving, || {});
    let exchanges = async {
        readers_then_a_short_writer(&mut node, &calls).await;
        two_watches_of_one_key(&mut node, &calls).await;
        a_given_up_acquire_keeps_its_turn_until_answered(&mut node, &calls).await;
    };
    tokio::select! {
        end = connection => panic!("the connection ended: {end:?}"),
        () = exchanges => {}
    }
}
