//! At most one acquire and one watch of a key in flight on a connection
//! (docs/protocol.md, "Pipelining and matching"): a node may answer a later
//! `A` or `W` of a key (its `T`, an `E` given at once, a watch whose tag
//! differs) before an older one of the key that still waits, and nothing in
//! the answers tells them apart. A further acquire or watch of a key that
//! has one in flight waits here, first come first served, and goes out with
//! what is left of its wait once the node answered the one in flight.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use baton_core::Key;
use baton_proto::{Op, Request};
use tokio::time::Instant;

use crate::connection::{match_key, Call, MatchKey, Unsent};
use crate::duration::ceil_ms;

/// A call kept back, and when its wait runs out (`None`: a wait of 0, the
/// node's maximum, which only the node counts).
#[derive(Debug)]
struct Held {
    call: Call,
    deadline: Option<Instant>,
}

/// The keys of one connection with an acquire or a watch in flight, each
/// with the calls of the same op and key waiting behind it.
#[derive(Debug, Default)]
pub(crate) struct OneInFlight {
    lines: HashMap<MatchKey, VecDeque<Held>>,
    /// Calls waiting in every line, for a cheap "none".
    held: usize,
}

impl OneInFlight {
    /// `call` to write now, or `None` when it was kept: an acquire or a
    /// watch of a key with one of its op in flight.
    pub(crate) fn admit(&mut self, call: Call, now: Instant) -> Option<Call> {
        let Some((key, wait_ms)) = waiting_request(&call.req) else {
            return Some(call);
        };
        let key = match_key(call.req.op(), Some(key.as_bytes()));
        match self.lines.get_mut(&key) {
            None => {
                self.lines.insert(key, VecDeque::new());
                Some(call)
            }
            Some(line) => {
                let deadline = (wait_ms > 0).then(|| now + Duration::from_millis(wait_ms));
                line.push_back(Held { call, deadline });
                self.held += 1;
                None
            }
        }
    }

    /// The node answered the acquire or watch of `key` in flight: the next
    /// call of that op and key to write, with what is left of its wait, if
    /// one still waits. Calls given up on the way leave the line; those
    /// whose wait ran out end unsent.
    pub(crate) fn answered(&mut self, key: &MatchKey, now: Instant) -> Option<Call> {
        let line = self.lines.get_mut(key)?;
        while let Some(held) = line.pop_front() {
            self.held -= 1;
            if let Some(call) = held.ready(now) {
                return Some(call);
            }
        }
        self.lines.remove(key);
        None
    }

    /// Ends the kept calls whose wait has run out by `now`, unsent, and
    /// drops those their callers gave up.
    pub(crate) fn expire(&mut self, now: Instant) {
        if self.held == 0 {
            return;
        }
        for line in self.lines.values_mut() {
            let kept = std::mem::take(line);
            for held in kept {
                if held.call.reply.is_closed() {
                    continue;
                }
                if held.deadline.is_some_and(|deadline| deadline <= now) {
                    let _ = held.call.reply.send(Err(Unsent));
                    continue;
                }
                line.push_back(held);
            }
        }
        self.held = self.lines.values().map(VecDeque::len).sum();
    }

    /// When the next kept call's wait runs out, if one has a limit.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        if self.held == 0 {
            return None;
        }
        let deadlines = self.lines.values().flatten();
        deadlines.filter_map(|held| held.deadline).min()
    }
}

impl Held {
    /// The call to send now, its wait cut to what is left; `None` when its
    /// caller gave it up or its wait ran out (it is then told so).
    fn ready(mut self, now: Instant) -> Option<Call> {
        if self.call.reply.is_closed() {
            return None;
        }
        let Some(deadline) = self.deadline else {
            return Some(self.call);
        };
        match deadline.checked_duration_since(now) {
            Some(left) if !left.is_zero() => {
                set_wait(&mut self.call.req, ceil_ms(left));
                Some(self.call)
            }
            _ => {
                let _ = self.call.reply.send(Err(Unsent));
                None
            }
        }
    }
}

/// The key and wait of an acquire or a watch, the requests a node may
/// answer out of order.
fn waiting_request(req: &Request) -> Option<(&Key, u64)> {
    match req {
        Request::Acquire { key, wait_ms, .. } | Request::Watch { key, wait_ms, .. } => {
            Some((key, *wait_ms))
        }
        _ => None,
    }
}

fn set_wait(req: &mut Request, left_ms: u64) {
    if let Request::Acquire { wait_ms, .. } | Request::Watch { wait_ms, .. } = req {
        *wait_ms = left_ms;
    }
}

/// Whether answers of `op` free a key's line: those of acquires and watches.
pub(crate) fn is_waiting_op(op: Op) -> bool {
    matches!(op, Op::Acquire | Op::Watch)
}

#[cfg(test)]
mod tests;
