//! What [`Client::close`](crate::Client::close) has to finish before the
//! connections go: the grants the guards still hold, and the releases that
//! run in the background (a dropped guard's, an orphaned grant's).
//!
//! Background releases are spawned tasks; a program that returns from `main`
//! shuts its runtime down and kills them mid-flight, leaving the lock held
//! for its whole lease. Tracking them here is what lets `close` wait for
//! them instead.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use tokio::runtime::Handle;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Spawned tasks that `close` must wait for.
#[derive(Debug, Default)]
pub(crate) struct Background {
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl Background {
    /// Spawns `task` on `runtime` and keeps its handle for [`Background::finish`].
    pub(crate) fn spawn_on<F>(&self, runtime: &Handle, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let mut tasks = self.tasks.lock().unwrap_or_else(PoisonError::into_inner);
        // Finished tasks are dropped here, so a long-lived client does not
        // accumulate handles.
        tasks.retain(|task| !task.is_finished());
        tasks.push(runtime.spawn(task));
    }

    /// Spawns `task` on the current runtime (callers are inside one).
    pub(crate) fn spawn<F>(&self, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.spawn_on(&Handle::current(), task);
    }

    /// Waits for every tracked task, including those spawned meanwhile.
    /// Each task bounds its own time, so this is bounded too.
    pub(crate) async fn finish(&self) {
        loop {
            let tasks =
                std::mem::take(&mut *self.tasks.lock().unwrap_or_else(PoisonError::into_inner));
            if tasks.is_empty() {
                return;
            }
            for task in tasks {
                // A task that panicked has nothing left to wait for.
                let _ = task.await;
            }
        }
    }
}

/// The client-wide state of closing: whether it started, and the live guards.
#[derive(Debug)]
pub(crate) struct Lifecycle<T> {
    closing: watch::Sender<bool>,
    next_id: AtomicU64,
    /// Guards whose grant nobody has released or given up yet. Weak, so a
    /// guard forgotten with `mem::forget` cannot keep the client alive.
    live: Mutex<HashMap<u64, Weak<T>>>,
    /// Set by the client's one lifecycle warning, so it is said once.
    warned: AtomicBool,
}

impl<T> Default for Lifecycle<T> {
    fn default() -> Self {
        Lifecycle {
            closing: watch::channel(false).0,
            next_id: AtomicU64::new(0),
            live: Mutex::new(HashMap::new()),
            warned: AtomicBool::new(false),
        }
    }
}

impl<T> Lifecycle<T> {
    /// Whether `close` was called: no new request may start.
    pub(crate) fn is_closing(&self) -> bool {
        *self.closing.borrow()
    }

    /// Marks the client closing; true for the first caller.
    pub(crate) fn start_closing(&self) -> bool {
        !self.closing.send_replace(true)
    }

    /// Resolves once `close` was called.
    pub(crate) async fn closing(&self) {
        let mut closing = self.closing.subscribe();
        // The sender lives in `self`, so waiting cannot fail.
        let _ = closing.wait_for(|closing| *closing).await;
    }

    /// Builds a live guard with `make(id)` and registers it; the id
    /// unregisters it.
    pub(crate) fn register(&self, make: impl FnOnce(u64) -> Arc<T>) -> Arc<T> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let guard = make(id);
        self.live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, Arc::downgrade(&guard));
        guard
    }

    pub(crate) fn unregister(&self, id: u64) {
        self.live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&id);
    }

    /// Whether a registered guard is still alive.
    pub(crate) fn has_live(&self) -> bool {
        self.live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .any(|guard| guard.strong_count() > 0)
    }

    /// True the first time only: the client warns about its lifecycle once.
    pub(crate) fn first_warning(&self) -> bool {
        !self.warned.swap(true, Ordering::AcqRel)
    }

    /// Takes every guard still registered (and still alive).
    pub(crate) fn take_live(&self) -> Vec<Arc<T>> {
        let live = std::mem::take(&mut *self.live.lock().unwrap_or_else(PoisonError::into_inner));
        live.into_values()
            .filter_map(|guard| guard.upgrade())
            .collect()
    }
}

/// Dropped with the program's last [`Client`](crate::Client) handle (a
/// guard's copy does not count): says once if guards still hold locks
/// then, for a program that exits without `close` leaves them held until
/// their leases end.
#[derive(Debug)]
pub(crate) struct Handles<T> {
    life: Arc<Lifecycle<T>>,
}

impl<T> Handles<T> {
    pub(crate) fn new(life: Arc<Lifecycle<T>>) -> Handles<T> {
        Handles { life }
    }
}

impl<T> Drop for Handles<T> {
    fn drop(&mut self) {
        let life = &self.life;
        if life.has_live() && !life.is_closing() && life.first_warning() {
            tracing::warn!(
                "the last Client handle was dropped while guards still hold locks; \
                 each is released when its guard is (within a tokio runtime), else its \
                 lock stays held until its lease ends: call Client::close before exiting"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use std::time::Duration;

    #[test]
    fn only_the_first_close_starts_closing() {
        let life: Lifecycle<()> = Lifecycle::default();
        assert!(!life.is_closing());
        assert!(life.start_closing());
        assert!(!life.start_closing());
        assert!(life.is_closing());
    }

    #[test]
    fn take_live_skips_unregistered_and_dropped_guards() {
        let life: Lifecycle<(u64, u32)> = Lifecycle::default();
        let kept = life.register(|id| Arc::new((id, 1)));
        let gone = life.register(|id| Arc::new((id, 2)));
        let released = life.register(|id| Arc::new((id, 3)));
        life.unregister(released.0);
        drop(gone);
        assert!(life.has_live());
        let live = life.take_live();
        assert!(!life.has_live());
        assert_eq!(live.len(), 1);
        assert_eq!(live[0].1, 1);
        assert_eq!(kept.0, live[0].0);
        assert!(life.take_live().is_empty(), "taken once");
        assert!(life.first_warning());
        assert!(!life.first_warning(), "warned once");
    }

    #[tokio::test]
    async fn finish_waits_for_tasks_spawned_while_waiting() {
        let background = Arc::new(Background::default());
        let done = Arc::new(AtomicBool::new(false));
        let (inner_bg, inner_done) = (Arc::clone(&background), Arc::clone(&done));
        background.spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            inner_bg.spawn(async move {
                tokio::time::sleep(Duration::from_millis(20)).await;
                inner_done.store(true, Ordering::SeqCst);
            });
        });
        background.finish().await;
        assert!(done.load(Ordering::SeqCst));
    }
}
