//! The replicated lock table: who holds which key, with which token, until
//! when, in which mode, with which value. A key may have several grants:
//! up to its permits (a semaphore), or any number of shared grants.
//!
//! Every change arrives as a [`Command`] applied at a caller-given time, so
//! replicas that apply the same commands in the same order at the same times
//! end up in the same state. Leases never lapse on their own: a lease that has
//! run out stays in the table until an [`Command::Expire`] removes it, which
//! keeps the decision of *when* to expire in one place (the serving node) and
//! out of every replica's clock.

use crate::grants::Grants;
pub use crate::grants::KeyGrants;
use crate::invariant::{debug_check, ensure, Broken, FULL_CHECK_UP_TO};

use serde::{Deserialize, Serialize};

use crate::holder_value::{HolderValue, MAX_VALUE_LEN};
use crate::lock_mode::{AcquireOptions, LockMode};
use crate::{FastMap, Key, Millis, Token};

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
    /// Grants `key` as `options` ask (a permit of a semaphore, a shared
    /// grant, a value) with a fresh token, if the key has room for it.
    /// Later in the enum than the 1.1 commands, so that what 1.1 nodes
    /// wrote still decodes.
    GrantWith {
        key: Key,
        lease_ms: u64,
        options: AcquireOptions,
    },
    /// Sets (`None`: clears) the value of `key`'s grant with this token.
    SetValue {
        key: Key,
        token: Token,
        value: Option<HolderValue>,
    },
}

/// The longest postcard encoding of one [`Command`]: `GrantWith`'s
/// variant, key (a 2-byte length and the bytes), lease (a u64 varint of
/// at most 10 bytes), permits (a u32 varint of at most 5), mode, the
/// value's presence and the value (a 1-byte length and the bytes). The
/// cluster engines size their messages and frames from it.
pub const MAX_ENCODED_COMMAND: usize =
    1 + (2 + crate::key::MAX_KEY_LEN) + 10 + 5 + 1 + 1 + (1 + MAX_VALUE_LEN);

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
                key: key.clone(),
                token: u64::MAX,
            },
            Command::RaiseTokenFloor { floor: u64::MAX },
            Command::GrantWith {
                key: key.clone(),
                lease_ms: u64::MAX,
                options: AcquireOptions {
                    permits: crate::MAX_PERMITS,
                    mode: LockMode::Exclusive,
                    value: Some(HolderValue::widest()),
                },
            },
            Command::SetValue {
                key,
                token: u64::MAX,
                value: Some(HolderValue::widest()),
            },
        ]
    }
}

impl Command {
    /// The key the command is about (none for a token floor).
    pub fn key(&self) -> Option<&Key> {
        match self {
            Command::Grant { key, .. }
            | Command::GrantWith { key, .. }
            | Command::Release { key, .. }
            | Command::Renew { key, .. }
            | Command::Expire { key, .. }
            | Command::SetValue { key, .. } => Some(key),
            Command::RaiseTokenFloor { .. } => None,
        }
    }
}

/// What applying a [`Command`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    Granted {
        token: Token,
    },
    /// The key has no room for the grant (or, in the unreachable case of
    /// an exhausted token space, no fresh token is left).
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
    /// A grant's value was set or cleared.
    ValueSet,
}

/// One grant of a key: its token and when its lease ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    pub token: Token,
    pub expires_at: Millis,
}

/// The lock table: the grants with an index of their leases by end time
/// (kept compact: see `grants.rs`), the grants' values by token (tokens
/// are unique, and few grants have a value), and the last token.
#[derive(Clone, Debug, Default)]
pub struct LockTable {
    grants: Grants,
    values: FastMap<Token, HolderValue>,
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

/// One grant in a [`TableSnapshot`]. A key of several grants appears
/// once for each, with the same permits and mode.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotLock {
    pub key: Key,
    pub token: Token,
    pub remaining_ms: u64,
    pub permits: u32,
    pub mode: LockMode,
    pub value: Option<HolderValue>,
}

impl SnapshotLock {
    /// A plain grant (one permit, exclusive, no value), as 1.1 knew them.
    pub fn plain(key: Key, token: Token, remaining_ms: u64) -> SnapshotLock {
        SnapshotLock {
            key,
            token,
            remaining_ms,
            permits: 1,
            mode: LockMode::Exclusive,
            value: None,
        }
    }

    /// The options a grant like this one is made with.
    fn options(&self) -> AcquireOptions {
        AcquireOptions {
            permits: self.permits,
            mode: self.mode,
            value: self.value.clone(),
        }
    }
}

/// The bytes that start every encoding of a [`TableSnapshot`] (or of a
/// state that holds one) written since protocol 1.2, so that what older
/// nodes wrote (a [`LegacyTableSnapshot`] first) is still told apart and
/// read: no older encoding can start so, as eleven 0xFF bytes are not a
/// LEB128 varint of 64 bits.
pub const TABLE_FORMAT_2: [u8; 11] = [0xff; 11];

/// A [`TableSnapshot`] as nodes before protocol 1.2 encoded it (every
/// grant plain): what an upgraded node reads from its old data.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LegacyTableSnapshot {
    pub last_token: Token,
    pub locks: Vec<LegacySnapshotLock>,
}

/// One grant of a [`LegacyTableSnapshot`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LegacySnapshotLock {
    pub key: Key,
    pub token: Token,
    pub remaining_ms: u64,
}

impl From<LegacyTableSnapshot> for TableSnapshot {
    fn from(old: LegacyTableSnapshot) -> TableSnapshot {
        TableSnapshot {
            last_token: old.last_token,
            locks: old
                .locks
                .into_iter()
                .map(|l| SnapshotLock::plain(l.key, l.token, l.remaining_ms))
                .collect(),
        }
    }
}

impl PartialEq for LockTable {
    /// The same last token and the same grants of every key, with the
    /// same values (the storage's layout is left out).
    fn eq(&self, other: &Self) -> bool {
        self.last_token == other.last_token
            && self.grants.len() == other.grants.len()
            && self.values == other.values
            && self.grants.iter().all(|(key, ours)| {
                other.grants.get(key).is_some_and(|theirs| {
                    theirs.permits() == ours.permits()
                        && theirs.mode() == ours.mode()
                        && theirs.holders() == ours.holders()
                })
            })
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
            Command::Grant { key, lease_ms } => {
                self.grant(key, *lease_ms, &AcquireOptions::default(), now)
            }
            Command::GrantWith {
                key,
                lease_ms,
                options,
            } => self.grant(key, *lease_ms, options, now),
            Command::SetValue { key, token, value } => self.set_value(key, *token, value),
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

    /// Whether `key` has room for a grant made with `options`: a key not
    /// held has; a held one if the permits agree and, for an exclusive
    /// grant, it is exclusive with a permit free, for a shared one, shared.
    pub fn has_room(&self, key: &Key, options: &AcquireOptions) -> bool {
        self.grants
            .get(key)
            .is_none_or(|held| has_room(held.permits(), held.mode(), held.len(), options))
    }

    fn grant(
        &mut self,
        key: &Key,
        lease_ms: u64,
        options: &AcquireOptions,
        now: Millis,
    ) -> Outcome {
        // A token equal to the last one would break both fencing and the
        // uniqueness the expiry index relies on, so an exhausted token space
        // (reachable only through an absurd floor) refuses instead.
        if !options.is_valid() || !self.has_room(key, options) || self.last_token == Token::MAX {
            return Outcome::GrantRejected;
        }
        let token = self.last_token + 1;
        let expires_at = now.saturating_add(lease_ms);
        self.last_token = token;
        let holder = Holder { token, expires_at };
        self.grants
            .insert(key.clone(), options.permits, options.mode, holder);
        if let Some(value) = &options.value {
            self.values.insert(token, value.clone());
        }
        Outcome::Granted { token }
    }

    fn set_value(&mut self, key: &Key, token: Token, value: &Option<HolderValue>) -> Outcome {
        if self.grant_of(key, token).is_none() {
            return Outcome::NotFound;
        }
        match value {
            Some(value) => self.values.insert(token, value.clone()),
            None => self.values.remove(&token),
        };
        Outcome::ValueSet
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

    /// Removes the grant of `key` with `token`; says whether it did.
    fn remove_if_token(&mut self, key: &Key, token: Token) -> bool {
        let removed = self.grants.remove(key, token).is_some();
        if removed {
            self.values.remove(&token);
        }
        removed
    }

    /// `last_token = max(last_token, floor)`.
    pub fn raise_token_floor(&mut self, floor: Token) {
        self.last_token = self.last_token.max(floor);
    }

    /// The last token issued or raised to; 0 before any.
    pub fn last_token(&self) -> Token {
        self.last_token
    }

    /// The oldest grant of `key` (its only one, for a plain key).
    pub fn holder(&self, key: &Key) -> Option<&Holder> {
        self.grants.get(key).map(|g| &g.holders()[0])
    }

    /// Every grant of `key`, with its permits and mode.
    pub fn grants(&self, key: &Key) -> Option<&KeyGrants> {
        self.grants.get(key)
    }

    /// The grant of `key` with `token`, if it holds the key.
    pub fn grant_of(&self, key: &Key, token: Token) -> Option<&Holder> {
        self.grants.get(key)?.holder(token)
    }

    /// The value of the grant with `token`, if it has one.
    pub fn value(&self, token: Token) -> Option<&HolderValue> {
        self.values.get(&token)
    }

    /// Number of grants held, over every key: what `--max-locks` caps.
    pub fn len(&self) -> usize {
        self.grants.len()
    }

    /// Number of keys held.
    pub fn key_count(&self) -> usize {
        self.grants.key_count()
    }

    pub fn is_empty(&self) -> bool {
        self.grants.len() == 0
    }

    /// Every grant, in no particular order (a key of several grants
    /// comes once for each).
    pub fn iter(&self) -> impl Iterator<Item = (&Key, &Holder)> {
        self.grants
            .iter()
            .flat_map(|(key, grants)| grants.holders().iter().map(move |h| (key, h)))
    }

    /// Every held key with its grants, in no particular order.
    pub fn keys(&self) -> impl Iterator<Item = (&Key, &KeyGrants)> {
        self.grants.iter()
    }

    /// The lease that ends first, so the caller arms ONE timer: (expires_at, key, token).
    pub fn next_expiry(&self) -> Option<(Millis, &Key, Token)> {
        self.grants
            .first()
            .map(|(key, holder)| (holder.expires_at, key, holder.token))
    }

    /// Grants with expires_at <= now, earliest first (the caller turns them
    /// into Expire commands); lazily, so taking a few costs little.
    pub fn due_expiries(&self, now: Millis) -> impl Iterator<Item = (&Key, Token)> + '_ {
        self.grants
            .every_by_lease_end()
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
            .map(|(key, grants, holder)| SnapshotLock {
                key: key.clone(),
                token: holder.token,
                remaining_ms: holder.expires_at.saturating_sub(now),
                permits: grants.permits(),
                mode: grants.mode(),
                value: self.values.get(&holder.token).cloned(),
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
    /// stay above all of them), a token listed twice keeps its first grant
    /// (the expiry index tells grants apart by token), and a grant the key
    /// has no room for (permits or mode that disagree with the key's
    /// earlier grants, or options that do not hold together) is dropped.
    pub fn restore(snapshot: &TableSnapshot, now: Millis) -> LockTable {
        let mut table = LockTable::new();
        table.raise_token_floor(snapshot.last_token);
        let mut tokens: crate::FastSet<Token> = crate::FastSet::default();
        for lock in &snapshot.locks {
            table.raise_token_floor(lock.token);
            let options = lock.options();
            if !options.is_valid() || !table.has_room(&lock.key, &options) {
                continue;
            }
            if !tokens.insert(lock.token) {
                continue;
            }
            let holder = Holder {
                token: lock.token,
                expires_at: now.saturating_add(lock.remaining_ms),
            };
            table
                .grants
                .insert(lock.key.clone(), lock.permits, lock.mode, holder);
            if let Some(value) = &lock.value {
                table.values.insert(lock.token, value.clone());
            }
        }
        table.debug_validate();
        table
    }

    /// Checks the table's invariants: the storage's index and lease heap
    /// name exactly the grants held; no key has more grants than permits
    /// unless they are shared (and a shared key has one permit); the token
    /// floor covers every token (a fresh grant must exceed them all); and
    /// every value belongs to a grant held.
    pub fn validate(&self) -> Result<(), Broken> {
        let storage = self.grants.check();
        ensure(storage.is_ok(), || {
            storage.clone().err().unwrap_or_default()
        })?;
        let mut valued = 0;
        for (key, grants) in self.grants.iter() {
            let count = grants.len();
            ensure(
                match grants.mode() {
                    LockMode::Exclusive => count <= grants.permits() as usize,
                    LockMode::Shared => grants.permits() == 1,
                },
                || {
                    format!(
                        "{key:?} has {count} {:?} grants of {} permits",
                        grants.mode(),
                        grants.permits()
                    )
                },
            )?;
            for holder in grants.holders() {
                ensure(holder.token <= self.last_token, || {
                    format!(
                        "{key:?} holds token {} above the floor {}",
                        holder.token, self.last_token
                    )
                })?;
                valued += usize::from(self.values.contains_key(&holder.token));
            }
        }
        ensure(valued == self.values.len(), || {
            format!("{} values, {valued} of grants held", self.values.len())
        })
    }

    /// The debug build's check after a change (see [`FULL_CHECK_UP_TO`]).
    /// Whether [`LockTable::validate`] is cheap enough to run after every
    /// change in debug builds. Its walk covers every slot, empty ones too,
    /// so the bound is on the slots: a table emptied from a large one stays
    /// costly to walk.
    pub fn small(&self) -> bool {
        self.grants.slots() <= FULL_CHECK_UP_TO
    }

    fn debug_validate(&self) {
        debug_check(self.small(), || self.validate());
    }
}

/// Whether a key of `permits` permits held by `count` grants in `mode`
/// has room for a grant made with `options`.
pub(crate) fn has_room(
    permits: u32,
    mode: LockMode,
    count: usize,
    options: &AcquireOptions,
) -> bool {
    if count == 0 {
        return true;
    }
    permits == options.permits
        && match options.mode {
            LockMode::Shared => mode == LockMode::Shared,
            LockMode::Exclusive => mode == LockMode::Exclusive && count < permits as usize,
        }
}

#[cfg(test)]
#[path = "table_tests.rs"]
mod tests;
