//! A key's state tag: a short text that changes whenever the key's holders
//! or their values change, so a watcher can say what it last saw and be
//! answered only when that is no longer so.
//!
//! `-` when no grant holds the key; the holder's token when the key is
//! plain (one exclusive holder, one permit, no value), so a 1.1 `Q` answer
//! gives it too; else `<newest token>.<holder count>.<16 hex digits>`, the
//! hex FNV-1a 64 of the holders' token, mode and value in token order.

use std::fmt;

use crate::holder_value::HolderValue;
use crate::lock_mode::LockMode;
use crate::Token;

/// The state tag of one key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StateTag {
    /// No holder.
    Free,
    /// A plain key's one holder.
    Plain(Token),
    /// Any other set of holders.
    Holders {
        newest: Token,
        count: u64,
        hash: u64,
    },
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// The longest tag text: a token, a count and 16 hex digits, two dots.
pub const MAX_TAG_LEN: usize = 20 + 1 + 20 + 1 + 16;

fn fnv(hash: u64, bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(hash, |h, &b| (h ^ u64::from(b)).wrapping_mul(FNV_PRIME))
}

/// One holder as the tag sees it.
pub type TagHolder<'a> = (Token, LockMode, Option<&'a HolderValue>);

impl StateTag {
    /// The tag of a key of `permits` permits held by `holders`, given in
    /// token order.
    pub fn of<'a>(permits: u32, holders: impl IntoIterator<Item = TagHolder<'a>>) -> StateTag {
        let mut count = 0u64;
        let mut newest = 0;
        let mut hash = FNV_OFFSET;
        let mut plain = permits == 1;
        for (token, mode, value) in holders {
            count += 1;
            newest = newest.max(token);
            plain &= mode == LockMode::Exclusive && value.is_none();
            let mode_byte = match mode {
                LockMode::Exclusive => 0u8,
                LockMode::Shared => 1u8,
            };
            let value = value.map_or(&[][..], HolderValue::as_bytes);
            hash = fnv(hash, &token.to_be_bytes());
            // A value is at most 128 bytes, so its length fits a byte.
            hash = fnv(hash, &[mode_byte, value.len() as u8]);
            hash = fnv(hash, value);
        }
        match count {
            0 => StateTag::Free,
            1 if plain => StateTag::Plain(newest),
            _ => StateTag::Holders {
                newest,
                count,
                hash,
            },
        }
    }

    /// Reads a tag as [`fmt::Display`] writes it; `None` for anything else.
    pub fn parse(text: &[u8]) -> Option<StateTag> {
        if text == b"-" {
            return Some(StateTag::Free);
        }
        let mut parts = text.split(|&b| b == b'.');
        let newest = positive(parts.next()?)?;
        let Some(count) = parts.next() else {
            return Some(StateTag::Plain(newest));
        };
        let count = positive(count)?;
        let hex = parts.next()?;
        if parts.next().is_some() || hex.len() != 16 {
            return None;
        }
        let lower_hex = |b: &u8| b.is_ascii_digit() || (b'a'..=b'f').contains(b);
        if !hex.iter().all(lower_hex) {
            return None;
        }
        let hash = u64::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?;
        Some(StateTag::Holders {
            newest,
            count,
            hash,
        })
    }
}

/// Decimal digits only, no leading zero, above 0, within u64.
fn positive(text: &[u8]) -> Option<u64> {
    if text.is_empty() || text[0] == b'0' || !text.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(text).ok()?.parse().ok()
}

impl fmt::Display for StateTag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StateTag::Free => f.write_str("-"),
            StateTag::Plain(token) => write!(f, "{token}"),
            StateTag::Holders {
                newest,
                count,
                hash,
            } => write!(f, "{newest}.{count}.{hash:016x}"),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test
mod tests {
    use super::*;

    #[test]
    fn a_plain_key_is_tagged_by_its_token() {
        assert_eq!(StateTag::of(1, []), StateTag::Free);
        assert_eq!(
            StateTag::of(1, [(7, LockMode::Exclusive, None)]),
            StateTag::Plain(7)
        );
        assert_eq!(StateTag::Plain(7).to_string(), "7");
        assert_eq!(StateTag::Free.to_string(), "-");
    }

    #[test]
    fn anything_else_is_tagged_by_a_hash_of_its_holders() {
        let v = HolderValue::try_from("a").unwrap();
        let one = StateTag::of(1, [(7, LockMode::Exclusive, Some(&v))]);
        let other = StateTag::of(1, [(7, LockMode::Shared, None)]);
        let two = StateTag::of(
            4,
            [
                (7, LockMode::Exclusive, None),
                (9, LockMode::Exclusive, None),
            ],
        );
        assert!(matches!(
            one,
            StateTag::Holders {
                newest: 7,
                count: 1,
                ..
            }
        ));
        assert!(matches!(
            two,
            StateTag::Holders {
                newest: 9,
                count: 2,
                ..
            }
        ));
        assert_ne!(one, other);
        // The empty-input hash is FNV-1a 64's offset basis: the bytes are pinned.
        let text = StateTag::Holders {
            newest: 3,
            count: 2,
            hash: FNV_OFFSET,
        }
        .to_string();
        assert_eq!(text, "3.2.cbf29ce484222325");
        for tag in [one, other, two, StateTag::Free, StateTag::Plain(u64::MAX)] {
            assert_eq!(StateTag::parse(tag.to_string().as_bytes()), Some(tag));
            assert!(tag.to_string().len() <= MAX_TAG_LEN);
        }
    }

    #[test]
    fn only_well_formed_tags_are_read() {
        for bad in [
            &b""[..],
            b"0",
            b"07",
            b"7.",
            b"7.1",
            b"7.0.cbf29ce484222325",
            b"7.1.CBF29CE484222325",
            b"7.1.cbf29ce48422232",
            b"7.1.cbf29ce484222325.1",
            b"-1",
            b"18446744073709551616",
            b"--",
        ] {
            assert_eq!(StateTag::parse(bad), None, "{bad:?}");
        }
    }
}
