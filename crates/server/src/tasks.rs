//! The tasks of one node, all stopped and joined at its shutdown.
//!
//! Every task a node starts (connections, the timer, a cluster shell's
//! pump, watchers, peer links and handlers) is spawned through [`Tasks`]:
//! it runs until it ends by itself or the node stops, whichever comes
//! first, and the stop waits (bounded) until every one of them is gone.
//! No task outlives its server, so a test or a simulation that stops a
//! node stops all of it.

use std::future::Future;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// A node's task set: a cancellation token and a tracker. Clones share it.
#[derive(Debug, Clone, Default)]
pub struct Tasks {
    cancel: CancellationToken,
    tracker: TaskTracker,
}

impl Tasks {
    pub fn new() -> Tasks {
        Tasks::default()
    }

    /// Runs `task` until it ends or the node stops (then it is dropped at
    /// its next await point). The handle may abort it sooner.
    pub fn spawn<F>(&self, task: F) -> JoinHandle<()>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let cancel = self.cancel.clone();
        self.tracker.spawn(async move {
            tokio::select! {
                biased;
                () = cancel.cancelled() => {}
                () = task => {}
            }
        })
    }

    /// Runs `task`, which watches [`Tasks::stopping`] itself to finish its
    /// work cleanly (a connection flushes its answers).
    pub fn spawn_graceful<F>(&self, task: F) -> JoinHandle<()>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.tracker.spawn(task)
    }

    /// The token cancelled when the node stops.
    pub fn stopping(&self) -> &CancellationToken {
        &self.cancel
    }

    /// Whether the node is stopping.
    pub fn is_stopping(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// Stops every task and waits up to `limit` for them to end; `false`
    /// if some did not in time.
    pub async fn stop(&self, limit: Duration) -> bool {
        self.cancel.cancel();
        self.tracker.close();
        tokio::time::timeout(limit, self.tracker.wait())
            .await
            .is_ok()
    }

    /// Tasks still running (for tests and debug assertions).
    pub fn len(&self) -> usize {
        self.tracker.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tracker.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn stop_ends_every_task_even_one_that_never_returns() {
        let tasks = Tasks::new();
        tasks.spawn(std::future::pending());
        let graceful = tasks.clone();
        tasks.spawn_graceful(async move { graceful.stopping().cancelled().await });
        assert_eq!(tasks.len(), 2);
        assert!(tasks.stop(Duration::from_secs(1)).await);
        assert!(tasks.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn stop_reports_a_task_that_ignores_it() {
        let tasks = Tasks::new();
        tasks.spawn_graceful(std::future::pending());
        assert!(!tasks.stop(Duration::from_secs(1)).await);
    }
}
