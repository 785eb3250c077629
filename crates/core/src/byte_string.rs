//! What the protocol's checked byte strings (keys, holder values, secrets)
//! share: the bytes a word may hold, and the accessors and conversions of
//! a newtype over those bytes, written once as macros.

/// The first byte `bytes` may not hold as a protocol word: a space, a
/// control byte (0x00-0x1F) or DEL (0x7F). `None` when every byte is fine.
pub fn forbidden_byte(bytes: &[u8]) -> Option<u8> {
    bytes.iter().copied().find(|&b| b <= b' ' || b == 0x7f)
}

/// `as_bytes`, `len` and `is_empty` for a newtype over checked bytes
/// (`$ty.0` derefs to `[u8]`); `$what` names it in the docs.
#[doc(hidden)]
#[macro_export]
macro_rules! byte_string_accessors {
    ($ty:ident, $what:literal) => {
        impl $ty {
            #[doc = concat!("The ", $what, "'s bytes.")]
            pub fn as_bytes(&self) -> &[u8] {
                &self.0
            }

            #[doc = concat!("How many bytes the ", $what, " has.")]
            pub fn len(&self) -> usize {
                self.0.len()
            }

            #[doc = concat!("Always false: a ", $what, " has at least one byte.")]
            pub fn is_empty(&self) -> bool {
                self.0.is_empty()
            }
        }
    };
}

/// The conversions of a shown newtype over `Arc<[u8]>`: from a `Vec<u8>`
/// and a `&str` through `$validate` (the bytes are checked once), back to
/// a `Vec<u8>` (its serde form), and `Display`/`Debug` as lossy UTF-8.
macro_rules! shown_byte_string {
    ($ty:ident, $err:ty, $validate:path) => {
        impl TryFrom<Vec<u8>> for $ty {
            type Error = $err;
            fn try_from(v: Vec<u8>) -> Result<$ty, $err> {
                $validate(&v)?;
                Ok($ty(std::sync::Arc::from(v)))
            }
        }

        impl TryFrom<&str> for $ty {
            type Error = $err;
            fn try_from(s: &str) -> Result<$ty, $err> {
                $ty::new(s.as_bytes())
            }
        }

        impl From<$ty> for Vec<u8> {
            fn from(v: $ty) -> Vec<u8> {
                v.0.to_vec()
            }
        }

        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&String::from_utf8_lossy(&self.0))
            }
        }

        impl std::fmt::Debug for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                let text = String::from_utf8_lossy(&self.0);
                write!(f, concat!(stringify!($ty), "({:?})"), text)
            }
        }
    };
}
pub(crate) use shown_byte_string;
