//! The replicated lock table: who holds which key, with which token, until when.
//!
//! Every change arrives as a [`Command`] applied at a caller-given time, so
//! replicas that apply the same commands in the same order at the same times
//! end up in the same state. Leases never lapse on their own: a lease that has
//! run out stays in the table until an [`Command::Expire`] removes it, which
//! keeps the decision of *when* to expire in one place (the serving node) and
//! out of every replica's clock.

use std::collections::BTreeMap;

use crate::invariant::{debug_check, ensure, Broken, FULL_CHECK_UP_TO};
use crate::FastMap;

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

/// The lock table, with an index of leases by end time.
#[derive(Clone, Debug, Default)]
pub struct LockTable {
    locks: FastMap<Key, Holder>,
    /// Tokens are unique among live grants, so `(expires_at, token)` is a
    /// unique, time-ordered name for each grant; the value leads back to it.
    expiries: BTreeMap<(Millis, Token), Key>,
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
    /// The expiry index is derived from `locks`, so it is left out.
    fn eq(&self, other: &Self) -> bool {
        self.last_token == other.last_token && self.locks == other.locks
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
        if self.locks.contains_key(key) || self.last_token == Token::MAX {
            return Outcome::GrantRejected;
        }
        let token = self.last_token + 1;
        let expires_at = now.saturating_add(lease_ms);
        self.last_token = token;
        self.locks.insert(key.clone(), Holder { token, expires_at });
        self.expiries.insert((expires_at, token), key.clone());
        Outcome::Granted { token }
    }

    fn renew(&mut self, key: &Key, token: Token, lease_ms: u64, now: Millis) -> Outcome {
        let Some(holder) = self.locks.get_mut(key) else {
            return Outcome::NotFound;
        };
        if holder.token != token {
            return Outcome::NotFound;
        }
        let old = (holder.expires_at, token);
        holder.expires_at = now.saturating_add(lease_ms);
        let new = (holder.expires_at, token);
        // Reuse the index's own copy of the key rather than taking another.
        let indexed = self.expiries.remove(&old).unwrap_or_else(|| key.clone());
        self.expiries.insert(new, indexed);
        Outcome::Renewed
    }

    /// Removes the grant of `key` if it carries `token`; says whether it did.
    fn remove_if_token(&mut self, key: &Key, token: Token) -> bool {
        match self.locks.get(key) {
            Some(holder) if holder.token == token => {
                let at = (holder.expires_at, token);
                self.locks.remove(key);
                self.expiries.remove(&at);
                true
            }
            _ => false,
        }
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
        self.locks.get(key)
    }

    /// Number of keys held.
    pub fn len(&self) -> usize {
        self.locks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.locks.is_empty()
    }

    /// Every grant, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&Key, &Holder)> {
        self.locks.iter()
    }

    /// The lease that ends first, so the caller arms ONE timer: (expires_at, key, token).
    pub fn next_expiry(&self) -> Option<(Millis, &Key, Token)> {
        self.expiries
            .first_key_value()
            .map(|(&(at, token), key)| (at, key, token))
    }

    /// Leases with expires_at <= now, earliest first (the caller turns them into Expire commands).
    pub fn due_expiries(&self, now: Millis) -> impl Iterator<Item = (&Key, Token)> + '_ {
        self.expiries
            .range(..=(now, Token::MAX))
            .map(|(&(_, token), key)| (key, token))
    }

    /// A self-contained copy for replication/snapshots: last_token and every
    /// holder with its REMAINING lease at `now` (so a receiver with another
    /// clock epoch rebuilds it with `restore(snap, its_now)`). A lease already
    /// run out has 0 remaining: it stays held until expired, as here, but
    /// after a restore such leases are all due at the same moment.
    pub fn snapshot(&self, now: Millis) -> TableSnapshot {
        let locks = self
            .expiries
            .iter()
            .map(|(&(at, token), key)| SnapshotLock {
                key: key.clone(),
                token,
                remaining_ms: at.saturating_sub(now),
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
        for lock in &snapshot.locks {
            table.raise_token_floor(lock.token);
            let at = (now.saturating_add(lock.remaining_ms), lock.token);
            if let Some(previous) = table.locks.get(&lock.key) {
                let previous_at = (previous.expires_at, previous.token);
                table.expiries.remove(&previous_at);
                table.locks.remove(&lock.key);
            }
            if table.expiries.contains_key(&at) {
                continue;
            }
            table.locks.insert(
                lock.key.clone(),
                Holder {
                    token: lock.token,
                    expires_at: at.0,
                },
            );
            table.expiries.insert(at, lock.key.clone());
        }
        table.debug_validate();
        table
    }

    /// Checks the table's invariants: the expiry index names exactly the
    /// grants held, and the token floor covers every token (a fresh grant
    /// must exceed them all).
    pub fn validate(&self) -> Result<(), Broken> {
        ensure(self.expiries.len() == self.locks.len(), || {
            format!(
                "{} leases indexed for {} grants",
                self.expiries.len(),
                self.locks.len()
            )
        })?;
        for (&(at, token), key) in &self.expiries {
            let holder = self.locks.get(key);
            ensure(
                holder.is_some_and(|h| h.expires_at == at && h.token == token),
                || format!("lease ({at}, {token}) of {key:?} indexed, held as {holder:?}"),
            )?;
        }
        for (key, holder) in &self.locks {
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
        debug_check(self.locks.len() <= FULL_CHECK_UP_TO, || self.validate());
        debug_assert_eq!(self.expiries.len(), self.locks.len());
    }
}

#[cfg(test)]
#[path = "table_tests.rs"]
mod tests;
