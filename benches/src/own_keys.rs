//! The uncontended and pipelined load, once for every target: one client
//! cycling acquire then release on keys no other client uses, one cycle in
//! flight per key (slot). Depth 1 is the uncontended scenario; depth D keeps
//! D cycles (so D requests) in flight on the connection at all times.

use tokio::time::Instant;

use crate::error::{BenchError, Violation};
use crate::protocol::{Answer, LockClient};
use crate::stats::Stats;
use crate::window::Window;

#[derive(Clone, Copy, Debug)]
enum State {
    Acquiring { cycle_start: Instant },
    Releasing { cycle_start: Instant },
    Done,
}

/// Runs one cycle per slot of `client` until the window stops, then lets
/// the cycles in flight finish. With `fences`, each key's tokens must rise.
pub async fn drive<C: LockClient>(
    mut client: C,
    fences: bool,
    window: Window,
) -> Result<Stats, BenchError> {
    let outcome = cycle(&mut client, fences, window).await;
    client.close().await;
    outcome
}

async fn cycle<C: LockClient>(
    client: &mut C,
    fences: bool,
    window: Window,
) -> Result<Stats, BenchError> {
    let start = Instant::now();
    let mut states = vec![State::Acquiring { cycle_start: start }; client.slots()];
    let mut last_tokens = vec![0; client.slots()];
    for slot in 0..client.slots() {
        client.acquire(slot);
    }
    let mut in_flight = client.slots();
    let mut stats = Stats::default();
    let mut answers = Vec::with_capacity(client.slots());
    while in_flight > 0 {
        client.answers(&window, &mut answers).await?;
        let now = Instant::now();
        let measuring = window.measures(now);
        let running = window.running(now);
        for (slot, answer) in answers.drain(..) {
            let state = &mut states[slot];
            match (answer, *state) {
                (Answer::Granted { token, held }, State::Acquiring { cycle_start }) => {
                    // Each grant of a key follows the release of the one
                    // before, so it must carry a higher token.
                    if fences && token <= last_tokens[slot] {
                        return Err(Violation::TokenNotRising {
                            client: client.id(),
                            token,
                            previous: last_tokens[slot],
                        }
                        .into());
                    }
                    last_tokens[slot] = token;
                    client.release(slot, held);
                    *state = State::Releasing { cycle_start };
                    if measuring {
                        stats.responses += 1;
                    }
                }
                (Answer::Released, State::Releasing { cycle_start }) => {
                    if measuring {
                        stats.responses += 1;
                        stats.cycles += 1;
                        stats.latency.record(now - cycle_start);
                    }
                    if running {
                        client.acquire(slot);
                        *state = State::Acquiring { cycle_start: now };
                    } else {
                        *state = State::Done;
                        in_flight -= 1;
                    }
                }
                (Answer::NotGranted, State::Acquiring { .. }) => {
                    return Err(BenchError::protocol(
                        client.id(),
                        "acquire of a key nobody else uses was not granted",
                        client.key(slot),
                    ))
                }
                _ => {
                    return Err(BenchError::protocol(
                        client.id(),
                        "response does not answer the request in flight",
                        client.key(slot),
                    ))
                }
            }
        }
    }
    Ok(stats)
}
