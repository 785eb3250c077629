//! Client authentication and key-prefix permissions (`--auth-file`,
//! docs/protocol.md 1.1 "Authentication").
//!
//! [`Auth`] holds the current users of the file, shared by every
//! connection of the node and replaced whole by [`Auth::reload`] (SIGHUP in
//! `batond`). Each connection has a `Session` that
//! gates its requests: until a `U` succeeds everything else is answered
//! `authentication required`; a key outside the user's prefixes is
//! answered `permission denied`; both change nothing. Without
//! `--auth-file` there is no session and a connection pays one branch per
//! request.

mod admin;
mod file;
pub(crate) mod session;
mod throttle;
mod users;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

pub use admin::AdminCheck;
pub use file::{AuthFileError, MAX_AUTH_FILE_BYTES, MAX_PREFIXES, MAX_USERS};
pub use throttle::{FAIL_BURST, FAIL_DELAY, FAIL_REFILL_PER_SEC, LOG_INTERVAL};

use throttle::Throttle;
use users::Users;

/// The users a node accepts, from its `--auth-file`.
#[derive(Debug)]
pub struct Auth {
    path: PathBuf,
    /// Bumped (inside the write lock) each time `users` is replaced, so a
    /// session learns of a reload with one atomic load.
    generation: AtomicU64,
    users: RwLock<Arc<Users>>,
    throttle: Throttle,
}

impl Auth {
    /// Reads and checks the users file at `path`.
    pub fn load(path: &Path) -> Result<Auth, AuthFileError> {
        let users = file::load(path)?;
        tracing::info!(path = %path.display(), users = users.len(), "auth file loaded");
        Ok(Auth {
            path: path.to_path_buf(),
            generation: AtomicU64::new(0),
            users: RwLock::new(Arc::new(users)),
            throttle: Throttle::default(),
        })
    }

    /// The file this was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the file again. A good file replaces the users at once, for
    /// open connections too (at their next request), and the number of
    /// users is returned; a bad one changes nothing.
    pub fn reload(&self) -> Result<usize, AuthFileError> {
        let users = file::load(&self.path)?;
        let count = users.len();
        let mut current = self.users.write().unwrap_or_else(PoisonError::into_inner);
        *current = Arc::new(users);
        self.generation.fetch_add(1, Ordering::AcqRel);
        Ok(count)
    }

    #[inline]
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The current users and their generation, read together.
    pub(crate) fn snapshot(&self) -> (u64, Arc<Users>) {
        let users = self.users.read().unwrap_or_else(PoisonError::into_inner);
        (self.generation(), Arc::clone(&users))
    }
}

#[cfg(test)]
mod tests;
