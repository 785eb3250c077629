//! The load loops against Redis: own keys (uncontended, pipelined) with
//! SET NX PX then the compare-and-delete script, and the contended loop
//! that retries SET NX at once when the key is taken, as Redis clients do
//! for lack of a wait queue. Replies come back in request order.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::time::Instant;

use crate::conn::Conn;
use crate::error::BenchError;
use crate::referee::Referee;
use crate::resp::{self, RespReply};
use crate::stats::Stats;
use crate::window::Window;

/// What every connection of a run shares: the release script's SHA and
/// the source of unique lock values.
#[derive(Clone, Debug)]
pub struct Shared {
    pub sha: Arc<[u8]>,
    pub values: Arc<AtomicU64>,
}

impl Shared {
    fn value(&self) -> u64 {
        self.values.fetch_add(1, Ordering::Relaxed) + 1
    }
}

/// Loads the release script once (`SCRIPT LOAD`) and returns what the
/// loops share.
pub async fn prepare(addr: SocketAddr, window: Window) -> Result<Shared, BenchError> {
    let mut conn = Conn::connect(usize::MAX, addr).await?;
    resp::command(
        &mut conn.out,
        &[b"SCRIPT", b"LOAD", resp::RELEASE_SCRIPT.as_bytes()],
    );
    conn.flush(window.give_up_at, window.drain).await?;
    let mut expect_sha = false;
    loop {
        conn.fill(window.give_up_at, window.drain).await?;
        while let Some(line) = conn.lines.next_line() {
            if expect_sha {
                let sha = line.strip_suffix(b"\r").unwrap_or(line);
                return Ok(Shared {
                    sha: sha.into(),
                    values: Arc::new(AtomicU64::new(0)),
                });
            }
            match resp::parse(line) {
                RespReply::Bulk(_) => expect_sha = true,
                _ => return Err(BenchError::protocol(conn.id, "SCRIPT LOAD failed", line)),
            }
        }
    }
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
    value: u64,
    state: State,
}

/// One connection cycling on keys of its own, one cycle in flight per key
/// (depth = `keys.len()`), until the window stops.
pub async fn own_keys(
    mut conn: Conn,
    keys: Vec<Vec<u8>>,
    lease_ms: u64,
    shared: Shared,
    window: Window,
) -> Result<Stats, BenchError> {
    let start = Instant::now();
    let mut pending = VecDeque::with_capacity(keys.len());
    let mut slots: Vec<Slot> = Vec::with_capacity(keys.len());
    for (at, key) in keys.into_iter().enumerate() {
        let value = shared.value();
        resp::set_nx(&mut conn.out, &key, value, lease_ms);
        pending.push_back(at);
        slots.push(Slot {
            key,
            value,
            state: State::Acquiring { cycle_start: start },
        });
    }
    let mut in_flight = slots.len();
    let mut stats = Stats::default();
    conn.flush(window.give_up_at, window.drain).await?;
    while in_flight > 0 {
        conn.fill(window.give_up_at, window.drain).await?;
        let now = Instant::now();
        let measuring = window.measures(now);
        while let Some(line) = conn.lines.next_line() {
            let Some(at) = pending.pop_front() else {
                return Err(BenchError::protocol(conn.id, "reply to no request", line));
            };
            let slot = &mut slots[at];
            match (resp::parse(line), slot.state) {
                (RespReply::Ok, State::Acquiring { cycle_start }) => {
                    resp::release(&mut conn.out, &shared.sha, &slot.key, slot.value);
                    pending.push_back(at);
                    slot.state = State::Releasing { cycle_start };
                    if measuring {
                        stats.responses += 1;
                    }
                }
                (RespReply::Int(1), State::Releasing { cycle_start }) => {
                    if measuring {
                        stats.responses += 1;
                        stats.cycles += 1;
                        stats.latency.record(now - cycle_start);
                    }
                    if window.running(now) {
                        slot.value = shared.value();
                        resp::set_nx(&mut conn.out, &slot.key, slot.value, lease_ms);
                        pending.push_back(at);
                        slot.state = State::Acquiring { cycle_start: now };
                    } else {
                        slot.state = State::Done;
                        in_flight -= 1;
                    }
                }
                (RespReply::Nil, State::Acquiring { .. }) => {
                    return Err(BenchError::protocol(
                        conn.id,
                        "SET NX of a key nobody else uses failed",
                        line,
                    ))
                }
                _ => {
                    return Err(BenchError::protocol(
                        conn.id,
                        "reply does not answer the request in flight",
                        line,
                    ))
                }
            }
        }
        conn.flush(window.give_up_at, window.drain).await?;
    }
    Ok(stats)
}

/// One connection of many spinning on `key`: SET NX until it takes, then
/// release at once, until the window stops.
pub async fn contended(
    mut conn: Conn,
    key: Arc<[u8]>,
    lease_ms: u64,
    shared: Shared,
    referee: Arc<Referee>,
    window: Window,
) -> Result<Stats, BenchError> {
    let mut value = shared.value();
    resp::set_nx(&mut conn.out, &key, value, lease_ms);
    conn.flush(window.give_up_at, window.drain).await?;
    let mut releasing = false;
    let mut stats = Stats::default();
    loop {
        conn.fill(window.give_up_at, window.drain).await?;
        let now = Instant::now();
        let measuring = window.measures(now);
        let mut done = false;
        while let Some(line) = conn.lines.next_line() {
            match (resp::parse(line), releasing) {
                (RespReply::Ok, false) => {
                    let handoff = referee.granted(conn.id, value, now)?;
                    if measuring {
                        stats.cycles += 1;
                        stats.responses += 1;
                        if let Some(handoff) = handoff {
                            stats.latency.record(handoff);
                        }
                    }
                    referee.releasing(conn.id, value, Instant::now());
                    resp::release(&mut conn.out, &shared.sha, &key, value);
                    releasing = true;
                }
                (RespReply::Nil, false) | (RespReply::Int(1), true) => {
                    if measuring {
                        stats.responses += 1;
                    }
                    if window.running(now) {
                        value = shared.value();
                        resp::set_nx(&mut conn.out, &key, value, lease_ms);
                        releasing = false;
                    } else {
                        done = true;
                    }
                }
                _ => {
                    return Err(BenchError::protocol(
                        conn.id,
                        "reply does not answer the request in flight",
                        line,
                    ))
                }
            }
        }
        if done {
            return Ok(stats);
        }
        conn.flush(window.give_up_at, window.drain).await?;
    }
}
