//! The replicated lock table: who holds which key, with which token, until when.
//!
//! Every change arrives as a [`Command`] applied at a caller-given time, so
//! replicas that apply the same commands in the same order at the same times
//! end up in the same state. Leases never lapse on their own: a lease that has
//! run out stays in the table until an [`Command::Expire`] removes it, which
//! keeps the decision of *when* to expire in one place (the serving node) and
//! out of every replica's clock.

use crate::grants::Grants;
use crate::invariant::{debug_check, ensure, Broken, FULL_CHECK_UP_TO};

use serde::{Deserialize, Serialize};

use crate::{Key, Millis, Token};

/// One change to the lock table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// Grants a free key with a fresh token.
    Grant { key: Key, lease_ms: u64 },
    /// Ends the grant of `key` if it has this token.
    Release { key: Key, token: Token },
    /// Extends the grant of `key` to `lease_ms` from now if it has this token.
    Renew {
        key: Key,
        token: Token,
        lease_ms: u64,
    },
    /// Ends the grant of `key` because its lease ran out, if it has this token.
    Expire { key: Key, token: Token },
    /// Raises the token floor: later grants get tokens above `floor`. Used at failover.
    RaiseTokenFloor { floor: Token },
}

/// The longest postcard encoding of one [`Command`]: its variant, the
/// key (a 2-byte length and the bytes) and two u64 varints of at most 10
/// bytes (`Renew`'s token and lease, the widest command). The cluster
/// engines size their messages and frames from it.
pub const MAX_ENCODED_COMMAND: usize = 1 + (2 + crate::key::MAX_KEY_LEN) + 2 * 10;

impl Command {
    /// One command of each kind, each as wide as it can encode: what the
    /// size bounds built on [`MAX_ENCODED_COMMAND`] are tested against.
    pub fn widest() -> Vec<Command> {
        let key = Key::widest();
        vec![
            Command::Grant {
                key: key.clone(),
                lease_ms: u64::MAX,
            },
            Command::Release {
                key: key.clone(),
                token: u64::MAX,
            },
            Command::Renew {
                key: key.clone(),
                token: u64::MAX,
                lease_ms: u64::MAX,
            },
            Command::Expire {
                key,
                token: u64::MAX,
            },
            Command::RaiseTokenFloor { floor: u64::MAX },
        ]
    }
}

/// What applying a [`Command`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    Granted {
        token: Token,
    },
    /// The key is held (or, in the unreachable case of an exhausted token
    /// space, no fresh token is left).
    GrantRejected,
    Released,
    /// A release or renewal named no live grant.
    NotFound,
    Renewed,
    /// `existed` is false for a late or duplicated expiry, which changes nothing.
    Expired {
        existed: bool,
    },
    Noop,
}

/// The current grant of one key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    pub token: Token,
    pub expires_at: Millis,
}

/// The lock table: the grants with an index of their leases by end time
/// (kept compact: see `grants.rs`), and the last token.
#[derive(Clone, Debug, Default)]
pub struct LockTable {
    grants: Grants,
    last_token: Token,
}

/// A self-contained copy of a [`LockTable`] whose leases are counted from
/// the moment it was taken, not from a clock epoch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableSnapshot {
    pub last_token: Token,
    /// In the order the leases end (ties by token).
    pub locks: Vec<SnapshotLock>,
}

/// One grant in a [`TableSnapshot`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotLock {
    pub key: Key,
    pub token: Token,
    pub remaining_ms: u64,
}

impl PartialEq for LockTable {
    /// The same last token and the same holder of every key (the storage's
    /// layout is left out).
    fn eq(&self, other: &Self) -> bool {
        self.last_token == other.last_token
            && self.grants.len() == other.grants.len()
            && self
                .grants
                .iter()
                .all(|(key, holder)| other.grants.get(key) == Some(holder))
    }
}

impl Eq for LockTable {}

impl LockTable {
    pub fn new() -> Self {
        Self::default()
    }

    /// Applies one command at `now`. Deterministic: same commands, same order,
    /// same `now`s => same state and outcomes.
    pub fn apply(&mut self, cmd: &Command, now: Millis) -> Outcome {
        let outcome = self.apply_unchecked(cmd, now);
        self.debug_validate();
        outcome
    }

    fn apply_unchecked(&mut self, cmd: &Command, now: Millis) -> Outcome {
        match cmd {
            Command::Grant { key, lease_ms } => self.grant(key, *lease_ms, now),
            Command::Release { key, token } => {
                if self.remove_if_token(key, *token) {
                    Outcome::Released
                } else {
                    Outcome::NotFound
                }
            }
            Command::Renew {
                key,
                token,
                lease_ms,
            } => self.renew(key, *token, *lease_ms, now),
            Command::Expire { key, token } => Outcome::Expired {
                existed: self.remove_if_token(key, *token),
            },
            Command::RaiseTokenFloor { floor } => {
                self.raise_token_floor(*floor);
                Outcome::Noop
            }
        }
    }

    fn grant(&mut self, key: &Key, lease_ms: u64, now: Millis) -> Outcome {
        // A token equal to the last one would break both fencing and the
        // uniqueness the expiry index relies on, so an exhausted token space
        // (reachable only through an absurd floor) refuses instead.
        if self.grants.contains(key) || self.last_token == Token::MAX {
            return Outcome::GrantRejected;
        }
        let token = self.last_token + 1;
        let expires_at = now.saturating_add(lease_ms);
        self.last_token = token;
        self.grants
            .insert(key.clone(), Holder { token, expires_at });
        Outcome::Granted { token }
    }

    fn renew(&mut self, key: &Key, token: Token, lease_ms: u64, now: Millis) -> Outcome {
        if self
            .grants
            .set_lease_end(key, token, now.saturating_add(lease_ms))
        {
            Outcome::Renewed
        } else {
            Outcome::NotFound
        }
    }

    /// Removes the grant of `key` if it carries `token`; says whether it did.
    fn remove_if_token(&mut self, key: &Key, token: Token) -> bool {
        self.grants.remove_if(key, Some(token)).is_some()
    }

    /// `last_token = max(last_token, floor)`.
    pub fn raise_token_floor(&mut self, floor: Token) {
        self.last_token = self.last_token.max(floor);
    }

    /// The last token issued or raised to; 0 before any.
    pub fn last_token(&self) -> Token {
        self.last_token
    }

    pub fn holder(&self, key: &Key) -> Option<&Holder> {
        self.grants.get(key)
    }

    /// Number of keys held.
    pub fn len(&self) -> usize {
        self.grants.len()
    }

    pub fn is_empty(&self) -> bool {
        self.grants.len() == 0
    }

    /// Every grant, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&Key, &Holder)> {
        self.grants.iter()
    }

    /// The lease that ends first, so the caller arms ONE timer: (expires_at, key, token).
    pub fn next_expiry(&self) -> Option<(Millis, &Key, Token)> {
        self.grants
            .first()
            .map(|(key, holder)| (holder.expires_at, key, holder.token))
    }

    /// Leases with expires_at <= now, earliest first (the caller turns them
    /// into Expire commands); lazily, so taking a few costs little.
    pub fn due_expiries(&self, now: Millis) -> impl Iterator<Item = (&Key, Token)> + '_ {
        self.grants
            .by_lease_end()
            .take_while(move |(_, holder)| holder.expires_at <= now)
            .map(|(key, holder)| (key, holder.token))
    }

    /// A self-contained copy for replication/snapshots: last_token and every
    /// holder with its REMAINING lease at `now` (so a receiver with another
    /// clock epoch rebuilds it with `restore(snap, its_now)`). A lease already
    /// run out has 0 remaining: it stays held until expired, as here, but
    /// after a restore such leases are all due at the same moment.
    pub fn snapshot(&self, now: Millis) -> TableSnapshot {
        let locks = self
            .grants
            .sorted_by_lease_end()
            .into_iter()
            .map(|(key, holder)| SnapshotLock {
                key: key.clone(),
                token: holder.token,
                remaining_ms: holder.expires_at.saturating_sub(now),
            })
            .collect();
        TableSnapshot {
            last_token: self.last_token,
            locks,
        }
    }

    /// Rebuilds a table from a snapshot, counting remaining leases from `now`.
    ///
    /// A snapshot comes from a peer, so it is not trusted to be well formed:
    /// the token floor is raised to cover every token in it (fresh grants must
    /// stay above all of them), a key listed twice keeps its last entry, and
    /// a lock with both the end time and the token of one already kept is
    /// dropped, as the expiry index could not tell the two apart.
    pub fn restore(snapshot: &TableSnapshot, now: Millis) -> LockTable {
        let mut table = LockTable::new();
        table.raise_token_floor(snapshot.last_token);
        // The (end, token) of every lock kept, to drop a second one.
        let mut kept: crate::FastSet<(Millis, Token)> = crate::FastSet::default();
        for lock in &snapshot.locks {
            table.raise_token_floor(lock.token);
            let at = (now.saturating_add(lock.remaining_ms), lock.token);
            if let Some(previous) = table.grants.remove(&lock.key) {
                kept.remove(&(previous.expires_at, previous.token));
            }
            if !kept.insert(at) {
                continue;
            }
            let holder = Holder {
                token: lock.token,
                expires_at: at.0,
            };
            table.grants.insert(lock.key.clone(), holder);
        }
        table.debug_validate();
        table
    }

    /// Checks the table's invariants: the storage's index and lease heap
    /// name exactly the grants held, and the token floor covers every
    /// token (a fresh grant must exceed them all).
    pub fn validate(&self) -> Result<(), Broken> {
        let storage = self.grants.check();
        ensure(storage.is_ok(), || {
            storage.clone().err().unwrap_or_default()
        })?;
        for (key, holder) in self.grants.iter() {
            ensure(holder.token <= self.last_token, || {
                format!(
                    "{key:?} holds token {} above the floor {}",
                    holder.token, self.last_token
                )
            })?;
        }
        Ok(())
    }

    /// The debug build's check after a change (see [`FULL_CHECK_UP_TO`]).
    fn debug_validate(&self) {
        debug_check(self.grants.len() <= FULL_CHECK_UP_TO, || self.validate());
    }
}

#[cfg(test)]
#[path = "table_tests.rs"]
mod tests;
