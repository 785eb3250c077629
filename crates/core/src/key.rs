//! Lock keys: opaque byte strings with the limits the protocol sets.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::byte_string::{forbidden_byte, shown_byte_string};

/// The longest key the protocol allows, in bytes.
pub const MAX_KEY_LEN: usize = 250;

/// A lock key: 1 to [`MAX_KEY_LEN`] bytes, none a space, a control byte
/// (0x00-0x1F) or DEL (0x7F).
///
/// Cloning is cheap (a reference count), because the same key sits in the
/// lock table, its expiry index, wait queues and responses at once.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "Vec<u8>", into = "Vec<u8>")]
pub struct Key(Arc<[u8]>);

/// Why a byte string is not a valid key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("key is empty")]
    Empty,
    #[error("key is {len} bytes, longer than {MAX_KEY_LEN}")]
    TooLong { len: usize },
    #[error("key has a forbidden byte 0x{byte:02x}")]
    ForbiddenByte { byte: u8 },
}

impl Key {
    /// The longest key there is ([`MAX_KEY_LEN`] bytes), for size bounds.
    pub fn widest() -> Key {
        Key(Arc::from(&[b'k'; MAX_KEY_LEN][..]))
    }

    /// Checks `bytes` against the protocol's key rules and copies them.
    pub fn new(bytes: &[u8]) -> Result<Key, KeyError> {
        validate(bytes)?;
        Ok(Key(Arc::from(bytes)))
    }

    /// Copies bytes the caller has already checked against the key rules
    /// (the commands of a batch, checked whole before any is applied).
    pub(crate) fn from_checked(bytes: &[u8]) -> Key {
        debug_assert_eq!(validate(bytes), Ok(()), "an unchecked key");
        Key(Arc::from(bytes))
    }
}

crate::byte_string_accessors!(Key, "key");

/// Checks `bytes` against the key rules without copying them.
pub fn validate(bytes: &[u8]) -> Result<(), KeyError> {
    if bytes.is_empty() {
        return Err(KeyError::Empty);
    }
    if bytes.len() > MAX_KEY_LEN {
        return Err(KeyError::TooLong { len: bytes.len() });
    }
    match forbidden_byte(bytes) {
        Some(byte) => Err(KeyError::ForbiddenByte { byte }),
        None => Ok(()),
    }
}

shown_byte_string!(Key, KeyError, validate);

impl AsRef<[u8]> for Key {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_protocol_examples() {
        for k in ["orders/42", "jobs:nightly", "é", "~"] {
            assert!(Key::try_from(k).is_ok(), "{k}");
        }
        assert!(Key::new(&[b'a'; MAX_KEY_LEN]).is_ok());
    }

    #[test]
    fn refuses_what_the_protocol_forbids() {
        assert_eq!(Key::new(b""), Err(KeyError::Empty));
        assert_eq!(
            Key::new(&[b'a'; MAX_KEY_LEN + 1]),
            Err(KeyError::TooLong {
                len: MAX_KEY_LEN + 1
            })
        );
        for bad in [b' ', 0x00, 0x1f, b'\t', b'\r', 0x7f] {
            assert_eq!(
                Key::new(&[b'a', bad]),
                Err(KeyError::ForbiddenByte { byte: bad })
            );
        }
    }
}
