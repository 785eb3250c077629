//! The contended load: one connection of many looping acquire (wait 10 s)
//! then release at once on the same key, its grants checked and its
//! handoffs timed by the shared `Referee`.

use std::sync::Arc;

use tokio::time::Instant;

use crate::conn::Conn;
use crate::error::BenchError;
use crate::referee::Referee;
use crate::stats::Stats;
use crate::window::Window;
use crate::wire::{self, Reply};

/// Milliseconds a contended acquire waits, and its lease.
pub const WAIT_MS: u64 = 10_000;
pub const LEASE_MS: u64 = 10_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Acquiring,
    Releasing,
    Done,
}

/// Loops on `key` until the window stops; a connection holding or
/// waiting then finishes its cycle so the key is left free.
pub async fn drive(
    mut conn: Conn,
    key: Arc<[u8]>,
    referee: Arc<Referee>,
    window: Window,
) -> Result<Stats, BenchError> {
    let mut acquire = Vec::new();
    wire::acquire(&mut acquire, &key, WAIT_MS, LEASE_MS);
    conn.out.extend_from_slice(&acquire);
    conn.flush(window.give_up_at, window.drain).await?;
    let mut state = State::Acquiring;
    let mut stats = Stats::default();

    while state != State::Done {
        conn.fill(window.give_up_at, window.drain).await?;
        let now = Instant::now();
        let measuring = window.measures(now);
        while let Some(line) = conn.lines.next_line() {
            match (wire::parse_reply(line), state) {
                (Reply::Granted { key: k, token }, State::Acquiring) if *k == *key => {
                    let handoff = referee.granted(conn.id, token, now)?;
                    if measuring {
                        stats.cycles += 1;
                        stats.responses += 1;
                        if let Some(handoff) = handoff {
                            stats.latency.record(handoff);
                        }
                    }
                    referee.releasing(conn.id, token, Instant::now());
                    wire::release(&mut conn.out, &key, token);
                    state = State::Releasing;
                }
                (Reply::Released { key: k }, State::Releasing) if *k == *key => {
                    if measuring {
                        stats.responses += 1;
                    }
                    if window.running(now) {
                        conn.out.extend_from_slice(&acquire);
                        state = State::Acquiring;
                    } else {
                        state = State::Done;
                    }
                }
                (Reply::TimedOut { .. }, State::Acquiring) => {
                    return Err(BenchError::protocol(
                        conn.id,
                        "contended acquire got no grant within its 10 s wait",
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
        // Sent right after `releasing` so the handoff clock starts at the send.
        conn.flush(window.give_up_at, window.drain).await?;
    }
    Ok(stats)
}
