//! `baton run`: hold a lock for exactly as long as a command runs.

use std::ffi::OsString;
use std::io::ErrorKind;
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitCode, ExitStatus};
use std::time::Duration;

use baton_client::{Client, Error, Guard};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::process::{Child, Command};
use tokio::signal::unix::{signal, Signal as SignalStream, SignalKind};

use crate::exit::Exit;
use crate::grant_flags::GrantFlags;

/// How long a command gets to exit after SIGTERM before it is killed: the
/// lock no longer protects it, so not long.
const TERM_GRACE: Duration = Duration::from_secs(2);

/// What `baton run` was asked to do.
#[derive(Debug)]
pub struct RunOptions<'a> {
    pub key: &'a OsString,
    pub wait: Duration,
    pub lease: Duration,
    /// `--permits`, `--shared`, `--value`.
    pub grant: GrantFlags,
    /// `--child-exit-code`: 0 or 10 for the command, never its own status.
    pub child_exit_code: bool,
    pub command: &'a [OsString],
}

/// Acquires `key`, runs `command` with the token in its environment while
/// renewing, and releases at the end.
pub async fn run(client: &Client, options: RunOptions<'_>) -> ExitCode {
    let RunOptions {
        key,
        wait,
        lease,
        grant,
        child_exit_code,
        command,
    } = options;
    if command.is_empty() {
        eprintln!("baton: run needs a command after --");
        return Exit::Usage.code();
    }
    let acquire = grant.apply(client.acquire(key.as_encoded_bytes(), wait, lease));
    let mut guard = match crate::outage::bounded(client, wait, acquire).await {
        Ok(guard) => guard,
        Err(err) => return crate::fail(&err),
    };
    guard.keep_alive();
    run_held(guard, key, command, child_exit_code).await
}

/// What `run` and `elect` share once the key is held (its keep-alive
/// running): runs the command while the grant lasts, stops it if the
/// grant is lost (SIGTERM, SIGKILL [`TERM_GRACE`] later; exit 7), and
/// releases when it ends.
pub async fn run_held(
    guard: Guard,
    key: &OsString,
    command: &[OsString],
    child_exit_code: bool,
) -> ExitCode {
    let Some((program, args)) = command.split_first() else {
        eprintln!("baton: a command is needed after --");
        let _ = guard.release().await;
        return Exit::Usage.code();
    };
    let mut child = match spawn_command(program, args, key, &guard) {
        Ok(child) => child,
        Err(code) => {
            let _ = guard.release().await;
            return code;
        }
    };
    let mut signals = match Signals::watch() {
        Ok(signals) => signals,
        Err(err) => {
            eprintln!("baton: cannot watch signals: {err}");
            terminate(&mut child).await;
            let _ = guard.release().await;
            return Exit::Failure.code();
        }
    };
    match wait_while_held(&mut child, &guard, &mut signals).await {
        Ok(status) => finish(guard, status, child_exit_code).await,
        Err(LeaseLost) => {
            // The grant is gone: answered "not held", or its lease ended
            // with no renewal through. A release would be answered "not
            // held" at best, or keep baton waiting on an unreachable node:
            // the guard is let go without one, and baton exits now.
            let _ = guard.into_token();
            Exit::LeaseLost.code()
        }
    }
}

/// Starts the command with the lock's key and token in its environment;
/// on failure says why and gives the shell's exit code for it (127: not
/// found, 126: found but not runnable).
fn spawn_command(
    program: &OsString,
    args: &[OsString],
    key: &OsString,
    guard: &Guard,
) -> Result<Child, ExitCode> {
    Command::new(program)
        .args(args)
        .env("BATON_KEY", key)
        .env("BATON_TOKEN", guard.token().to_string())
        .spawn()
        .map_err(|err| {
            eprintln!("baton: cannot run {}: {err}", program.to_string_lossy());
            ExitCode::from(if err.kind() == ErrorKind::NotFound {
                127
            } else {
                126
            })
        })
}

/// The signals baton passes on to the command.
struct Signals {
    term: SignalStream,
    int: SignalStream,
}

impl Signals {
    fn watch() -> std::io::Result<Signals> {
        match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) {
            (Ok(term), Ok(int)) => Ok(Signals { term, int }),
            (Err(err), _) | (_, Err(err)) => Err(err),
        }
    }
}

/// The lease was lost while the command ran; the command has been stopped.
struct LeaseLost;

/// Waits for the command to exit, passing signals on; stops it if the lease
/// is lost first.
async fn wait_while_held(
    child: &mut Child,
    guard: &Guard,
    signals: &mut Signals,
) -> Result<std::io::Result<ExitStatus>, LeaseLost> {
    loop {
        tokio::select! {
            status = child.wait() => return Ok(status),
            lost = guard.lost() => {
                eprintln!("baton: {lost}; terminating the command");
                terminate(child).await;
                return Err(LeaseLost);
            }
            // A signal to baton is meant for the job: pass it on and keep
            // waiting, so the lock is released only once the command is done.
            _ = signals.term.recv() => forward(child, Signal::SIGTERM),
            _ = signals.int.recv() => forward(child, Signal::SIGINT),
        }
    }
}

/// Releases the lock once the command is done and exits as the command did;
/// a failed release is only a warning.
async fn finish(
    guard: Guard,
    status: std::io::Result<ExitStatus>,
    child_exit_code: bool,
) -> ExitCode {
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
    if !child_exit_code {
        return exit_code(status);
    }
    if status.success() {
        return Exit::Ok.code();
    }
    match (status.code(), status.signal()) {
        (Some(code), _) => eprintln!("baton: the command exited with status {code}"),
        (None, Some(signal)) => eprintln!("baton: the command was killed by signal {signal}"),
        (None, None) => eprintln!("baton: the command failed"),
    }
    Exit::ChildFailed.code()
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
