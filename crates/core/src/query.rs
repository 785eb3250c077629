//! What `Q <key>` reports about one key: its live grant, if any, and the
//! acquires queued on it, as the serving node sees them at one moment.

use crate::table::LockTable;
use crate::{Key, Millis, Token};

/// The live grant of a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LiveGrant {
    pub token: Token,
    /// Milliseconds until its lease ends (more than 0).
    pub lease_left_ms: Millis,
}

/// One key's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyState {
    /// `None` while the key is free.
    pub grant: Option<LiveGrant>,
    /// Acquires queued on the key.
    pub waiters: u64,
}

impl KeyState {
    /// The state of `key` in `table` at `now`, with `waiters` queued. A
    /// grant whose lease ended at or before `now` is not live (its expiry
    /// may not have been applied yet): the key shows free.
    pub fn of(table: &LockTable, key: &Key, waiters: usize, now: Millis) -> KeyState {
        let grant = table
            .holder(key)
            .filter(|h| h.expires_at > now)
            .map(|h| LiveGrant {
                token: h.token,
                lease_left_ms: h.expires_at - now,
            });
        KeyState {
            grant,
            waiters: waiters as u64,
        }
    }
}
