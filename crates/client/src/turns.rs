//! Which connection an acquire or a watch of a key goes out on. A
//! connection carries at most one of a key in flight (see
//! [`crate::one_in_flight`]): the call goes on a connection to its node
//! where none of its op and key is in flight, and when every one has one,
//! waits here for the first to be free, first come first served among the
//! client's own callers of that key and node.
//!
//! A [`Turn`] marks its key busy on its connection from the moment it is
//! taken until the node answered (it travels with the call's reply, so a
//! caller that gave up still counts until the answer comes, as on the
//! connection).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::watch;
use tokio::time::Instant;

use crate::connection::MatchKey;

/// A connection, as the turns know it.
pub(crate) type ConnId = u64;

/// Callers of one op and key on one node: they share the node's connections.
pub(crate) type LineKey = (String, MatchKey);

/// The busy keys of every connection and the callers waiting for one.
#[derive(Debug)]
pub(crate) struct Turns {
    state: Mutex<State>,
    /// Bumped whenever a turn ends or a caller leaves a line.
    changed: watch::Sender<u64>,
}

#[derive(Debug, Default)]
struct State {
    /// Calls out per connection and match key, not answered yet.
    out: HashMap<(ConnId, MatchKey), usize>,
    /// Callers waiting for a free connection, oldest first.
    lines: HashMap<LineKey, VecDeque<u64>>,
    next_ticket: u64,
}

/// Why no turn was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NoTurn {
    /// No connection to the node is usable: the call goes as before and
    /// fails over.
    NoConnection,
    /// The caller's wait ran out while it waited here: never sent.
    WaitRanOut,
}

/// A call's hold on its key on one connection, until the node answers it.
#[derive(Debug)]
pub(crate) struct Turn {
    turns: Arc<Turns>,
    pub(crate) conn: ConnId,
    key: MatchKey,
}

/// A caller's place in a line; leaving (a turn taken, the wait run out, the
/// caller gone) takes it out.
struct Place<'a> {
    turns: &'a Turns,
    line: &'a LineKey,
    ticket: Option<u64>,
}

impl Default for Turns {
    fn default() -> Turns {
        Turns {
            state: Mutex::default(),
            changed: watch::channel(0).0,
        }
    }
}

impl Turns {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn bump(&self) {
        self.changed
            .send_modify(|generation| *generation = generation.wrapping_add(1));
    }

    /// A turn for a call of `line` on one of `usable()` (the node's usable
    /// connections, the preferred first): at once if one is free and no
    /// earlier caller waits, else once one is free and the earlier callers
    /// had theirs. `others` wakes the wait when connections come and go.
    pub(crate) async fn take(
        self: &Arc<Self>,
        line: &LineKey,
        usable: impl Fn() -> Vec<ConnId>,
        others: &mut watch::Receiver<u64>,
        until: Option<Instant>,
    ) -> Result<Turn, NoTurn> {
        let mut changed = self.changed.subscribe();
        let mut place = Place {
            turns: self,
            line,
            ticket: None,
        };
        loop {
            let conns = usable();
            if conns.is_empty() {
                return Err(NoTurn::NoConnection);
            }
            if let Some(conn) = place.take_free(&conns) {
                return Ok(Turn {
                    turns: Arc::clone(self),
                    conn,
                    key: line.1.clone(),
                });
            }
            let woken = async {
                // A pool gone closes `others`: that branch is then off.
                tokio::select! {
                    Ok(()) = changed.changed() => {}
                    Ok(()) = others.changed() => {}
                }
            };
            match until {
                None => woken.await,
                Some(until) => {
                    if tokio::time::timeout_at(until, woken).await.is_err() {
                        return Err(NoTurn::WaitRanOut);
                    }
                }
            }
        }
    }
}

impl Place<'_> {
    /// The first of `conns` with none of the line's key out, marked busy,
    /// if this caller's turn has come; else it joins the line (once).
    fn take_free(&mut self, conns: &[ConnId]) -> Option<ConnId> {
        let mut state = self.turns.state();
        let head = state.lines.get(self.line).and_then(VecDeque::front);
        let first = head.is_none() || head == self.ticket.as_ref();
        let key = &self.line.1;
        let free = conns
            .iter()
            .find(|conn| !state.out.contains_key(&(**conn, key.clone())));
        match free.copied().filter(|_| first) {
            Some(conn) => {
                *state.out.entry((conn, key.clone())).or_default() += 1;
                Some(conn)
            }
            None => {
                if self.ticket.is_none() {
                    let ticket = state.next_ticket;
                    state.next_ticket += 1;
                    state
                        .lines
                        .entry(self.line.clone())
                        .or_default()
                        .push_back(ticket);
                    self.ticket = Some(ticket);
                }
                None
            }
        }
    }
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        let Some(ticket) = self.ticket else {
            return;
        };
        let mut state = self.turns.state();
        if let Some(waiting) = state.lines.get_mut(self.line) {
            waiting.retain(|t| *t != ticket);
            if waiting.is_empty() {
                state.lines.remove(self.line);
            }
        }
        drop(state);
        // The next caller may be first now.
        self.turns.bump();
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let mut state = self.turns.state();
        let out = (self.conn, self.key.clone());
        if let Some(count) = state.out.get_mut(&out) {
            *count -= 1;
            if *count == 0 {
                state.out.remove(&out);
            }
        }
        drop(state);
        self.turns.bump();
    }
}

#[cfg(test)]
mod tests;
