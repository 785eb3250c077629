//! The driver against the in-process echo server and against fake servers
//! that misbehave: figures come out for a working server, and every kind of
//! broken server ends the run with the matching error, in bounded time.

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use baton_bench::{echo, scenario::run_once, BenchError, Case, Scenario, Target, Timing};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

const SHORT: Timing = Timing {
    warmup: Duration::from_millis(50),
    duration: Duration::from_millis(250),
    drain: Duration::from_millis(500),
};

async fn echo_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(echo::serve(listener));
    addr
}

/// A server answering every request line with `reply(line)`, or nothing
/// when it returns `None`, and closing after `close_after` lines.
async fn fake_server(reply: fn(&str) -> Option<String>, close_after: usize) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (read, mut write) = stream.into_split();
                let mut lines = BufReader::new(read).lines();
                let mut seen = 0;
                while let Ok(Some(line)) = lines.next_line().await {
                    seen += 1;
                    if seen > close_after {
                        return;
                    }
                    if let Some(answer) = reply(&line) {
                        write.write_all(answer.as_bytes()).await.unwrap();
                    }
                }
            });
        }
    });
    addr
}

fn case(scenario: Scenario, clients: usize, depth: usize) -> Case {
    Case {
        scenario,
        clients,
        depth,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uncontended_and_pipelined_measure_rate_and_latency() {
    let addr = echo_server().await;
    for case in [
        case(Scenario::Uncontended, 1, 1),
        case(Scenario::Uncontended, 4, 1),
        case(Scenario::Pipelined, 2, 8),
    ] {
        let m = run_once(addr, Target::Echo, case, SHORT).await.unwrap();
        assert!(m.rate > 100.0, "{case:?}: {m:?}");
        let (p50, p99) = (m.p50.unwrap(), m.p99.unwrap());
        assert!(
            p50 <= p99 && p99 < Duration::from_secs(1),
            "{case:?}: {m:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contended_on_echo_counts_cycles_but_times_no_handoff() {
    let addr = echo_server().await;
    let m = run_once(addr, Target::Echo, case(Scenario::Contended, 4, 1), SHORT)
        .await
        .unwrap();
    assert!(m.rate > 100.0, "{m:?}");
    assert_eq!((m.p50, m.p99), (None, None));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contended_catches_a_server_that_grants_everyone() {
    // The echo server grants every acquire at once with per-connection
    // tokens: held to lock semantics, that is a violation.
    let addr = echo_server().await;
    let err = run_once(addr, Target::Baton, case(Scenario::Contended, 2, 1), SHORT)
        .await
        .unwrap_err();
    assert!(matches!(err, BenchError::Violation(_)), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uncontended_catches_tokens_that_do_not_rise() {
    fn same_token(line: &str) -> Option<String> {
        let mut fields = line.split(' ');
        match (fields.next(), fields.next()) {
            (Some("A"), Some(key)) => Some(format!("A {key} 7\n")),
            (Some("R"), Some(key)) => Some(format!("R {key}\n")),
            _ => None,
        }
    }
    let addr = fake_server(same_token, usize::MAX).await;
    let err = run_once(
        addr,
        Target::Baton,
        case(Scenario::Uncontended, 1, 1),
        SHORT,
    )
    .await
    .unwrap_err();
    assert!(matches!(err, BenchError::Violation(_)), "{err}");
}

#[tokio::test]
async fn an_error_response_is_a_protocol_error() {
    let addr = fake_server(|_| Some("E ? ? unknown op\n".into()), usize::MAX).await;
    for scenario in [
        Scenario::Uncontended,
        Scenario::Contended,
        Scenario::Pipelined,
    ] {
        let err = run_once(addr, Target::Baton, case(scenario, 1, 2), SHORT)
            .await
            .unwrap_err();
        assert!(
            matches!(err, BenchError::Protocol { ref line, .. } if line == "E ? ? unknown op"),
            "{scenario:?}: {err}"
        );
    }
}

#[tokio::test]
async fn a_release_refused_is_a_protocol_error() {
    fn refuse_release(line: &str) -> Option<String> {
        let key = line.split(' ').nth(1)?;
        Some(match line.as_bytes()[0] {
            b'A' => format!("A {key} 1\n"),
            _ => format!("N R {key}\n"),
        })
    }
    let addr = fake_server(refuse_release, usize::MAX).await;
    let err = run_once(
        addr,
        Target::Baton,
        case(Scenario::Uncontended, 1, 1),
        SHORT,
    )
    .await
    .unwrap_err();
    assert!(matches!(err, BenchError::Protocol { .. }), "{err}");
}

#[tokio::test]
async fn a_silent_server_ends_the_run_after_the_drain() {
    let addr = fake_server(|_| None, usize::MAX).await;
    let started = Instant::now();
    let err = run_once(addr, Target::Baton, case(Scenario::Contended, 3, 1), SHORT)
        .await
        .unwrap_err();
    assert!(matches!(err, BenchError::Drain(_)), "{err}");
    let bound = SHORT.warmup + SHORT.duration + SHORT.drain + Duration::from_secs(2);
    assert!(started.elapsed() < bound, "{:?}", started.elapsed());
}

#[tokio::test]
async fn a_closed_connection_is_an_error() {
    fn grant(line: &str) -> Option<String> {
        Some(format!("A {} 1\n", line.split(' ').nth(1)?))
    }
    let addr = fake_server(grant, 1).await;
    let err = run_once(
        addr,
        Target::Baton,
        case(Scenario::Uncontended, 1, 1),
        SHORT,
    )
    .await
    .unwrap_err();
    assert!(matches!(err, BenchError::Closed { .. }), "{err}");
}

#[tokio::test]
async fn refuses_to_connect_beyond_loopback() {
    let addr: SocketAddr = "192.0.2.1:7411".parse().unwrap();
    let err = run_once(
        addr,
        Target::Baton,
        case(Scenario::Uncontended, 1, 1),
        SHORT,
    )
    .await
    .unwrap_err();
    assert!(matches!(err, BenchError::NotLoopback(_)), "{err}");
}

/// A fake Redis: SCRIPT LOAD answers a SHA, the n-th SET of a connection
/// answers `set(n)`, EVALSHA `:1`.
async fn fake_redis(set: fn(usize) -> &'static str) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (read, mut write) = stream.into_split();
                let mut lines = BufReader::new(read).lines();
                let mut sets = 0;
                // Each command is `*N` then N pairs of `$len` and the argument.
                while let Ok(Some(header)) = lines.next_line().await {
                    let count: usize = header.trim_start_matches('*').parse().unwrap();
                    let mut args = Vec::new();
                    for _ in 0..count {
                        lines.next_line().await.unwrap();
                        args.push(lines.next_line().await.unwrap().unwrap());
                    }
                    let answer = match args[0].as_str() {
                        "SCRIPT" => "$40\r\n0123456789012345678901234567890123456789\r\n",
                        "SET" => {
                            sets += 1;
                            set(sets)
                        }
                        "EVALSHA" => ":1\r\n",
                        _ => "-ERR unknown\r\n",
                    };
                    if write.write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_loops_measure_every_load_scenario() {
    let addr = fake_redis(|_| "+OK\r\n").await;
    for case in [
        case(Scenario::Uncontended, 2, 1),
        case(Scenario::Pipelined, 2, 8),
        case(Scenario::Contended, 1, 1),
    ] {
        let m = run_once(addr, Target::Redis, case, SHORT).await.unwrap();
        assert!(m.rate > 100.0, "{case:?}: {m:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_contended_retries_a_taken_key() {
    // Two of every three SETs find the key taken: the client spins on.
    let addr = fake_redis(|n| if n % 3 == 0 { "+OK\r\n" } else { "$-1\r\n" }).await;
    let m = run_once(addr, Target::Redis, case(Scenario::Contended, 1, 1), SHORT)
        .await
        .unwrap();
    assert!(m.rate > 100.0, "{m:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_own_key_refused_is_a_protocol_error() {
    let addr = fake_redis(|_| "$-1\r\n").await;
    let err = run_once(
        addr,
        Target::Redis,
        case(Scenario::Uncontended, 1, 1),
        SHORT,
    )
    .await
    .unwrap_err();
    assert!(matches!(err, BenchError::Protocol { .. }), "{err}");
}
