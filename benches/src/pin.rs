//! CPU pinning with `taskset`, so server and driver each keep a core of
//! their own and every target is measured under the same conditions. The
//! workspace forbids unsafe code, which rules out calling
//! sched_setaffinity directly.

use std::ffi::OsString;
use std::path::Path;
use std::process::Command;

/// Set in the re-executed driver so it does not pin itself again.
pub const PINNED_ENV: &str = "BATON_BENCH_PINNED_CPU";

/// Runs this very command again under `taskset -c <cpu>` and returns its
/// exit code, or `None` when this process already is that pinned copy.
pub fn reexec_pinned(cpu: usize) -> Result<Option<i32>, String> {
    if std::env::var_os(PINNED_ENV).is_some() {
        return Ok(None);
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this binary: {e}"))?;
    let status = Command::new("taskset")
        .arg("-c")
        .arg(cpu.to_string())
        .arg(exe)
        .args(std::env::args_os().skip(1))
        .env(PINNED_ENV, cpu.to_string())
        .status()
        .map_err(|e| format!("cannot run taskset: {e}"))?;
    // Killed by a signal: report failure, there is no code to pass on.
    Ok(Some(status.code().unwrap_or(1)))
}

/// The program and arguments to run `program` pinned to `cpu`, if any.
pub fn wrap(program: &Path, args: &[OsString], cpu: Option<usize>) -> (OsString, Vec<OsString>) {
    match cpu {
        None => (program.into(), args.to_vec()),
        Some(cpu) => {
            let mut wrapped = vec!["-c".into(), cpu.to_string().into(), program.into()];
            wrapped.extend_from_slice(args);
            ("taskset".into(), wrapped)
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test
mod tests {
    use super::*;

    #[test]
    fn wraps_in_taskset_only_when_pinned() {
        let args = vec![OsString::from("--listen"), "127.0.0.1:0".into()];
        let (program, plain) = wrap(Path::new("/bin/batond"), &args, None);
        assert_eq!(program, "/bin/batond");
        assert_eq!(plain, args);
        let (program, pinned) = wrap(Path::new("/bin/batond"), &args, Some(3));
        assert_eq!(program, "taskset");
        assert_eq!(
            pinned,
            ["-c", "3", "/bin/batond", "--listen", "127.0.0.1:0"]
        );
    }
}
