//! The request kinds, named by their one-letter wire code.

use std::fmt;

/// A request kind. Responses name it too, so a client can match them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    Acquire,
    Release,
    Renew,
    Status,
    /// `U`: authenticate the connection (docs/protocol.md 1.1).
    Auth,
    /// `Q`: report one key's grant and waiters (docs/protocol.md 1.1).
    Query,
    /// `V`: set or clear a holder's value (docs/protocol.md 1.2).
    SetValue,
    /// `W`: wait until a key's holders change (docs/protocol.md 1.2).
    Watch,
}

impl Op {
    /// The letter that starts a request line of this kind.
    pub fn as_byte(self) -> u8 {
        match self {
            Op::Acquire => b'A',
            Op::Release => b'R',
            Op::Renew => b'K',
            Op::Status => b'S',
            Op::Auth => b'U',
            Op::Query => b'Q',
            Op::SetValue => b'V',
            Op::Watch => b'W',
        }
    }

    pub fn from_byte(b: u8) -> Option<Op> {
        match b {
            b'A' => Some(Op::Acquire),
            b'R' => Some(Op::Release),
            b'K' => Some(Op::Renew),
            b'S' => Some(Op::Status),
            b'U' => Some(Op::Auth),
            b'Q' => Some(Op::Query),
            b'V' => Some(Op::SetValue),
            b'W' => Some(Op::Watch),
            _ => None,
        }
    }

    /// The op named by a whole field, which must be exactly one letter.
    pub(crate) fn from_field(field: &[u8]) -> Option<Op> {
        match field {
            [b] => Op::from_byte(*b),
            _ => None,
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", char::from(self.as_byte()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn letters_round_trip() {
        for op in [
            Op::Acquire,
            Op::Release,
            Op::Renew,
            Op::Status,
            Op::Query,
            Op::Auth,
            Op::SetValue,
            Op::Watch,
        ] {
            assert_eq!(Op::from_byte(op.as_byte()), Some(op));
            assert_eq!(op.to_string().as_bytes(), [op.as_byte()]);
        }
        for b in [b'a', b'T', b'N', b'M', b'E', b'?', 0, b' '] {
            assert_eq!(Op::from_byte(b), None);
        }
    }

    #[test]
    fn a_field_names_an_op_only_when_it_is_one_letter() {
        assert_eq!(Op::from_field(b"A"), Some(Op::Acquire));
        assert_eq!(Op::from_field(b"AA"), None);
        assert_eq!(Op::from_field(b""), None);
    }
}
