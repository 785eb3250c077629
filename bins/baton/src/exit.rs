//! Exit codes: what a shell script can branch on after running `baton`.

use std::process::ExitCode;

use baton_client::Error;

/// Every code `baton` itself exits with. `run` otherwise exits with its
/// command's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Ok = 0,
    /// Anything not covered below: an unexpected answer, an I/O failure.
    Failure = 1,
    /// Bad arguments (also what clap uses for its own usage errors).
    Usage = 2,
    /// A node said the wait ran out before the lock was granted (with
    /// `--try`: the lock was held). Never a wait that ran out unanswered.
    TimedOut = 3,
    /// No node could be reached, none answered in time, or none serves.
    NoServer = 4,
    /// A node refused the request (`E`), for instance a lease over its maximum.
    Rejected = 5,
    /// Release or renew of a grant that no longer exists (`N R` / `N K`);
    /// `leader`: no leader.
    NotHeld = 6,
    /// `run`, `elect`: the lease (leadership) was lost while the command
    /// ran; it was terminated.
    LeaseLost = 7,
    /// The node refused the credentials, has no users while credentials
    /// were given, or requires credentials and none were given.
    AuthFailed = 8,
    /// The user may not use that key (`E ... permission denied`).
    PermissionDenied = 9,
    /// `run --child-exit-code`: the command ran and failed (exited non-zero
    /// or was killed by a signal).
    ChildFailed = 10,
    /// `status`: more than one node says it serves (a split service).
    ManyServing = 11,
}

/// The table shown at the end of `--help`.
pub const HELP: &str = "\
Exit codes:
  0  success
  1  other failure (unexpected answer, I/O error)
  2  usage error
  3  wait timed out: the node said the wait ran out, the lock was not
     granted (with --try: it is held)
  4  no server reachable, answering in time (a stopped node) or serving
     (no Raft majority, no active node); the error names each address
     that cannot be reached and the cause
  5  rejected by the node (E: malformed or beyond a limit)
  6  not held: no live grant with that token (release, renew), nothing
     to force-release, or no leader (leader)
  7  run, elect: lease (leadership) lost while the command ran (it was
     terminated)
  8  authentication failed (wrong user or secret, none given to a node
     that requires one, or given to a node without users)
  9  permission denied: the user may not use that key
  10 run --child-exit-code: the command ran and failed (its status is
     printed on stderr)
  11 status: more than one node serves (each grants on its own: a
     misconfigured or split cluster)
  126, 127  run: the command cannot be executed, or is not found
  Without --child-exit-code, run exits with the command's own status
  once it ran to its end (128+N if killed by signal N), which a command
  may make look like any code above; with it, 0 means the command
  succeeded, 10 that it failed, and every other code is baton's own.";

impl Exit {
    pub fn of(err: &Error) -> Exit {
        match err {
            Error::TimedOut { .. } => Exit::TimedOut,
            Error::NoServer | Error::NotServing | Error::Unanswered { .. } => Exit::NoServer,
            Error::Rejected { .. } | Error::Unsupported { .. } => Exit::Rejected,
            Error::NotHeld { .. } => Exit::NotHeld,
            Error::LeaseLost { .. } => Exit::LeaseLost,
            Error::AuthenticationFailed
            | Error::AuthenticationNotEnabled
            | Error::AuthenticationRequired => Exit::AuthFailed,
            Error::PermissionDenied { .. } => Exit::PermissionDenied,
            Error::InvalidCredentials { .. } => Exit::Usage,
            Error::InvalidKey(_)
            | Error::InvalidDuration { .. }
            | Error::InvalidOption { .. }
            | Error::InvalidValue(_)
            | Error::NoAddress
            | Error::InvalidAddress { .. } => Exit::Usage,
            _ => Exit::Failure,
        }
    }

    pub fn code(self) -> ExitCode {
        ExitCode::from(self as u8)
    }
}
