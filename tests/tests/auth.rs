//! Client authentication and key-prefix permissions (`--auth-file`,
//! docs/protocol.md 1.1), black-box against real `batond` processes: every
//! request is gated until `U` succeeds, keys outside a user's prefixes are
//! refused and nothing changes (the token-guessing attack, pipelining
//! `R <key> <t>` for many `t`, fails), SIGHUP reloads the users, bad files are refused at start, and
//! clusters authenticate on whichever node the client talks to.

mod auth_support;

use std::time::{Duration, Instant};

use auth_support::*;
use baton_tests::refused::start_refused;
use baton_tests::{grant_token, status_u64, Batond};

#[tokio::test]
async fn every_request_needs_authentication_first_and_changes_nothing() {
    let (node, _path, _dir) = node_with_users(&[]);
    let mut c = node.connect().await;
    assert_eq!(c.request("S").await, "E S ? authentication required");
    assert_eq!(
        c.request("A billing/1 0 10").await,
        "E A billing/1 authentication required"
    );
    assert_eq!(
        c.request("R billing/1 5").await,
        "E R billing/1 authentication required"
    );
    assert_eq!(
        c.request("K billing/1 5 10").await,
        "E K billing/1 authentication required"
    );
    assert_eq!(
        c.request("Q billing/1").await,
        "E Q billing/1 authentication required"
    );
    // Malformed requests are still answered as malformed.
    assert_eq!(
        c.request("A billing/1 0 0").await,
        "E A billing/1 lease must be greater than 0"
    );
    assert_eq!(c.request("U billing").await, "E U billing missing secret");
    // Pipelined: each answered, in order.
    c.send_raw(b"A k 0 1\nS\nR k 1\n").await;
    assert_eq!(c.recv().await, "E A k authentication required");
    assert_eq!(c.recv().await, "E S ? authentication required");
    assert_eq!(c.recv().await, "E R k authentication required");
    let mut admin = login(&node, "ops", OPS_SECRET).await;
    let s = admin.status().await;
    assert_eq!(
        status_u64(&s, "locks"),
        0,
        "refused acquires granted nothing"
    );
    assert_eq!(status_u64(&s, "waiters"), 0);
}

#[tokio::test]
async fn wrong_secrets_and_unknown_users_fail_alike_and_leave_the_connection_unauthenticated() {
    let (node, _path, _dir) = node_with_users(&[]);
    let mut c = node.connect().await;
    let started = Instant::now();
    assert_eq!(
        c.request("U billing wrong").await,
        "E U billing authentication failed"
    );
    assert!(
        started.elapsed() >= Duration::from_millis(200),
        "a failed U is answered after a delay"
    );
    assert_eq!(
        c.request("U nobody s3cr3t-value").await,
        "E U nobody authentication failed"
    );
    assert_eq!(
        c.request("A billing/1 0 10").await,
        "E A billing/1 authentication required"
    );
    // The secret_sha256 user and the plain one.
    assert_eq!(c.request(&format!("U ops {OPS_SECRET}")).await, "U ops");
    assert_eq!(
        c.request(&format!("U billing {BILLING_SECRET}")).await,
        "U billing"
    );
    grant_token(&c.request("A billing/1 0 10").await, "billing/1");
    // A failed U drops the identity the connection had.
    assert_eq!(
        c.request(&format!("U billing {OPS_SECRET}")).await,
        "E U billing authentication failed"
    );
    assert_eq!(c.request("S").await, "E S ? authentication required");
    // A pipelined request behind a failed U waits for it, then is served.
    c.send_raw(format!("U ops nope\nU ops {OPS_SECRET}\nA orders/7 0 10\n").as_bytes())
        .await;
    assert_eq!(c.recv().await, "E U ops authentication failed");
    assert_eq!(c.recv().await, "U ops");
    grant_token(&c.recv().await, "orders/7");
}

#[tokio::test]
async fn a_held_connection_does_not_hold_up_others() {
    let (node, _path, _dir) = node_with_users(&[]);
    let mut guesser = node.connect().await;
    let mut lines = String::new();
    for i in 0..5 {
        lines.push_str(&format!("U billing guess{i}\n"));
    }
    guesser.send_raw(lines.as_bytes()).await;
    let started = Instant::now();
    let mut other = login(&node, "billing", BILLING_SECRET).await;
    grant_token(&other.request("A billing/x 0 10").await, "billing/x");
    assert!(
        started.elapsed() < Duration::from_millis(200),
        "{:?}",
        started.elapsed()
    );
    for _ in 0..5 {
        assert_eq!(guesser.recv().await, "E U billing authentication failed");
    }
}

#[tokio::test]
async fn keys_outside_the_prefixes_are_refused_and_admin_has_every_key() {
    let (node, _path, _dir) = node_with_users(&[]);
    let mut billing = login(&node, "billing", BILLING_SECRET).await;
    let mut ops = login(&node, "ops", OPS_SECRET).await;
    let theirs = grant_token(&ops.request("A orders/42 0 30").await, "orders/42");
    assert_eq!(
        billing.request("A orders/42 0 30").await,
        "E A orders/42 permission denied"
    );
    assert_eq!(
        billing.request(&format!("R orders/42 {theirs}")).await,
        "E R orders/42 permission denied"
    );
    assert_eq!(
        billing.request(&format!("K orders/42 {theirs} 60")).await,
        "E K orders/42 permission denied"
    );
    // Q would show the stranger's token: refused too.
    assert_eq!(
        billing.request("Q orders/42").await,
        "E Q orders/42 permission denied"
    );
    assert!(ops
        .request("Q orders/42")
        .await
        .starts_with(&format!("Q orders/42 token={theirs} ")));
    assert_eq!(
        billing.request("A billing 0 30").await,
        "E A billing permission denied"
    );
    assert_eq!(
        billing.request("A jobs/billing 0 30").await,
        "E A jobs/billing permission denied"
    );
    let mine = grant_token(&billing.request("A billing/42 0 30").await, "billing/42");
    grant_token(
        &billing.request("A jobs/billing-nightly 0 30").await,
        "jobs/billing-nightly",
    );
    // S is for every authenticated user.
    assert_eq!(status_u64(&billing.status().await, "locks"), 3);
    // The admin reaches every key, billing's included.
    assert_eq!(
        ops.request(&format!("K billing/42 {mine} 60")).await,
        "K billing/42"
    );
    assert_eq!(
        ops.request(&format!("R orders/42 {theirs}")).await,
        "R orders/42"
    );
}

#[tokio::test]
async fn the_token_guessing_attack_fails_without_the_prefix() {
    let (node, _path, _dir) = node_with_users(&[]);
    let mut victim = login(&node, "billing", BILLING_SECRET).await;
    let token = grant_token(&victim.request("A billing/42 0 60").await, "billing/42");
    let mut attacker = login(&node, "jobs", JOBS_SECRET).await;
    // The attacker learns the latest token from S, and guesses around it.
    let latest = status_u64(&attacker.status().await, "token");
    let mut burst = String::new();
    for guess in latest.saturating_sub(1000)..latest.saturating_sub(1000) + 2000 {
        burst.push_str(&format!("R billing/42 {guess}\n"));
    }
    assert!(
        burst.contains(&format!("R billing/42 {token}\n")),
        "the right token is among the guesses"
    );
    attacker.send_raw(burst.as_bytes()).await;
    for _ in 0..2000 {
        assert_eq!(attacker.recv().await, "E R billing/42 permission denied");
    }
    let mut burst = String::new();
    for guess in latest.saturating_sub(1000)..latest.saturating_sub(1000) + 2000 {
        burst.push_str(&format!("K billing/42 {guess} 86400\n"));
    }
    attacker.send_raw(burst.as_bytes()).await;
    for _ in 0..2000 {
        assert_eq!(attacker.recv().await, "E K billing/42 permission denied");
    }
    // Still held by the victim, with the victim's token.
    assert_eq!(victim.request("A billing/42 0.1 10").await, "T billing/42");
    assert_eq!(
        victim.request(&format!("R billing/42 {token}")).await,
        "R billing/42"
    );
    // One log line for all those refusals, not one per attempt.
    wait_log(&node, "refused client requests", 1);
    assert_eq!(
        node.log_tail(100_000)
            .matches("refused client requests")
            .count(),
        1
    );
}

#[tokio::test]
async fn u_is_refused_where_authentication_is_not_enabled_and_nothing_else_changes() {
    let node = Batond::start(&[]);
    let mut c = node.connect().await;
    assert_eq!(
        c.request("U billing s3cr3t").await,
        "E U billing authentication is not enabled"
    );
    let token = grant_token(&c.request("A orders/1 0 10").await, "orders/1");
    assert_eq!(
        c.request(&format!("R orders/1 {token}")).await,
        "R orders/1"
    );
}

#[tokio::test]
async fn sighup_reloads_users_for_open_connections_and_a_bad_file_keeps_the_old() {
    let (node, path, _dir) = node_with_users(&[]);
    let mut jobs = login(&node, "jobs", JOBS_SECRET).await;
    let mut billing = login(&node, "billing", BILLING_SECRET).await;
    // jobs removed, billing's prefixes changed, carol added.
    let next = format!(
        "[[user]]\nname = \"billing\"\nsecret = \"{BILLING_SECRET}\"\nprefixes = [\"invoices/\"]\n\
         [[user]]\nname = \"carol\"\nsecret = \"c4r0l\"\nprefixes = [\"carol/\"]\n"
    );
    write_users(&path, &next);
    hang_up(&node);
    wait_log(&node, "reloaded auth file", 1);
    assert_eq!(
        jobs.request("A jobs/1 0 10").await,
        "E A jobs/1 authentication required"
    );
    assert_eq!(
        billing.request("A billing/1 0 10").await,
        "E A billing/1 permission denied"
    );
    grant_token(&billing.request("A invoices/1 0 10").await, "invoices/1");
    let mut carol = login(&node, "carol", "c4r0l").await;
    grant_token(&carol.request("A carol/1 0 10").await, "carol/1");
    let mut c = node.connect().await;
    assert_eq!(
        c.request(&format!("U jobs {JOBS_SECRET}")).await,
        "E U jobs authentication failed"
    );
    // A bad file: the old users stay, and the log says why in one line.
    write_users(&path, "[[user]]\nname = \"carol\"\n");
    hang_up(&node);
    wait_log(&node, "keeping the previous one", 1);
    grant_token(&carol.request("A carol/2 0 10").await, "carol/2");
    login(&node, "carol", "c4r0l").await;
    assert!(node.log_tail(100).contains("needs secret or secret_sha256"));
}

fn refusal(text: &str) -> String {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("users.toml");
    write_users(&path, text);
    let args = vec![
        "--listen".to_owned(),
        "127.0.0.1:0".to_owned(),
        "--auth-file".to_owned(),
        path.to_str().expect("UTF-8").to_owned(),
    ];
    let (_, stderr) = start_refused(&args);
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("batond: "))
        .collect();
    assert_eq!(lines.len(), 1, "one line expected:\n{stderr}");
    assert!(
        lines[0].contains(path.to_str().expect("UTF-8")),
        "names the file: {}",
        lines[0]
    );
    lines[0].to_owned()
}

#[test]
fn bad_auth_files_stop_batond_with_one_line_naming_the_problem() {
    let good = "[[user]]\nname = \"a\"\nsecret = \"x\"\nprefixes = [\"a/\"]\n";
    for (text, problem) in [
        ("", "no [[user]]"),
        ("[[user]\n", "line 1"),
        (
            &good.replace("prefixes", "prefixs") as &str,
            "unknown field",
        ),
        (
            "[[user]]\nname = \"a\"\nsecret = \"x\"\nsecret_sha256 = \"ab\"\nprefixes = [\"a/\"]\n",
            "not both",
        ),
        (
            "[[user]]\nname = \"a\"\nsecret_sha256 = \"xyz\"\nprefixes = [\"a/\"]\n",
            "64 hexadecimal digits",
        ),
        ("[[user]]\nname = \"a\"\nsecret = \"x\"\n", "needs prefixes"),
        (
            "[[user]]\nname = \"a\"\nsecret = \"x\"\nprefixes = []\n",
            "prefixes is empty",
        ),
        (
            "[[user]]\nname = \"a b\"\nsecret = \"x\"\nprefixes = [\"a/\"]\n",
            "user name",
        ),
        (
            "[[user]]\nname = \"a\"\nsecret = \"x y\"\nprefixes = [\"a/\"]\n",
            "secret has a space",
        ),
        (&format!("{good}{good}") as &str, "defined twice"),
    ] {
        let line = refusal(text);
        assert!(line.contains(problem), "{text:?}: {line}");
        assert!(!line.contains("x y"), "the secret is never quoted: {line}");
    }
    let (_, stderr) = start_refused(&[
        "--auth-file".to_owned(),
        "/nonexistent/users.toml".to_owned(),
    ]);
    assert!(
        stderr.contains("batond: auth file /nonexistent/users.toml: cannot open"),
        "{stderr}"
    );
}

#[tokio::test]
async fn a_file_others_can_read_is_warned_about() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("users.toml");
    std::fs::write(&path, users_toml()).expect("write");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    }
    let node = Batond::start(&["--auth-file", path.to_str().expect("UTF-8")]);
    wait_log(&node, "the auth file can be read by other users", 1);
    login(&node, "billing", BILLING_SECRET).await;
}
