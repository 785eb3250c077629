//! The one protocol trait: how a load loop talks to any lock service, so
//! each scenario is written once (`own_keys`, `contended`, `memory`) for
//! every target: Baton's lines (`baton_client`), Redis's RESP
//! (`redis_client`) and the client libraries of etcd and ZooKeeper
//! (`session`).
//!
//! Call protocol: a client is made with its *slots*, one key each (distinct
//! within a client), and the acquire parameters of its scenario. The loop
//! queues at most one request per slot with [`LockClient::acquire`] or
//! [`LockClient::release`], then calls [`LockClient::answers`], which sends
//! everything queued (one write where the wire allows) and waits, bounded
//! by the run's give-up instant, for more answers (none yet when a read
//! ended inside a line). Each answer names its slot; the loop checks it
//! answers the request in flight there.

use std::future::Future;

use crate::error::BenchError;
use crate::window::Window;

/// The acquire parameters of a scenario, in milliseconds (targets without
/// server-side waits ignore `wait_ms`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cycle {
    pub wait_ms: u64,
    pub lease_ms: u64,
}

/// What the service answered to one slot's request in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer<H> {
    /// The acquire was granted with this token; `held` is what the release
    /// needs (Baton's token, Redis's value, etcd's key, a znode path).
    Granted { token: u64, held: H },
    /// The acquire got nothing: Baton's `T` (its wait ran out), Redis's nil
    /// (the key is taken).
    NotGranted,
    /// The release was done.
    Released,
}

/// One connection (or session) to a lock service, with its slots.
pub trait LockClient: Send + Sized + 'static {
    type Held: Send + 'static;

    /// Whether an acquire that gets nothing is retried at once: a service
    /// without wait queues (Redis) answers "taken" instead of queueing, and
    /// its clients spin. Elsewhere such an answer is a failure.
    const SPINS: bool = false;

    /// The connection's number, for error messages and the referee.
    fn id(&self) -> usize;

    /// The key of each slot, as the client was made with them.
    fn keys(&self) -> &[Vec<u8>];

    /// How many slots the client has.
    fn slots(&self) -> usize {
        self.keys().len()
    }

    /// The key of `slot`, for error messages.
    fn key(&self, slot: usize) -> &[u8] {
        &self.keys()[slot]
    }

    /// Queues an acquire of `slot`'s key.
    fn acquire(&mut self, slot: usize);

    /// Queues the release of `slot`'s grant.
    fn release(&mut self, slot: usize, held: Self::Held);

    /// Sends what is queued and waits for what the service answers next,
    /// appending each answer as `(slot, answer)` to `out`.
    fn answers(
        &mut self,
        window: &Window,
        out: &mut Vec<(usize, Answer<Self::Held>)>,
    ) -> impl Future<Output = Result<(), BenchError>> + Send;

    /// Ends the connection or session (etcd revokes its lease); a line
    /// connection just closes when dropped.
    fn close(self) -> impl Future<Output = ()> + Send {
        async {}
    }
}
