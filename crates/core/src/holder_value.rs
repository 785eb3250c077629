//! A holder's value: a short text a grant carries (an address, an id),
//! reported by `Q` and watches. Protocol-safe by construction, so it can
//! go back on the wire as one field.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::byte_string::shown_byte_string;
use crate::key::KeyError;

/// The longest value, in bytes: room for an address or an id, small
/// enough that sixteen holders fit in one response line.
pub const MAX_VALUE_LEN: usize = 128;

/// A holder's value: 1 to [`MAX_VALUE_LEN`] bytes, no space, no control
/// byte (0x00-0x1F), no DEL, and not exactly `-` (which the protocol
/// reads as "no value"). Cloning is a reference count.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "Vec<u8>", into = "Vec<u8>")]
pub struct HolderValue(Arc<[u8]>);

/// Why bytes are not a valid value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ValueError {
    #[error("value is empty")]
    Empty,
    #[error("value is {len} bytes, longer than {MAX_VALUE_LEN}")]
    TooLong { len: usize },
    #[error("value has a forbidden byte 0x{byte:02x}")]
    ForbiddenByte { byte: u8 },
    #[error("value cannot be -, which means no value")]
    Dash,
}

impl HolderValue {
    /// Checks `bytes` against the value rules and copies them.
    pub fn new(bytes: &[u8]) -> Result<HolderValue, ValueError> {
        validate(bytes)?;
        Ok(HolderValue(Arc::from(bytes)))
    }

    /// The longest value there is, for size bounds.
    pub fn widest() -> HolderValue {
        HolderValue(Arc::from(&[b'v'; MAX_VALUE_LEN][..]))
    }
}

crate::byte_string_accessors!(HolderValue, "value");

/// Checks `bytes` against the value rules without copying them: the
/// bytes a key may hold, fewer of them, and not `-`.
pub fn validate(bytes: &[u8]) -> Result<(), ValueError> {
    if bytes.len() > MAX_VALUE_LEN {
        return Err(ValueError::TooLong { len: bytes.len() });
    }
    crate::key::validate(bytes).map_err(|e| match e {
        KeyError::Empty => ValueError::Empty,
        KeyError::TooLong { len } => ValueError::TooLong { len },
        KeyError::ForbiddenByte { byte } => ValueError::ForbiddenByte { byte },
    })?;
    if bytes == b"-" {
        return Err(ValueError::Dash);
    }
    Ok(())
}

shown_byte_string!(HolderValue, ValueError, validate);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_what_the_protocol_allows() {
        for ok in ["10.0.0.7:8080", "a", "a,b", "é", "--"] {
            assert!(HolderValue::try_from(ok).is_ok(), "{ok}");
        }
        assert!(HolderValue::new(&[b'x'; MAX_VALUE_LEN]).is_ok());
    }

    #[test]
    fn refuses_what_the_protocol_forbids() {
        assert_eq!(HolderValue::new(b""), Err(ValueError::Empty));
        assert_eq!(HolderValue::new(b"-"), Err(ValueError::Dash));
        assert_eq!(
            HolderValue::new(&[b'x'; MAX_VALUE_LEN + 1]),
            Err(ValueError::TooLong {
                len: MAX_VALUE_LEN + 1
            })
        );
        for bad in [b' ', 0, 0x1f, 0x7f, b'\n'] {
            assert_eq!(
                HolderValue::new(&[b'a', bad]),
                Err(ValueError::ForbiddenByte { byte: bad })
            );
        }
    }
}
