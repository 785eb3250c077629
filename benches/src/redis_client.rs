//! Redis behind the protocol trait: acquire is `SET key value NX PX lease`
//! with a value unique to the attempt, release the compare-and-delete
//! script by `EVALSHA`. Replies come back in request order, so a queue of
//! slots matches them. Redis has no wait queue: a taken key answers nil at
//! once, and contended clients spin (`SPINS`).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::conn::Conn;
use crate::error::BenchError;
use crate::protocol::{Answer, Cycle, LockClient};
use crate::resp::{self, RespReply};
use crate::window::Window;

/// What every connection of a run shares: the release script's SHA and
/// the source of unique lock values.
#[derive(Clone, Debug)]
pub struct Shared {
    pub sha: Arc<[u8]>,
    pub values: Arc<AtomicU64>,
}

impl Shared {
    /// For loads that never release (memory): no script needed.
    pub fn without_release() -> Self {
        Self {
            sha: Arc::from(&b""[..]),
            values: Arc::new(AtomicU64::new(0)),
        }
    }

    fn value(&self) -> u64 {
        self.values.fetch_add(1, Ordering::Relaxed) + 1
    }
}

/// Loads the release script once (`SCRIPT LOAD`) and returns what the
/// clients share.
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

/// One driver connection to Redis.
#[derive(Debug)]
pub struct RedisClient {
    conn: Conn,
    keys: Vec<Vec<u8>>,
    /// The value of each slot's last SET.
    values: Vec<u64>,
    /// Slots of the requests sent, oldest first: Redis answers in order.
    pending: VecDeque<usize>,
    lease_ms: u64,
    shared: Shared,
}

impl RedisClient {
    pub fn new(conn: Conn, keys: Vec<Vec<u8>>, cycle: Cycle, shared: Shared) -> Self {
        Self {
            conn,
            values: vec![0; keys.len()],
            pending: VecDeque::with_capacity(keys.len()),
            keys,
            lease_ms: cycle.lease_ms,
            shared,
        }
    }
}

impl LockClient for RedisClient {
    type Held = u64;
    const SPINS: bool = true;

    fn id(&self) -> usize {
        self.conn.id
    }

    fn keys(&self) -> &[Vec<u8>] {
        &self.keys
    }

    fn acquire(&mut self, slot: usize) {
        let value = self.shared.value();
        self.values[slot] = value;
        resp::set_nx(&mut self.conn.out, &self.keys[slot], value, self.lease_ms);
        self.pending.push_back(slot);
    }

    fn release(&mut self, slot: usize, value: u64) {
        resp::release(
            &mut self.conn.out,
            &self.shared.sha,
            &self.keys[slot],
            value,
        );
        self.pending.push_back(slot);
    }

    async fn answers(
        &mut self,
        window: &Window,
        out: &mut Vec<(usize, Answer<u64>)>,
    ) -> Result<(), BenchError> {
        let (pending, values) = (&mut self.pending, &self.values);
        self.conn
            .read_answers(window, out, |line| {
                let slot = pending.pop_front().ok_or("reply to no request")?;
                let answer = match resp::parse(line) {
                    RespReply::Ok => Answer::Granted {
                        token: values[slot],
                        held: values[slot],
                    },
                    RespReply::Nil => Answer::NotGranted,
                    RespReply::Int(1) => Answer::Released,
                    _ => return Err("reply does not answer the request in flight"),
                };
                Ok((slot, answer))
            })
            .await
    }
}
