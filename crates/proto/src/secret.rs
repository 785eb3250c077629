//! The secret of a `U <user> <secret>` request: checked against the
//! protocol's rules, and never shown by `Debug`, so that a request logged
//! with `{:?}` does not leak it.

use std::fmt;

/// The longest secret the protocol allows, in bytes.
pub const MAX_SECRET_LEN: usize = 250;

/// A secret: 1 to [`MAX_SECRET_LEN`] bytes, none a space, a control byte
/// (0x00-0x1F) or DEL (0x7F). Its `Debug` output is `Secret(<redacted>)`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Box<[u8]>);

/// Why a byte string is not a valid secret. The text never quotes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    #[error("secret is empty")]
    Empty,
    #[error("secret is {len} bytes, longer than {MAX_SECRET_LEN}")]
    TooLong { len: usize },
    #[error("secret has a space, a control character or DEL")]
    ForbiddenByte,
}

impl Secret {
    /// Checks `bytes` against the secret rules and copies them.
    pub fn new(bytes: &[u8]) -> Result<Secret, SecretError> {
        validate_secret(bytes)?;
        Ok(Secret(bytes.into()))
    }
}

baton_core::byte_string_accessors!(Secret, "secret");

/// Checks `bytes` against the secret rules without copying them.
pub fn validate_secret(bytes: &[u8]) -> Result<(), SecretError> {
    if bytes.is_empty() {
        return Err(SecretError::Empty);
    }
    if bytes.len() > MAX_SECRET_LEN {
        return Err(SecretError::TooLong { len: bytes.len() });
    }
    if baton_core::forbidden_byte(bytes).is_some() {
        return Err(SecretError::ForbiddenByte);
    }
    Ok(())
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test
mod tests {
    use super::*;

    #[test]
    fn follows_the_rules() {
        assert!(Secret::new(b"s3cr3t-value").is_ok());
        assert!(Secret::new(&[b'x'; MAX_SECRET_LEN]).is_ok());
        assert_eq!(Secret::new(b""), Err(SecretError::Empty));
        assert_eq!(
            Secret::new(&[b'x'; MAX_SECRET_LEN + 1]),
            Err(SecretError::TooLong { len: 251 })
        );
        for bad in [&b"a b"[..], b"a\x00", b"a\x1f", b"a\x7f", b"\t"] {
            assert_eq!(Secret::new(bad), Err(SecretError::ForbiddenByte), "{bad:?}");
        }
        assert!(Secret::new("é".as_bytes()).is_ok());
    }

    #[test]
    fn debug_does_not_show_it() {
        let secret = Secret::new(b"hunter2").unwrap();
        assert_eq!(format!("{secret:?}"), "Secret(<redacted>)");
        assert!(!format!("{:?}", Some(secret)).contains("hunter2"));
    }
}
