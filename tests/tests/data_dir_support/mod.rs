//! Helpers shared by the data-directory test files: a start that must
//! fail, and a wait for a node's state to reach its disk.

#![allow(dead_code)] // each test file uses its own subset

use std::path::Path;
use std::process::ExitStatus;
use std::time::Duration;

/// Runs `batond args` and expects it to exit non-zero without ever
/// listening; returns its exit status and stderr.
/// A cluster node gets the harness's key file, as `Batond` gives it: the
/// refusals tested here are the data directory's, not the key's.
pub fn start_fails(args: &[&str]) -> (ExitStatus, String) {
    let key_dir = tempfile::tempdir().expect("temp dir");
    let mut args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    baton_tests::key::add_cluster_key(&mut args, key_dir.path());
    baton_tests::refused::start_refused(&args)
}

/// Waits (bounded) until the file at `path` holds `needle`: the node's
/// periodic write has put a change on disk.
pub async fn wait_on_disk(path: &Path, needle: &[u8]) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        if let Ok(bytes) = std::fs::read(path) {
            if bytes.windows(needle.len()).any(|w| w == needle) {
                return;
            }
        }
        if tokio::time::Instant::now() >= deadline {
            panic!(
                "{} does not hold {:?} after 5 s",
                path.display(),
                String::from_utf8_lossy(needle)
            );
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The one line of `stderr` that starts with `batond: ` (the binary's
/// report of why it stopped); panics unless there is exactly one.
pub fn exit_line(stderr: &str) -> &str {
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("batond: "))
        .collect();
    match lines.as_slice() {
        [line] => line,
        _ => panic!("expected one `batond: ` line in stderr, got {lines:?}:\n{stderr}"),
    }
}
