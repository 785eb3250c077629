//! A busy, slow peer link is not a dead active: a standby whose active's
//! frames cross slowly (a large table piece trickling in, and the
//! heartbeats queued behind it on the same connection) keeps following it
//! while bytes come, and never serves beside it.
//!
//! Node 0 serves a few hundred kilobytes of locks; node 1 starts behind a
//! proxy that forwards node 0's link at a trickle, so its first snapshot
//! takes seconds to arrive, far more than a failure timeout without a
//! whole frame.

mod priority_support;

use std::net::SocketAddr;
use std::time::Duration;

use baton_tests::cluster::{field, probe_status};
use baton_tests::{free_addr, grant_token, Batond, LineClient};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

use priority_support::{SERIAL, SETTLE};

/// Bytes the trickle proxy lets through per step, and the step.
const TRICKLE_BYTES: usize = 2 * 1024;
const TRICKLE_STEP: Duration = Duration::from_millis(20);
/// Locks node 0 holds (keys near the longest): about 500 KB of table,
/// some five seconds at the trickle's 100 KB/s.
const LOCKS: usize = 2_000;
/// How long node 1 is watched while the table trickles in.
const WATCH: Duration = Duration::from_secs(3);

/// Forwards every connection to `upstream`, the client's bytes at most
/// `TRICKLE_BYTES` per `TRICKLE_STEP`, the answers at once. Ends with the
/// test's runtime.
async fn trickle_proxy(upstream: SocketAddr) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("proxy address");
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            tokio::spawn(async move {
                let Ok(server) = TcpStream::connect(upstream).await else {
                    return;
                };
                let (mut client_read, mut client_write) = client.into_split();
                let (mut server_read, mut server_write) = server.into_split();
                let slow = async {
                    let mut buf = vec![0u8; TRICKLE_BYTES];
                    loop {
                        let n = match client_read.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => n,
                        };
                        if server_write.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                        tokio::time::sleep(TRICKLE_STEP).await;
                    }
                };
                let back = tokio::io::copy(&mut server_read, &mut client_write);
                tokio::select! {
                    () = slow => {}
                    _ = back => {}
                }
            });
        }
    });
    addr
}

fn is_active(status: Option<baton_tests::Status>) -> bool {
    status.is_some_and(|s| field(&s, "role") == "active")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_keeps_following_an_active_whose_frames_trickle_in() {
    let _serial = SERIAL.lock().await;
    let real = [free_addr(), free_addr()];
    assert_ne!(real[0], real[1]);
    let proxy = trickle_proxy(real[1]).await;
    // Node 0 is dialled directly; node 1 only through the trickle.
    let peers = format!("{},{}", real[0], proxy);
    let start = |i: usize, advertise: String| {
        Batond::start_at(
            real[i],
            &[
                "--peers",
                &peers,
                "--mode",
                "priority",
                "--advertise",
                &advertise,
            ],
        )
    };
    let _n0 = start(0, real[0].to_string());
    let settled = Instant::now() + SETTLE;
    while !is_active(probe_status(real[0], Duration::from_secs(1)).await) {
        assert!(Instant::now() < settled, "node 0 did not serve alone");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut c0 = LineClient::connect(real[0]).await;
    let pad = "k".repeat(230);
    for i in 0..LOCKS {
        let key = format!("{pad}{i:05}");
        grant_token(&c0.request(&format!("A {key} 0 600")).await, &key);
    }
    let _n1 = start(1, proxy.to_string());
    // Node 1 hears node 0, follows it and asks for its table, which then
    // trickles in for seconds, ahead of every heartbeat.
    let watched_until = Instant::now() + SETTLE;
    let mut started_watching = None;
    loop {
        let status = probe_status(real[1], Duration::from_secs(1)).await;
        let role = status.as_ref().map(|s| field(s, "role").to_owned());
        assert_ne!(
            role.as_deref(),
            Some("active"),
            "node 1 took a live active behind a slow link for a dead one"
        );
        if role.as_deref() == Some("standby") {
            let since = *started_watching.get_or_insert_with(Instant::now);
            if since.elapsed() >= WATCH {
                break;
            }
        }
        assert!(Instant::now() < watched_until, "node 1 never stood by");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(is_active(
        probe_status(real[0], Duration::from_secs(1)).await
    ));
}
