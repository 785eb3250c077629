//! Files that hold secrets (the users file, the cluster key): a node warns
//! when other users can read one, since whoever reads it can pose as a
//! user or a peer.

use std::path::Path;

/// Logs a warning if `file` (opened from `path`) is readable or writable
/// by anyone but its owner. `what` names it in the line: "the auth file".
#[cfg(unix)]
pub fn warn_if_readable_by_others(what: &str, path: &Path, file: &std::fs::File) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(meta) = file.metadata() {
        if meta.permissions().mode() & 0o077 != 0 {
            tracing::warn!(
                path = %path.display(),
                "{what} can be read by other users; chmod 600 it"
            );
        }
    }
}

#[cfg(not(unix))]
pub fn warn_if_readable_by_others(_what: &str, _path: &Path, _file: &std::fs::File) {}
