//! The one timer of a node: sleeps until the earliest lease or wait
//! deadline, whatever the number of locks and waiters. It runs among the
//! node's [`Tasks`](crate::Tasks), which end it at shutdown.

use std::sync::Arc;

use crate::locks::SharedLocks;
use crate::node::LockNode;

pub(crate) async fn run<N: LockNode>(locks: Arc<SharedLocks<N>>) {
    let mut events = Vec::new();
    loop {
        let next = locks.tick(&mut events);
        if next.is_some_and(|at| at <= locks.clock().now()) {
            // More is due already (a tick does a bounded share of many
            // leases lapsing together): the requests waiting for the node
            // go first. A sleep until a past instant ends without
            // yielding, and the node's lock, taken again at once, would
            // keep them out until the runtime's budget forces a yield.
            tokio::task::yield_now().await;
            continue;
        }
        let sleep_until = next.map(|at| locks.clock().instant_at(at));
        tokio::select! {
            _ = locks.timer_woken() => {}
            _ = async {
                match sleep_until {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            } => {}
        }
    }
}
