//! Host names instead of IP addresses, black-box with real processes on
//! loopback: `batond --listen localhost:PORT`, priority and Raft clusters
//! whose `--peers` are `localhost:PORT` names (dialled, and so resolved, at
//! every connection), a peer whose name does not resolve yet (start-up goes
//! on), bad `host:port` syntax (a clear start-up error), and the client
//! crate and CLI given `localhost:PORT`, redialling after a restart.

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use baton_client::Client;
use baton_tests::cluster::{field, probe_status};
use baton_tests::{baton_bin, batond_bin, distinct_free_addrs, free_addr, grant_token, Batond};

fn named(addr: SocketAddr) -> String {
    format!("localhost:{}", addr.port())
}

/// Starts one node per address, each listening on its `localhost` name,
/// with `--peers` naming them all.
fn start_named(addrs: &[SocketAddr], mode: &str, extra: &[&str]) -> Vec<Batond> {
    let names: Vec<String> = addrs.iter().map(|a| named(*a)).collect();
    let list = names.join(",");
    names
        .iter()
        .map(|name| {
            let mut args = vec![
                "--listen",
                name.as_str(),
                "--peers",
                list.as_str(),
                "--mode",
                mode,
            ];
            args.extend_from_slice(extra);
            Batond::start(&args)
        })
        .collect()
}

/// Polls every node's `S` until all up nodes name one serving node (by its
/// `localhost` name) in `active=` and it reports `role`; returns its index.
async fn wait_serving(nodes: &[Batond], names: &[String], role: &str) -> usize {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut statuses = Vec::new();
        for node in nodes {
            statuses.push(probe_status(node.addr(), Duration::from_secs(2)).await);
        }
        let serving = statuses
            .iter()
            .position(|s| s.as_ref().is_some_and(|s| field(s, "role") == role));
        if let Some(i) = serving {
            let agreed = statuses
                .iter()
                .all(|s| s.as_ref().is_some_and(|s| field(s, "active") == names[i]));
            if agreed {
                return i;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no agreed {role} by name: {statuses:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_single_node_listens_on_a_name_and_is_known_by_it() {
    let addr = free_addr();
    let node = Batond::start(&["--listen", &named(addr)]);
    assert!(node.addr().ip().is_loopback(), "{}", node.addr());
    assert_eq!(node.addr().port(), addr.port());
    let mut client = node.connect().await;
    let status = client.status().await;
    assert_eq!(field(&status, "self"), named(addr), "{status:?}");
    let token = grant_token(&client.request("A named 1 10").await, "named");
    assert_eq!(client.request(&format!("R named {token}")).await, "R named");
}

#[tokio::test]
async fn a_priority_cluster_runs_on_localhost_names() {
    let _one_cluster_at_a_time = baton_tests::raft::SERIAL.lock().await;
    let addrs = distinct_free_addrs(3);
    let names: Vec<String> = addrs.iter().map(|a| named(*a)).collect();
    let mut nodes = start_named(&addrs, "priority", &[]);
    let active = wait_serving(&nodes, &names, "active").await;
    let mut client = nodes[active].connect().await;
    let token = grant_token(&client.request("A prio 1 30").await, "prio");
    // The active goes; a standby found by name takes over with the lock.
    nodes[active].terminate();
    // Its log names the successor and its own roles by address.
    let log = nodes[active].log_tail(400);
    assert!(log.contains("handed over successor=\"localhost:"), "{log}");
    assert!(log.contains("-> handing off to localhost:"), "{log}");
    let rest: Vec<Batond> = nodes
        .drain(..)
        .enumerate()
        .filter(|(i, _)| *i != active)
        .map(|(_, n)| n)
        .collect();
    let rest_names: Vec<String> = names
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != active)
        .map(|(_, n)| n.clone())
        .collect();
    let next = wait_serving(&rest, &rest_names, "active").await;
    let mut client = rest[next].connect().await;
    let answer = client.request(&format!("R prio {token}")).await;
    assert_eq!(answer, "R prio", "the lock moved with the handoff");
}

#[tokio::test]
async fn a_raft_cluster_runs_on_localhost_names() {
    let _one_cluster_at_a_time = baton_tests::raft::SERIAL.lock().await;
    let addrs = distinct_free_addrs(3);
    let names: Vec<String> = addrs.iter().map(|a| named(*a)).collect();
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().expect("dir")).collect();
    let list = names.join(",");
    let nodes: Vec<Batond> = names
        .iter()
        .zip(&dirs)
        .map(|(name, dir)| {
            let data = dir.path().to_str().expect("utf-8").to_string();
            Batond::start(&[
                "--listen",
                name,
                "--peers",
                &list,
                "--mode",
                "raft",
                "--data-dir",
                &data,
            ])
        })
        .collect();
    let leader = wait_serving(&nodes, &names, "leader").await;
    let mut client = nodes[leader].connect().await;
    let token = grant_token(&client.request("A raft-named 1 30").await, "raft-named");
    assert_eq!(
        client.request(&format!("R raft-named {token}")).await,
        "R raft-named"
    );
    // The leader's log names its followers by their names.
    let log = nodes[leader].log_tail(400);
    assert!(
        !log.contains("peer=1 ") && !log.contains("peer=2 "),
        "{log}"
    );
}

#[tokio::test]
async fn a_peer_whose_name_does_not_resolve_yet_does_not_stop_start_up() {
    let addr = free_addr();
    let peers = format!("{},not-yet-there.invalid:7411", named(addr));
    let node = Batond::start(&[
        "--listen",
        &named(addr),
        "--peers",
        &peers,
        "--mode",
        "priority",
    ]);
    let status = probe_status(node.addr(), Duration::from_secs(5))
        .await
        .expect("status");
    assert_eq!(field(&status, "self"), named(addr), "{status:?}");
}

#[test]
fn bad_host_port_syntax_is_a_one_line_start_up_error() {
    for (flag, value) in [
        ("--listen", "localhost"),
        ("--peers", "localhost:1,nohost"),
        ("--advertise", "a b:1"),
        ("--http-listen", "localhost:99999"),
    ] {
        let out = Command::new(batond_bin())
            .args([flag, value])
            .stdin(Stdio::null())
            .output()
            .expect("run batond");
        assert_eq!(out.status.code(), Some(2), "{flag} {value}: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("expected host:port"),
            "{flag} {value}: {stderr}"
        );
        assert!(out.stdout.is_empty(), "{flag} {value}: started");
    }
}

#[tokio::test]
async fn the_client_and_the_cli_take_names_and_redial_them() {
    let addr = free_addr();
    let mut node = Batond::start(&["--listen", &named(addr)]);
    let client = Client::builder()
        .servers([named(addr)])
        .build()
        .await
        .expect("client on localhost");
    let guard = client
        .acquire(
            "client-named",
            Duration::from_secs(1),
            Duration::from_secs(10),
        )
        .await
        .expect("acquire");
    guard.release().await.expect("release");
    // Broken and redialled by name.
    node.restart();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let again = client
            .acquire(
                "client-named",
                Duration::from_secs(1),
                Duration::from_secs(10),
            )
            .await;
        if let Ok(guard) = again {
            guard.release().await.expect("release after the redial");
            break;
        }
        assert!(Instant::now() < deadline, "no redial by name: {again:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    client.close().await.expect("close");
    let out = Command::new(baton_bin())
        .args(["--servers", &named(addr), "status"])
        .stdin(Stdio::null())
        .output()
        .expect("run baton");
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&named(addr)),
        "{out:?}"
    );
}
