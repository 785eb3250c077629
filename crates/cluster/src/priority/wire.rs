//! The postcard encoding of a `Commands` message, byte for byte the one
//! serde derives for [`PriorityMessage`], without the copies the derived
//! encoding of a [`Key`] makes: it goes through a `Vec<u8>` both ways (an
//! allocation and a copy per key to encode, two allocations per key to
//! decode). A batch of commands is most of what a busy active sends, and
//! both showed in profiles (pipelined, 16 x 16): `Key`'s `Serialize` on
//! the active, `Key::try_from(Vec<u8>)` and the allocator on the
//! standbys. Every other message goes through the derived encoding.
//!
//! A message starts with its variant's index, a varint that is one byte
//! for these few variants: [`COMMANDS`] then the fields in order, as
//! serde's derived (and postcard's) struct-variant layout has it. The
//! tests pin the bytes against the derived encoding.

use baton_core::{Command, Key, Token};
use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

use super::messages::{PriorityMessage, Term};

/// The index of `PriorityMessage::Commands` among its variants (its
/// first byte in postcard).
const COMMANDS: u8 = 3;

/// Appends `message`'s postcard encoding to `out`.
pub(super) fn encode_into(
    message: &PriorityMessage,
    mut out: Vec<u8>,
) -> Result<Vec<u8>, postcard::Error> {
    let PriorityMessage::Commands {
        term,
        first_seq,
        commands,
    } = message
    else {
        return postcard::to_extend(message, out);
    };
    out.push(COMMANDS);
    let body = CommandsOut {
        term: *term,
        first_seq: *first_seq,
        commands: commands.iter().map(CommandOut::from).collect(),
    };
    postcard::to_extend(&body, out)
}

/// The message `bytes` encode (all of them, nothing after).
pub(super) fn decode(bytes: &[u8]) -> Result<PriorityMessage, postcard::Error> {
    let Some((&COMMANDS, body)) = bytes.split_first() else {
        return postcard::from_bytes(bytes);
    };
    let CommandsIn {
        term,
        first_seq,
        commands,
    } = postcard::from_bytes(body)?;
    Ok(PriorityMessage::Commands {
        term,
        first_seq,
        commands: commands.into_iter().map(Command::from).collect(),
    })
}

/// The fields of `Commands`, in their order.
#[derive(Serialize)]
struct CommandsOut<'a> {
    term: Term,
    first_seq: u64,
    commands: Vec<CommandOut<'a>>,
}

#[derive(Deserialize)]
struct CommandsIn {
    term: Term,
    first_seq: u64,
    commands: Vec<CommandIn>,
}

/// [`Command`]'s variants in its order, keys borrowed.
#[derive(Serialize)]
enum CommandOut<'a> {
    Grant {
        key: KeyOut<'a>,
        lease_ms: u64,
    },
    Release {
        key: KeyOut<'a>,
        token: Token,
    },
    Renew {
        key: KeyOut<'a>,
        token: Token,
        lease_ms: u64,
    },
    Expire {
        key: KeyOut<'a>,
        token: Token,
    },
    RaiseTokenFloor {
        floor: Token,
    },
}

impl<'a> From<&'a Command> for CommandOut<'a> {
    fn from(command: &'a Command) -> CommandOut<'a> {
        match command {
            Command::Grant { key, lease_ms } => CommandOut::Grant {
                key: KeyOut(key),
                lease_ms: *lease_ms,
            },
            Command::Release { key, token } => CommandOut::Release {
                key: KeyOut(key),
                token: *token,
            },
            Command::Renew {
                key,
                token,
                lease_ms,
            } => CommandOut::Renew {
                key: KeyOut(key),
                token: *token,
                lease_ms: *lease_ms,
            },
            Command::Expire { key, token } => CommandOut::Expire {
                key: KeyOut(key),
                token: *token,
            },
            Command::RaiseTokenFloor { floor } => CommandOut::RaiseTokenFloor { floor: *floor },
        }
    }
}

/// [`Command`]'s variants in its order, keys decoded in one allocation.
#[derive(Deserialize)]
enum CommandIn {
    Grant {
        key: KeyIn,
        lease_ms: u64,
    },
    Release {
        key: KeyIn,
        token: Token,
    },
    Renew {
        key: KeyIn,
        token: Token,
        lease_ms: u64,
    },
    Expire {
        key: KeyIn,
        token: Token,
    },
    RaiseTokenFloor {
        floor: Token,
    },
}

impl From<CommandIn> for Command {
    fn from(command: CommandIn) -> Command {
        match command {
            CommandIn::Grant { key, lease_ms } => Command::Grant {
                key: key.0,
                lease_ms,
            },
            CommandIn::Release { key, token } => Command::Release { key: key.0, token },
            CommandIn::Renew {
                key,
                token,
                lease_ms,
            } => Command::Renew {
                key: key.0,
                token,
                lease_ms,
            },
            CommandIn::Expire { key, token } => Command::Expire { key: key.0, token },
            CommandIn::RaiseTokenFloor { floor } => Command::RaiseTokenFloor { floor },
        }
    }
}

/// A key as the derived encoding writes it: its length, then its bytes
/// (postcard writes a `Vec<u8>` and a byte string alike).
struct KeyOut<'a>(&'a Key);

impl Serialize for KeyOut<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(self.0.as_bytes())
    }
}

/// A key read from the frame's bytes and checked against the key rules,
/// as the derived decoding does.
struct KeyIn(Key);

impl<'de> Deserialize<'de> for KeyIn {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<KeyIn, D::Error> {
        deserializer.deserialize_bytes(KeyVisitor)
    }
}

struct KeyVisitor;

impl<'de> Visitor<'de> for KeyVisitor {
    type Value = KeyIn;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a lock key")
    }

    fn visit_bytes<E: de::Error>(self, bytes: &[u8]) -> Result<KeyIn, E> {
        Key::new(bytes).map(KeyIn).map_err(E::custom)
    }
}

#[cfg(test)]
#[path = "wire_tests.rs"]
mod tests;
