//! Helpers of the authentication tests: users files, nodes started with
//! one, authenticated line clients, SIGHUP.

#![allow(dead_code)] // each test binary uses its own part

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use baton_tests::{Batond, LineClient};
use sha2::{Digest, Sha256};

pub const BILLING_SECRET: &str = "s3cr3t-value";
pub const OPS_SECRET: &str = "0ps-0nly";
pub const JOBS_SECRET: &str = "j0bs-secret";

pub fn sha256_hex(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// billing (plain secret, two prefixes), ops (admin, secret_sha256) and
/// jobs (prefix jobs/ only).
pub fn users_toml() -> String {
    format!(
        r#"
[[user]]
name = "billing"
secret = "{BILLING_SECRET}"
prefixes = ["billing/", "jobs/billing-"]

[[user]]
name = "ops"
secret_sha256 = "{}"
admin = true

[[user]]
name = "jobs"
secret = "{JOBS_SECRET}"
prefixes = ["jobs/"]
"#,
        sha256_hex(OPS_SECRET)
    )
}

/// Writes `text` as a users file readable only by its owner.
pub fn write_users(path: &Path, text: &str) {
    std::fs::write(path, text).expect("write the users file");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .expect("chmod the users file");
    }
}

/// A node with `users_toml()` as its auth file, and the file's path.
pub fn node_with_users(extra: &[&str]) -> (Batond, PathBuf, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("users.toml");
    write_users(&path, &users_toml());
    let path_text = path.to_str().expect("UTF-8 path").to_owned();
    let mut args = vec!["--auth-file", path_text.as_str()];
    args.extend_from_slice(extra);
    (Batond::start(&args), path, dir)
}

/// A connection authenticated as `user`.
pub async fn login(node: &Batond, user: &str, secret: &str) -> LineClient {
    let mut c = node.connect().await;
    assert_eq!(
        c.request(&format!("U {user} {secret}")).await,
        format!("U {user}")
    );
    c
}

pub fn hang_up(node: &Batond) {
    let pid = nix::unistd::Pid::from_raw(node.pid() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGHUP).expect("send SIGHUP");
}

/// Polls until the node's log has `count` lines containing `text`.
pub fn wait_log(node: &Batond, text: &str, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let log = node.log_tail(10_000);
        if log.matches(text).count() >= count {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no {count} log lines with {text:?}:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
