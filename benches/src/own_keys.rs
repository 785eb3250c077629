//! The uncontended and pipelined load: one connection cycling acquire then
//! release on keys no other connection uses, one cycle in flight per key.
//! Depth 1 is the uncontended scenario; depth D keeps D cycles (so D
//! requests) in flight on the connection at all times.

use std::collections::HashMap;

use tokio::time::Instant;

use crate::conn::Conn;
use crate::error::{BenchError, Violation};
use crate::stats::Stats;
use crate::window::Window;
use crate::wire::{self, Reply};

/// The acquire parameters of a cycle, in milliseconds.
#[derive(Clone, Copy, Debug)]
pub struct Cycle {
    pub wait_ms: u64,
    pub lease_ms: u64,
}

#[derive(Clone, Copy, Debug)]
enum State {
    Acquiring { cycle_start: Instant },
    Releasing { cycle_start: Instant },
    Done,
}

#[derive(Debug)]
struct Slot {
    key: Vec<u8>,
    acquire: Vec<u8>,
    state: State,
    last_token: u64,
}

/// Runs `keys.len()` independent cycles on `conn` until the window stops,
/// then lets the cycles in flight finish.
pub async fn drive(
    mut conn: Conn,
    keys: Vec<Vec<u8>>,
    cycle: Cycle,
    window: Window,
) -> Result<Stats, BenchError> {
    let index: HashMap<Vec<u8>, usize> = keys
        .iter()
        .enumerate()
        .map(|(slot, key)| (key.clone(), slot))
        .collect();
    let start = Instant::now();
    let mut slots: Vec<Slot> = keys
        .into_iter()
        .map(|key| {
            let mut acquire = Vec::new();
            wire::acquire(&mut acquire, &key, cycle.wait_ms, cycle.lease_ms);
            conn.out.extend_from_slice(&acquire);
            Slot {
                key,
                acquire,
                state: State::Acquiring { cycle_start: start },
                last_token: 0,
            }
        })
        .collect();
    let mut in_flight = slots.len();
    let mut stats = Stats::default();
    conn.flush(window.give_up_at, window.drain).await?;

    while in_flight > 0 {
        conn.fill(window.give_up_at, window.drain).await?;
        let now = Instant::now();
        let measuring = window.measures(now);
        let running = window.running(now);
        while let Some(line) = conn.lines.next_line() {
            let reply = wire::parse_reply(line);
            let key = match reply {
                Reply::Granted { key, .. } | Reply::Released { key } | Reply::TimedOut { key } => {
                    key
                }
                Reply::Other => {
                    return Err(BenchError::protocol(conn.id, "unexpected response", line))
                }
            };
            let Some(&at) = index.get(key) else {
                return Err(BenchError::protocol(
                    conn.id,
                    "response for a key this connection did not use",
                    line,
                ));
            };
            let slot = &mut slots[at];
            match (reply, slot.state) {
                (Reply::Granted { token, .. }, State::Acquiring { cycle_start }) => {
                    // Each grant of a key follows the release of the one
                    // before, so it must carry a higher token.
                    if token <= slot.last_token {
                        return Err(Violation::TokenNotRising {
                            client: conn.id,
                            token,
                            previous: slot.last_token,
                        }
                        .into());
                    }
                    slot.last_token = token;
                    wire::release(&mut conn.out, &slot.key, token);
                    slot.state = State::Releasing { cycle_start };
                    if measuring {
                        stats.responses += 1;
                    }
                }
                (Reply::Released { .. }, State::Releasing { cycle_start }) => {
                    if measuring {
                        stats.responses += 1;
                        stats.cycles += 1;
                        stats.latency.record(now - cycle_start);
                    }
                    if running {
                        conn.out.extend_from_slice(&slot.acquire);
                        slot.state = State::Acquiring { cycle_start: now };
                    } else {
                        slot.state = State::Done;
                        in_flight -= 1;
                    }
                }
                (Reply::TimedOut { .. }, State::Acquiring { .. }) => {
                    return Err(BenchError::protocol(
                        conn.id,
                        "acquire of a key nobody else uses timed out",
                        line,
                    ))
                }
                _ => {
                    return Err(BenchError::protocol(
                        conn.id,
                        "response does not answer the request in flight",
                        line,
                    ))
                }
            }
        }
        conn.flush(window.give_up_at, window.drain).await?;
    }
    Ok(stats)
}
