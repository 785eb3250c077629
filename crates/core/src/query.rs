//! What `Q <key>` and `W <key>` report about one key: its live grants, the
//! acquires queued on it, and its state tag, as the serving node sees them
//! at one moment.

use crate::holder_value::HolderValue;
use crate::lock_mode::LockMode;
use crate::state_tag::StateTag;
use crate::table::LockTable;
use crate::{Key, Millis, Token};

/// Most holders one answer lists (the count says how many there are):
/// sixteen holders with the longest values fit a response line.
pub const MAX_LISTED_HOLDERS: usize = 16;

/// The live grant of a key (for a key of several holders, the newest).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LiveGrant {
    pub token: Token,
    /// Milliseconds until its lease ends (more than 0).
    pub lease_left_ms: Millis,
}

/// One live holder of a key that is not plain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HolderState {
    pub token: Token,
    /// Milliseconds until its lease ends (more than 0).
    pub lease_left_ms: Millis,
    pub value: Option<HolderValue>,
}

/// What a key that is not plain (more than one holder, shared, several
/// permits, or a value) reports beyond the plain fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyDetail {
    pub permits: u32,
    pub mode: LockMode,
    /// How many live holders the key has (at least 1).
    pub holder_count: u64,
    /// The oldest holders, at most [`MAX_LISTED_HOLDERS`], oldest first.
    pub holders: Vec<HolderState>,
    /// The tag of all the holders, listed or not.
    pub tag: StateTag,
}

/// One key's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyState {
    /// `None` while the key is free; the newest holder otherwise.
    pub grant: Option<LiveGrant>,
    /// Acquires queued on the key.
    pub waiters: u64,
    /// `None` for a plain key: at most one exclusive holder, one permit,
    /// no value (what protocol 1.1 could already say).
    pub detail: Option<Box<KeyDetail>>,
}

impl KeyState {
    /// A plain key's state.
    pub fn plain(grant: Option<LiveGrant>, waiters: u64) -> KeyState {
        KeyState {
            grant,
            waiters,
            detail: None,
        }
    }

    /// The key's state tag.
    pub fn tag(&self) -> StateTag {
        match (&self.detail, &self.grant) {
            (Some(detail), _) => detail.tag,
            (None, Some(grant)) => StateTag::Plain(grant.token),
            (None, None) => StateTag::Free,
        }
    }

    /// The state of `key` in `table` at `now`, with `waiters` queued. A
    /// grant whose lease ended at or before `now` is not live (its expiry
    /// may not have been applied yet): it is left out.
    pub fn of(table: &LockTable, key: &Key, waiters: usize, now: Millis) -> KeyState {
        let waiters = waiters as u64;
        let Some(grants) = table.grants(key) else {
            return KeyState::plain(None, waiters);
        };
        let live = || grants.holders().iter().filter(|h| h.expires_at > now);
        let grant = live().next_back().map(|h| LiveGrant {
            token: h.token,
            lease_left_ms: h.expires_at - now,
        });
        let tagged = live().map(|h| (h.token, grants.mode(), table.value(h.token)));
        let tag = StateTag::of(grants.permits(), tagged);
        let plain = grants.permits() == 1
            && grants.mode() == LockMode::Exclusive
            && matches!(tag, StateTag::Free | StateTag::Plain(_));
        if plain {
            return KeyState::plain(grant, waiters);
        }
        let holders = live()
            .take(MAX_LISTED_HOLDERS)
            .map(|h| HolderState {
                token: h.token,
                lease_left_ms: h.expires_at - now,
                value: table.value(h.token).cloned(),
            })
            .collect();
        let detail = KeyDetail {
            permits: grants.permits(),
            mode: grants.mode(),
            holder_count: live().count() as u64,
            holders,
            tag,
        };
        if detail.holder_count == 0 {
            return KeyState::plain(None, waiters);
        }
        KeyState {
            grant,
            waiters,
            detail: Some(Box::new(detail)),
        }
    }
}
