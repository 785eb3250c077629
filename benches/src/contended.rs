//! The contended load, once for every target: one client of many looping
//! acquire then release at once on the same key, its grants checked and
//! its handoffs timed by the shared `Referee`. A service without wait
//! queues (`LockClient::SPINS`) is asked again at once when the key is
//! taken; elsewhere an acquire that gets nothing within its wait fails.

use std::sync::Arc;

use tokio::time::Instant;

use crate::error::BenchError;
use crate::protocol::{Answer, Cycle, LockClient};
use crate::referee::Referee;
use crate::stats::Stats;
use crate::window::Window;

/// A contended acquire waits 10 s, with a 10 s lease.
pub const CYCLE: Cycle = Cycle {
    wait_ms: 10_000,
    lease_ms: 10_000,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Acquiring,
    Releasing,
    Done,
}

/// Loops on the key of `client`'s one slot until the window stops; a
/// client holding or waiting then finishes its cycle so the key is left free.
pub async fn drive<C: LockClient>(
    mut client: C,
    referee: Arc<Referee>,
    window: Window,
) -> Result<Stats, BenchError> {
    let outcome = cycle(&mut client, &referee, window).await;
    client.close().await;
    outcome
}

async fn cycle<C: LockClient>(
    client: &mut C,
    referee: &Referee,
    window: Window,
) -> Result<Stats, BenchError> {
    debug_assert_eq!(client.slots(), 1, "a contended client has one key");
    client.acquire(0);
    let mut state = State::Acquiring;
    let mut stats = Stats::default();
    let mut answers = Vec::with_capacity(1);
    let id = client.id();
    while state != State::Done {
        // Sends the release queued below right away, so the handoff clock
        // the referee started runs from the send.
        client.answers(&window, &mut answers).await?;
        let now = Instant::now();
        let measuring = window.measures(now);
        for (slot, answer) in answers.drain(..) {
            match (answer, state) {
                (Answer::Granted { token, held }, State::Acquiring) => {
                    let handoff = referee.granted(id, token, now)?;
                    if measuring {
                        stats.cycles += 1;
                        stats.responses += 1;
                        if let Some(handoff) = handoff {
                            stats.latency.record(handoff);
                        }
                    }
                    referee.releasing(id, token, Instant::now());
                    client.release(slot, held);
                    state = State::Releasing;
                }
                (Answer::Released, State::Releasing) | (Answer::NotGranted, State::Acquiring)
                    if C::SPINS || state == State::Releasing =>
                {
                    if measuring {
                        stats.responses += 1;
                    }
                    if window.running(now) {
                        client.acquire(slot);
                        state = State::Acquiring;
                    } else {
                        state = State::Done;
                    }
                }
                (Answer::NotGranted, State::Acquiring) => {
                    return Err(BenchError::protocol(
                        id,
                        "contended acquire got no grant within its 10 s wait",
                        client.key(slot),
                    ))
                }
                _ => {
                    return Err(BenchError::protocol(
                        id,
                        "response does not answer the request in flight",
                        client.key(slot),
                    ))
                }
            }
        }
    }
    Ok(stats)
}
