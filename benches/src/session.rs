//! Peers driven through a client library (etcd, ZooKeeper) behind the
//! protocol trait: a `LockSession` per driver connection, cloned once per
//! slot so the library multiplexes the slots' calls on that connection.
//! Each queued call runs as a task; `answers` waits for the next to end.

use std::future::Future;

use tokio::task::JoinSet;
use tokio::time::timeout_at;

use crate::error::BenchError;
use crate::protocol::{Answer, LockClient};
use crate::window::Window;

/// One client connection (session) to a lock service.
pub trait LockSession: Clone + Send + Sync + 'static {
    /// What releasing needs: etcd's lock key, ZooKeeper's znode path.
    type Held: Send + 'static;

    /// Waits until `key` is granted; returns its fencing token.
    fn acquire(
        &mut self,
        key: &str,
    ) -> impl Future<Output = Result<(u64, Self::Held), BenchError>> + Send;

    fn release(&mut self, held: Self::Held) -> impl Future<Output = Result<(), BenchError>> + Send;

    /// Ends the session (revokes its lease, closes it).
    fn close(self) -> impl Future<Output = ()> + Send;
}

/// What one finished call hands back: its slot, the slot's session clone
/// (which keeps per-slot state, such as ZooKeeper's made directories) and
/// what the call gave.
type Finished<S> = (
    usize,
    S,
    Result<Answer<<S as LockSession>::Held>, BenchError>,
);

/// A session and its slots; each slot's clone is out in a task while its
/// call runs.
#[derive(Debug)]
pub struct SessionClient<S: LockSession> {
    id: usize,
    session: S,
    keys: Vec<Vec<u8>>,
    clones: Vec<Option<S>>,
    calls: JoinSet<Finished<S>>,
}

impl<S: LockSession> SessionClient<S> {
    pub fn new(id: usize, session: S, keys: Vec<Vec<u8>>) -> Self {
        Self {
            id,
            clones: keys.iter().map(|_| Some(session.clone())).collect(),
            session,
            keys,
            calls: JoinSet::new(),
        }
    }

    /// Runs `call` on `slot`'s session clone as a task.
    fn spawn<F, Fut>(&mut self, slot: usize, call: F)
    where
        F: FnOnce(S, String) -> Fut,
        Fut: Future<Output = (S, Result<Answer<S::Held>, BenchError>)> + Send + 'static,
    {
        let Some(session) = self.clones[slot].take() else {
            debug_assert!(false, "slot {slot} already has a call in flight");
            return;
        };
        // The driver's keys are ASCII.
        let call = call(
            session,
            String::from_utf8_lossy(&self.keys[slot]).into_owned(),
        );
        self.calls.spawn(async move {
            let (session, answer) = call.await;
            (slot, session, answer)
        });
    }
}

impl<S: LockSession> LockClient for SessionClient<S> {
    type Held = S::Held;

    fn id(&self) -> usize {
        self.id
    }

    fn keys(&self) -> &[Vec<u8>] {
        &self.keys
    }

    fn acquire(&mut self, slot: usize) {
        self.spawn(slot, |mut session, key| async move {
            let granted = session.acquire(&key).await;
            let answer = granted.map(|(token, held)| Answer::Granted { token, held });
            (session, answer)
        });
    }

    fn release(&mut self, slot: usize, held: S::Held) {
        self.spawn(slot, |mut session, _| async move {
            let released = session.release(held).await;
            (session, released.map(|()| Answer::Released))
        });
    }

    async fn answers(
        &mut self,
        window: &Window,
        out: &mut Vec<(usize, Answer<S::Held>)>,
    ) -> Result<(), BenchError> {
        let first = timeout_at(window.give_up_at, self.calls.join_next())
            .await
            .map_err(|_| BenchError::Drain(window.drain))?;
        let mut finished = first;
        while let Some(joined) = finished {
            let (slot, session, answer) = joined?;
            self.clones[slot] = Some(session);
            out.push((slot, answer?));
            finished = self.calls.try_join_next();
        }
        Ok(())
    }

    async fn close(mut self) {
        self.calls.shutdown().await;
        self.session.close().await;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test
mod tests {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use super::*;
    use crate::referee::Referee;
    use crate::window::Timing;
    use crate::{contended, own_keys};

    /// A lock service in memory: one holder per key, tokens rising, and an
    /// acquire of a held key polled until it frees (as a library waits).
    #[derive(Clone, Debug, Default)]
    struct Fake {
        state: Arc<Mutex<(u64, Vec<String>)>>,
    }

    impl LockSession for Fake {
        type Held = String;

        async fn acquire(&mut self, key: &str) -> Result<(u64, String), BenchError> {
            loop {
                {
                    let mut state = self.state.lock().unwrap();
                    if !state.1.iter().any(|held| held == key) {
                        state.0 += 1;
                        state.1.push(key.to_string());
                        return Ok((state.0, key.to_string()));
                    }
                }
                tokio::task::yield_now().await;
            }
        }

        async fn release(&mut self, held: String) -> Result<(), BenchError> {
            self.state.lock().unwrap().1.retain(|key| *key != held);
            Ok(())
        }

        async fn close(self) {}
    }

    const SHORT: Timing = Timing {
        warmup: Duration::from_millis(20),
        duration: Duration::from_millis(100),
        drain: Duration::from_secs(2),
    };

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn own_keys_cycle_every_slot_through_the_library() {
        let keys = (0..4).map(|i| format!("k{i}").into_bytes()).collect();
        let client = SessionClient::new(0, Fake::default(), keys);
        let stats = own_keys::drive(client, true, Window::starting_now(SHORT))
            .await
            .unwrap();
        // A cycle ends in a counted release (its grant may fall before
        // the window opened).
        assert!(stats.cycles > 0);
        assert!(stats.responses >= stats.cycles, "{}", stats.responses);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn contended_sessions_take_turns() {
        let fake = Fake::default();
        let referee = Arc::new(Referee::new(true));
        let window = Window::starting_now(SHORT);
        let mut tasks = JoinSet::new();
        for id in 0..3 {
            let client = SessionClient::new(id, fake.clone(), vec![b"hot".to_vec()]);
            tasks.spawn(contended::drive(client, Arc::clone(&referee), window));
        }
        let mut cycles = 0;
        while let Some(joined) = tasks.join_next().await {
            cycles += joined.unwrap().unwrap().cycles;
        }
        assert!(cycles > 0);
        assert!(
            fake.state.lock().unwrap().1.is_empty(),
            "the key is left free"
        );
    }
}
