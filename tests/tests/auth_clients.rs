//! Authentication end to end with the real clients: the Rust client and
//! the `baton` CLI with credentials (right and wrong), and a priority
//! cluster whose every node has its own `--auth-file`.

mod auth_support;

use std::process::Command;
use std::time::Duration;

use auth_support::*;
use baton_client::{Client, Error};
use baton_tests::cluster::Cluster;
use baton_tests::{baton_bin, grant_token, LineClient};

#[tokio::test]
async fn the_rust_client_authenticates_and_maps_the_refusals() {
    let (node, _path, _dir) = node_with_users(&[]);
    let addr = node.addr().to_string();
    let client = Client::builder()
        .servers([addr.clone()])
        .credentials("billing", BILLING_SECRET)
        .build()
        .await
        .expect("build with the right secret");
    let guard = client
        .acquire("billing/1", Duration::from_secs(1), Duration::from_secs(10))
        .await
        .expect("acquire inside the prefix");
    let denied = client
        .acquire("orders/1", Duration::from_secs(1), Duration::from_secs(10))
        .await;
    assert!(
        matches!(&denied, Err(Error::PermissionDenied { key }) if key.as_bytes() == b"orders/1"),
        "{denied:?}"
    );
    guard.release().await.expect("release");
    client.close().await.expect("close");

    let wrong = Client::builder()
        .servers([addr.clone()])
        .credentials("billing", "wrong")
        .build()
        .await;
    assert!(
        matches!(wrong, Err(Error::AuthenticationFailed)),
        "{:?}",
        wrong.err()
    );

    // Without credentials every connection is refused service: connecting
    // says so, as it does for wrong credentials.
    let none = Client::builder().servers([addr]).build().await;
    assert!(
        matches!(none, Err(Error::AuthenticationRequired)),
        "{:?}",
        none.err()
    );
}

#[tokio::test]
async fn credentials_for_a_node_without_users_fail_clearly() {
    let node = baton_tests::Batond::start(&[]);
    let built = Client::builder()
        .servers([node.addr().to_string()])
        .credentials("billing", BILLING_SECRET)
        .build()
        .await;
    assert!(
        matches!(built, Err(Error::AuthenticationNotEnabled)),
        "{:?}",
        built.err()
    );
}

/// Polls `S` on every connection until `done` finds what it wants.
async fn poll<T>(conns: &mut [LineClient], done: impl Fn(&[String]) -> Option<T>) -> T {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let mut lines = Vec::new();
        for c in conns.iter_mut() {
            lines.push(c.request("S").await);
        }
        if let Some(found) = done(&lines) {
            return found;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never settled: {lines:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn baton(node: &baton_tests::Batond, args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let out = Command::new(baton_bin())
        .arg("--servers")
        .arg(node.addr().to_string())
        .args(args)
        .env_remove("BATON_SECRET")
        .env_remove("BATON_USER")
        .envs(env.iter().copied())
        .output()
        .expect("run baton");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn the_cli_takes_the_secret_from_the_environment_or_a_file() {
    let (node, _path, dir) = node_with_users(&[]);
    let env = [("BATON_SECRET", BILLING_SECRET)];
    let (code, token, err) = baton(
        &node,
        &[
            "--user",
            "billing",
            "acquire",
            "billing/cli",
            "--lease",
            "30",
        ],
        &env,
    );
    assert_eq!(code, 0, "{err}");
    let secret_file = dir.path().join("secret");
    std::fs::write(&secret_file, format!("{BILLING_SECRET}\n")).expect("write");
    let file = secret_file.to_str().expect("UTF-8");
    let (code, _, err) = baton(
        &node,
        &[
            "--user",
            "billing",
            "--secret-file",
            file,
            "release",
            "billing/cli",
            token.trim(),
        ],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    let user_env = [("BATON_USER", "billing"), ("BATON_SECRET", BILLING_SECRET)];
    let (code, _, err) = baton(&node, &["acquire", "orders/1"], &user_env);
    assert_eq!(
        (code, err.trim()),
        (9, "baton: permission denied on orders/1")
    );
    let (code, _, err) = baton(
        &node,
        &["--user", "billing", "acquire", "billing/2"],
        &[("BATON_SECRET", "wrong")],
    );
    assert_eq!(code, 8, "{err}");
    assert_eq!(
        err.lines().filter(|l| l.starts_with("baton: ")).count(),
        1,
        "{err}"
    );
    assert!(err.contains("authentication failed"), "{err}");
    let (code, _, err) = baton(&node, &["acquire", "billing/2"], &[]);
    assert_eq!(code, 8, "{err}");
    assert!(err.contains("requires authentication"), "{err}");
    let (code, _, err) = baton(&node, &["--user", "billing", "acquire", "billing/2"], &[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("BATON_SECRET"), "{err}");
}

#[tokio::test]
async fn a_priority_cluster_authenticates_on_every_node() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cluster = Cluster::start_each(2, |i| {
        let path = dir.path().join(format!("users-{i}.toml"));
        write_users(&path, &users_toml());
        vec!["--auth-file".into(), path.to_str().expect("UTF-8").into()]
    });
    // The kit's status polling does not authenticate: poll as ops.
    let mut watch = Vec::new();
    for i in 0..2 {
        let mut c = LineClient::connect(cluster.addr(i)).await;
        assert_eq!(c.request(&format!("U ops {OPS_SECRET}")).await, "U ops");
        watch.push(c);
    }
    let active = poll(&mut watch, |roles| {
        roles
            .iter()
            .position(|r| r.contains("role=active") && !r.contains("active=-"))
    })
    .await;
    let standby = 1 - active;
    // The standby redirects an authenticated client, refuses the others.
    let mut anon = LineClient::connect(cluster.addr(standby)).await;
    assert_eq!(
        anon.request("A billing/1 0 10").await,
        "E A billing/1 authentication required"
    );
    let mut c = LineClient::connect(cluster.addr(standby)).await;
    assert_eq!(
        c.request(&format!("U billing {BILLING_SECRET}")).await,
        "U billing"
    );
    assert_eq!(
        c.request("A billing/1 0 10").await,
        format!("M A billing/1 {}", cluster.addr(active))
    );
    assert_eq!(
        c.request("A orders/1 0 10").await,
        "E A orders/1 permission denied"
    );
    // Peer links are unaffected: the standby follows the active's grants.
    let mut on_active = LineClient::connect(cluster.addr(active)).await;
    assert_eq!(
        on_active.request(&format!("U ops {OPS_SECRET}")).await,
        "U ops"
    );
    grant_token(&on_active.request("A orders/9 0 30").await, "orders/9");
    poll(&mut watch, |s| s[standby].contains("locks=1").then_some(())).await;
    // The Rust client, pointed at the standby first, is redirected and served.
    let servers: Vec<String> = [standby, active]
        .iter()
        .map(|&i| cluster.addr(i).to_string())
        .collect();
    let client = Client::builder()
        .servers(servers)
        .credentials("billing", BILLING_SECRET)
        .build()
        .await
        .expect("build");
    let guard = client
        .acquire("billing/7", Duration::from_secs(2), Duration::from_secs(10))
        .await
        .expect("served through the redirect");
    guard.release().await.expect("release");
    client.close().await.expect("close");
}
