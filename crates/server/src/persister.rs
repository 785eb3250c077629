//! Writes a node's state to its data directory when it changed, a few
//! times a second, and once more at a graceful stop. The single and the
//! priority modes share it.
//!
//! Fail-stop: a node whose state cannot be saved must not go on granting
//! locks a restart would forget. The first failed write stops the writer
//! and resolves [`Persister::failed`]; the binary then stops the node and
//! exits non-zero, so that a supervisor (or a standby) takes over.

use std::sync::Arc;
use std::time::Duration;

use baton_core::Millis;
use tokio::sync::watch;

use crate::locks::SharedLocks;
use crate::node::LockNode;
use crate::state_file::{StateFile, StateFileError, StateFormat};
use crate::tasks::Tasks;

/// How often the state is written if it changed.
pub const PERSIST_EVERY: Duration = Duration::from_millis(100);

/// Takes the state to write from the node if it changed since the version
/// given (one it returned before), with its version.
pub type TakeState<N, S> = fn(&N, u64, Millis) -> Option<(u64, S)>;

/// The writer of one node's state file.
pub struct Persister<N, S> {
    file: StateFile<S>,
    locks: Arc<SharedLocks<N>>,
    take: TakeState<N, S>,
    /// The version on disk. A write holds it until its file is renamed
    /// into place, even when the caller stopped waiting.
    written: Arc<tokio::sync::Mutex<u64>>,
    failure: Arc<watch::Sender<Option<Arc<StateFileError>>>>,
}

impl<N, S> std::fmt::Debug for Persister<N, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Persister")
            .field("file", &self.file.path())
            .field("failed", &self.failure.borrow().is_some())
            .finish_non_exhaustive()
    }
}

impl<N, S> Persister<N, S>
where
    N: LockNode,
    S: StateFormat + Send + 'static,
{
    /// A writer of `locks`' state to `file`. `written` is the version
    /// already on disk (0: none).
    pub fn new(
        file: StateFile<S>,
        locks: Arc<SharedLocks<N>>,
        take: TakeState<N, S>,
        written: u64,
    ) -> Arc<Persister<N, S>> {
        Arc::new(Persister {
            file,
            locks,
            take,
            written: Arc::new(tokio::sync::Mutex::new(written)),
            failure: Arc::new(watch::channel(None).0),
        })
    }

    /// Starts the periodic writer in `tasks`; it ends at the first failed
    /// write or when the node stops (the binary writes once more after).
    pub fn spawn(self: &Arc<Self>, tasks: &Tasks) {
        let persister = self.clone();
        tasks.spawn(async move {
            let mut pause = PERSIST_EVERY;
            loop {
                tokio::time::sleep(pause).await;
                let Ok(copying) = persister.write_once().await else {
                    return;
                };
                // A big table takes long to copy, and the node waits for
                // the copy: keep that to a tenth of the node's time. The
                // write and its fsync do not hold the node up, so a slow
                // disk does not stretch the pause (nor the window of
                // grants a crash can lose).
                pause = PERSIST_EVERY.max(copying * 10);
            }
        });
    }

    /// Writes the state if it changed since the last write. After one
    /// failure every call fails with it: the node is stopping.
    pub async fn write_if_changed(&self) -> Result<(), Arc<StateFileError>> {
        self.write_once().await.map(|_copying| ())
    }

    /// [`Self::write_if_changed`], returning how long the node was held
    /// for the copy of its state.
    async fn write_once(&self) -> Result<Duration, Arc<StateFileError>> {
        if let Some(error) = self.failure.borrow().clone() {
            return Err(error);
        }
        let mut written = self.written.clone().lock_owned().await;
        let known = *written;
        let take = self.take;
        let began = tokio::time::Instant::now();
        let taken = self.locks.with(|node, now, _| take(node, known, now));
        let copying = began.elapsed();
        let Some((version, state)) = taken else {
            return Ok(copying);
        };
        let file = self.file.clone();
        let failure = self.failure.clone();
        // The blocking write owns the version's lock and reports its own
        // failure: a stopping node drops the periodic writer at this await,
        // and its final write must wait for this one, not race it for the
        // temporary file (nor be overwritten by an older state after it).
        let stored = tokio::task::spawn_blocking(move || {
            let stored = file.store(&state).map_err(|error| fail(&failure, error));
            if stored.is_ok() {
                *written = version;
            }
            stored
        })
        .await;
        match stored {
            Ok(stored) => stored.map(|()| copying),
            Err(error) => Err(fail(
                &self.failure,
                StateFileError::Write {
                    path: self.file.path().to_path_buf(),
                    source: std::io::Error::other(format!("the writer task failed: {error}")),
                },
            )),
        }
    }

    /// Resolves at the first write that failed, with its error.
    pub async fn failed(&self) -> Arc<StateFileError> {
        let mut failure = self.failure.subscribe();
        loop {
            if let Some(error) = failure.borrow_and_update().clone() {
                return error;
            }
            if failure.changed().await.is_err() {
                // The persister is gone, and with it any write to fail.
                std::future::pending::<()>().await;
            }
        }
    }
}

/// Records the first failed write, which stops the node.
fn fail(
    failure: &watch::Sender<Option<Arc<StateFileError>>>,
    error: StateFileError,
) -> Arc<StateFileError> {
    tracing::error!(%error, "cannot save the node's state; stopping");
    let error = Arc::new(error);
    failure.send_if_modified(|first| {
        if first.is_some() {
            return false;
        }
        *first = Some(error.clone());
        true
    });
    error
}
