//! Protocol 1.2's scenarios (semaphore, shared, watch-fanout): short runs
//! against a real `batond` in each mode, and the servers they must refuse
//! to measure: one granting beyond the permits, one answering a watch
//! before the change, one never answering it.

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test

use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use baton_bench::{echo, scenario::run_once, BenchError, Case, Scenario, Target, Timing};
use baton_tests::binary::batond_bin;
use baton_tests::daemon::Batond;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

const SHORT: Timing = Timing {
    warmup: Duration::from_millis(50),
    duration: Duration::from_millis(300),
    drain: Duration::from_secs(10),
};

fn case(scenario: Scenario, clients: usize, depth: usize) -> Case {
    Case {
        scenario,
        clients,
        depth,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_and_shared_cycle_on_a_real_batond() {
    let node = Batond::start(&[]);
    for case in [
        case(Scenario::Semaphore, 4, 2),
        case(Scenario::Semaphore, 3, 1),
        case(Scenario::Shared, 4, 0),
        case(Scenario::Shared, 4, 25),
    ] {
        let m = run_once(node.addr(), Target::Baton, case, SHORT)
            .await
            .unwrap();
        assert!(m.rate > 0.0, "{case:?}: {m:?}");
        let (p50, p99) = (m.p50.unwrap(), m.p99.unwrap());
        assert!(
            p50 <= p99 && p99 < Duration::from_secs(10),
            "{case:?}: {m:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_watcher_of_a_real_batond_is_answered() {
    // 1,100 watchers: three connections under the node's cap of 1,000.
    let node = Batond::start(&[]);
    let started = Instant::now();
    let m = run_once(
        node.addr(),
        Target::Baton,
        case(Scenario::WatchFanout, 1100, 1),
        SHORT,
    )
    .await
    .unwrap();
    let took = Duration::from_secs_f64(m.rate / 1000.0);
    assert!(took > Duration::ZERO && took < started.elapsed(), "{m:?}");
    let (p50, p99) = (m.p50.unwrap(), m.p99.unwrap());
    // Within the histogram's 1% of the latest answer.
    assert!(
        p50 <= p99 && p99.as_secs_f64() <= took.as_secs_f64() * 1.01,
        "{m:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_granting_beyond_the_permits_fails_the_run() {
    // The echo server grants every acquire at once, with tokens counted
    // per connection: held to a semaphore of 2, a violation.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(echo::serve(listener));
    for scenario in [Scenario::Semaphore, Scenario::Shared] {
        let err = run_once(addr, Target::Baton, case(scenario, 4, 2), SHORT)
            .await
            .unwrap_err();
        assert!(
            matches!(err, BenchError::Violation(_)),
            "{scenario:?}: {err}"
        );
    }
}

/// When a fake node answers a watch.
#[derive(Clone, Copy)]
enum Answers {
    Never,
    AtOnce,
    /// After an acquire on any connection, as a real node would.
    AfterTheChange,
}

/// A node that answers `Q` and acquires (token 77), and each `W` with the
/// state `5` when `answers` says.
async fn watch_server(answers: Answers) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (changed, change) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (changed, mut change) = (changed.clone(), change.clone());
            tokio::spawn(async move {
                let (read, mut write) = stream.into_split();
                let mut lines = BufReader::new(read).lines();
                let mut held = String::new();
                loop {
                    let line = tokio::select! {
                        line = lines.next_line() => match line {
                            Ok(Some(line)) => line,
                            _ => return,
                        },
                        _ = change.changed() => {
                            write.write_all(held.as_bytes()).await.unwrap();
                            held.clear();
                            continue;
                        }
                    };
                    let fields: Vec<&str> = line.split(' ').collect();
                    let key = fields[1];
                    let stale = format!("W {key} token=5 lease=1.000 waiters=0 state=5\n");
                    let answer = match (fields[0], answers) {
                        ("Q", _) => format!("Q {key} token=- lease=- waiters=0\n"),
                        ("A", _) => {
                            let _ = changed.send(true);
                            format!("A {key} 77\n")
                        }
                        ("W", Answers::AtOnce) => stale,
                        ("W", Answers::AfterTheChange) => {
                            held.push_str(&stale);
                            continue;
                        }
                        _ => continue,
                    };
                    write.write_all(answer.as_bytes()).await.unwrap();
                }
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_never_answered_fails_the_run_after_the_drain() {
    let addr = watch_server(Answers::Never).await;
    let timing = Timing {
        drain: Duration::from_millis(300),
        ..SHORT
    };
    let started = Instant::now();
    let err = run_once(
        addr,
        Target::Baton,
        case(Scenario::WatchFanout, 10, 1),
        timing,
    )
    .await
    .unwrap_err();
    assert!(matches!(err, BenchError::Drain(_)), "{err}");
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// What a fan-out of 10 watchers against a fake node with `answers` ends in.
async fn fanout_error(answers: Answers) -> BenchError {
    let addr = watch_server(answers).await;
    let case = case(Scenario::WatchFanout, 10, 1);
    run_once(addr, Target::Baton, case, SHORT)
        .await
        .unwrap_err()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_answered_before_the_change_fails_the_run() {
    let err = fanout_error(Answers::AtOnce).await;
    assert!(err.to_string().contains("before the key changed"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_answered_with_another_state_fails_the_run() {
    // Answered only after the change, but not with the change's token.
    let err = fanout_error(Answers::AfterTheChange).await;
    assert!(err.to_string().contains("another state"), "{err}");
}

/// The binary in every Baton mode, as run.sh runs it: semaphore, shared
/// and the fan-out each give a row for the single node, the priority
/// cluster and the Raft cluster.
#[test]
fn every_mode_runs_the_protocol_1_2_scenarios() {
    let batond = batond_bin();
    let out = Command::new(env!("CARGO_BIN_EXE_baton-bench"))
        .args([
            "--target",
            "baton,baton-priority,baton-raft",
            "--spawn",
            batond.to_str().unwrap(),
            "--scenario",
            "semaphore,shared,watch-fanout",
            "--contended-clients",
            "4",
            "--permits",
            "2",
            "--exclusive-percent",
            "10",
            "--watchers",
            "600",
            "--warmup",
            "0",
            "--duration",
            "0.3",
            "--runs",
            "1",
            "--floor",
            "off",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    for target in ["baton", "baton-priority", "baton-raft"] {
        for (scenario, clients, depth) in [
            ("semaphore", "4", "2"),
            ("shared", "4", "10"),
            ("watch-fanout", "600", "1"),
        ] {
            let found = stdout.lines().any(|row| {
                let fields: Vec<&str> = row.split_whitespace().collect();
                fields.len() > 4
                    && fields[..4] == [target, scenario, clients, depth]
                    && fields[4].parse::<f64>().is_ok_and(|value| value > 0.0)
            });
            assert!(found, "{target} {scenario} missing:\n{stdout}");
        }
    }
}

/// etcd's side of the fan-out for real, where etcd is installed (run.sh
/// installs it; CI's smoke does not need it).
#[cfg(feature = "etcd")]
#[test]
fn etcd_watchers_of_one_key_each_get_the_put() {
    let installed = Command::new("etcd").arg("--version").output();
    if !installed.is_ok_and(|out| out.status.success()) {
        eprintln!("etcd is not installed: nothing to check");
        return;
    }
    let out = Command::new(env!("CARGO_BIN_EXE_baton-bench"))
        .args([
            "--target",
            "etcd",
            "--scenario",
            "watch-fanout",
            "--watchers",
            "1100",
            "--runs",
            "1",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let row = stdout.lines().find(|l| l.starts_with("etcd ")).unwrap();
    let fields: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(fields[..4], ["etcd", "watch-fanout", "1100", "1"], "{row}");
    assert!(fields[4].parse::<f64>().unwrap() > 0.0, "{row}");
}
