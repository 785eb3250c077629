//! `baton run`: hold a lock for exactly as long as a command runs.

use std::ffi::OsString;
use std::io::ErrorKind;
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitCode, ExitStatus};
use std::time::Duration;

use baton_client::{Client, Error};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::process::{Child, Command};
use tokio::signal::unix::{signal, SignalKind};

use crate::exit::Exit;

/// How long a command gets to exit after SIGTERM before it is killed.
const TERM_GRACE: Duration = Duration::from_secs(5);

/// Acquires `key`, runs `command` with the token in its environment while
/// renewing, and releases at the end.
pub async fn run(
    client: &Client,
    key: &OsString,
    wait: Duration,
    lease: Duration,
    command: &[OsString],
) -> ExitCode {
    let Some((program, args)) = command.split_first() else {
        eprintln!("baton: run needs a command after --");
        return Exit::Usage.code();
    };
    let mut guard = match client.acquire(key.as_encoded_bytes(), wait, lease).await {
        Ok(guard) => guard,
        Err(err) => return crate::fail(&err),
    };
    guard.keep_alive();
    let spawned = Command::new(program)
        .args(args)
        .env("BATON_KEY", key)
        .env("BATON_TOKEN", guard.token().to_string())
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(err) => {
            eprintln!("baton: cannot run {}: {err}", program.to_string_lossy());
            let _ = guard.release().await;
            return ExitCode::from(if err.kind() == ErrorKind::NotFound {
                127
            } else {
                126
            });
        }
    };
    let (mut term, mut int) = match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(term), Ok(int)) => (term, int),
        (Err(err), _) | (_, Err(err)) => {
            eprintln!("baton: cannot watch signals: {err}");
            terminate(&mut child).await;
            let _ = guard.release().await;
            return Exit::Failure.code();
        }
    };
    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            lost = guard.lost() => {
                eprintln!("baton: {lost}; terminating the command");
                terminate(&mut child).await;
                // The grant is gone already; releasing only tidies up in
                // case the loss was a renewal that could not get through.
                let _ = guard.release().await;
                return Exit::LeaseLost.code();
            }
            // A signal to baton is meant for the job: pass it on and keep
            // waiting, so the lock is released only once the command is done.
            _ = term.recv() => forward(&child, Signal::SIGTERM),
            _ = int.recv() => forward(&child, Signal::SIGINT),
        }
    };
    let released = guard.release().await;
    let status = match status {
        Ok(status) => status,
        Err(err) => {
            eprintln!("baton: lost track of the command: {err}");
            return Exit::Failure.code();
        }
    };
    if let Err(err) = released {
        // The command's outcome matters more; the lease frees the lock anyway.
        let note = match err {
            Error::NotHeld { .. } => "the lease had already expired".to_owned(),
            other => other.to_string(),
        };
        eprintln!("baton: warning: release failed: {note}");
    }
    exit_code(status)
}

fn exit_code(status: ExitStatus) -> ExitCode {
    match (status.code(), status.signal()) {
        (Some(code), _) => ExitCode::from(u8::try_from(code & 0xff).unwrap_or(1)),
        (None, Some(signal)) => ExitCode::from(u8::try_from(128 + signal).unwrap_or(1)),
        (None, None) => Exit::Failure.code(),
    }
}

fn forward(child: &Child, signal: Signal) {
    if let Some(pid) = child.id().and_then(|id| i32::try_from(id).ok()) {
        let _ = kill(Pid::from_raw(pid), signal);
    }
}

/// SIGTERM, then SIGKILL if the command does not exit within the grace.
async fn terminate(child: &mut Child) {
    forward(child, Signal::SIGTERM);
    if tokio::time::timeout(TERM_GRACE, child.wait())
        .await
        .is_err()
    {
        let _ = child.kill().await;
    }
}
