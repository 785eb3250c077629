//! Baton's lines behind the protocol trait: acquires written ahead once per
//! slot, every burst of requests sent in one write, and responses matched
//! to their slot by key (docs/protocol.md: a response answers the oldest request
//! of its op and key, and a slot has one request in flight).

use std::collections::HashMap;

use crate::conn::Conn;
use crate::error::BenchError;
use crate::protocol::{Answer, Cycle, LockClient};
use crate::window::Window;
use crate::wire::{self, Reply};

/// One driver connection to a Baton node (or the echo ceiling).
#[derive(Debug)]
pub struct BatonClient {
    conn: Conn,
    keys: Vec<Vec<u8>>,
    /// `A <key> <wait> <lease>\n` of each slot, written once.
    acquires: Vec<Vec<u8>>,
    index: HashMap<Vec<u8>, usize>,
}

impl BatonClient {
    /// A client whose slot `i` cycles on `keys[i]`; the keys are distinct.
    pub fn new(conn: Conn, keys: Vec<Vec<u8>>, cycle: Cycle) -> Self {
        let index: HashMap<Vec<u8>, usize> = keys
            .iter()
            .enumerate()
            .map(|(slot, key)| (key.clone(), slot))
            .collect();
        debug_assert_eq!(index.len(), keys.len(), "a client's keys are distinct");
        let acquires = keys
            .iter()
            .map(|key| {
                let mut line = Vec::with_capacity(key.len() + 24);
                wire::acquire(&mut line, key, cycle.wait_ms, cycle.lease_ms);
                line
            })
            .collect();
        Self {
            conn,
            keys,
            acquires,
            index,
        }
    }
}

impl LockClient for BatonClient {
    type Held = u64;

    fn id(&self) -> usize {
        self.conn.id
    }

    fn keys(&self) -> &[Vec<u8>] {
        &self.keys
    }

    fn acquire(&mut self, slot: usize) {
        self.conn.out.extend_from_slice(&self.acquires[slot]);
    }

    fn release(&mut self, slot: usize, token: u64) {
        wire::release(&mut self.conn.out, &self.keys[slot], token);
    }

    async fn answers(
        &mut self,
        window: &Window,
        out: &mut Vec<(usize, Answer<u64>)>,
    ) -> Result<(), BenchError> {
        let index = &self.index;
        self.conn
            .read_answers(window, out, |line| {
                let (key, answer) = match wire::parse_reply(line) {
                    Reply::Granted { key, token } => (key, Answer::Granted { token, held: token }),
                    Reply::Released { key } => (key, Answer::Released),
                    Reply::TimedOut { key } => (key, Answer::NotGranted),
                    Reply::Other => return Err("unexpected response"),
                };
                match index.get(key) {
                    Some(&slot) => Ok((slot, answer)),
                    None => Err("response for a key this connection did not use"),
                }
            })
            .await
    }
}
