//! A `batond` start that must fail: run it, wait (bounded) for its exit,
//! and hand back its status and stderr.

use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::binary::batond_bin;

/// How long a start that must fail may run before it counts as started.
pub const REFUSAL_BOUND: Duration = Duration::from_secs(10);

/// Runs `batond args` exactly as given and expects it to exit non-zero
/// within [`REFUSAL_BOUND`]; returns its exit status and stderr (without
/// colours). Panics if it runs on or exits 0.
pub fn start_refused(args: &[String]) -> (ExitStatus, String) {
    let log = tempfile::NamedTempFile::new().expect("temp file");
    let mut child = Command::new(batond_bin())
        .args(args)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log.reopen().expect("reopen the log"))
        .spawn()
        .expect("spawn batond");
    let deadline = Instant::now() + REFUSAL_BOUND;
    let status = loop {
        if let Some(status) = child.try_wait().expect("poll batond") {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            let stderr = std::fs::read_to_string(log.path()).unwrap_or_default();
            panic!("batond {args:?} was expected to refuse to start, but ran for {REFUSAL_BOUND:?}:\n{stderr}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let stderr = std::fs::read_to_string(log.path()).unwrap_or_default();
    assert!(
        !status.success(),
        "batond {args:?} exited 0, expected a refusal:\n{stderr}"
    );
    (status, stderr)
}
