//! How a grant holds its key: alone (exclusive) or beside other shared
//! grants (readers-writer), and how many grants a key takes at once.

use serde::{Deserialize, Serialize};

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
