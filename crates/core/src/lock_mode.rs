//! How a grant holds its key: alone (exclusive) or beside other shared
//! grants (readers-writer), and how many grants a key takes at once; and
//! an acquire's terms as one value, from the server down to the rules.

use serde::{Deserialize, Serialize};

use crate::Key;

/// The most permits a semaphore key may have: far more than any real pool
/// of workers, few enough that a key's holders stay a small list.
pub const MAX_PERMITS: u32 = 10_000;

/// A grant's mode. Shared grants of a key coexist; an exclusive grant
/// excludes every other grant of its key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum LockMode {
    #[default]
    Exclusive,
    Shared,
}

impl LockMode {
    /// The word the protocol writes for it.
    pub fn as_str(self) -> &'static str {
        match self {
            LockMode::Exclusive => "exclusive",
            LockMode::Shared => "shared",
        }
    }

    /// The mode a protocol word names.
    pub fn from_word(word: &[u8]) -> Option<LockMode> {
        match word {
            b"exclusive" => Some(LockMode::Exclusive),
            b"shared" => Some(LockMode::Shared),
            _ => None,
        }
    }
}

/// What an acquire asks for beyond a key, a wait and a lease: how many
/// grants the key may have at once, the grant's mode, and its value. The
/// default is a plain 1.1 acquire: one permit, exclusive, no value.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct AcquireOptions {
    /// 1 to [`MAX_PERMITS`]; 1 for a shared grant.
    pub permits: u32,
    pub mode: LockMode,
    /// The value attached to the grant.
    pub value: Option<crate::HolderValue>,
}

impl Default for AcquireOptions {
    fn default() -> Self {
        AcquireOptions {
            permits: 1,
            mode: LockMode::Exclusive,
            value: None,
        }
    }
}

impl AcquireOptions {
    /// A permit of a semaphore of `permits`: exclusive, no value.
    pub fn semaphore(permits: u32) -> AcquireOptions {
        AcquireOptions {
            permits,
            ..AcquireOptions::default()
        }
    }

    /// A shared grant (readers-writer): one permit, no value.
    pub fn shared() -> AcquireOptions {
        AcquireOptions {
            mode: LockMode::Shared,
            ..AcquireOptions::default()
        }
    }

    /// Whether these are a plain 1.1 acquire's.
    pub fn is_plain(&self) -> bool {
        self.permits == 1 && self.mode == LockMode::Exclusive && self.value.is_none()
    }

    /// Whether the options hold together: permits in range, shared only
    /// with one permit.
    pub fn is_valid(&self) -> bool {
        (1..=MAX_PERMITS).contains(&self.permits)
            && (self.mode == LockMode::Exclusive || self.permits == 1)
    }
}

/// An acquire's terms: the key, how long to wait for it, the lease and
/// the grant's options. One value from the node to the rules, whichever
/// engine serves it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Acquire {
    pub key: Key,
    /// 0 waits without limit.
    pub wait_ms: u64,
    pub lease_ms: u64,
    pub options: AcquireOptions,
}

impl Acquire {
    pub fn new(key: Key, wait_ms: u64, lease_ms: u64, options: AcquireOptions) -> Acquire {
        Acquire {
            key,
            wait_ms,
            lease_ms,
            options,
        }
    }

    /// A plain 1.1 acquire: one permit, exclusive, no value.
    pub fn plain(key: Key, wait_ms: u64, lease_ms: u64) -> Acquire {
        Acquire::new(key, wait_ms, lease_ms, AcquireOptions::default())
    }
}
