//! The postcard encoding of a `Commands` message, byte for byte the one
//! serde derives for [`PriorityMessage`], written with a copy: the
//! commands are already encoded ([`EncodedCommands`], the active's
//! journal), so a batch is its header and those bytes, and a received
//! batch is checked in place and kept as bytes until the standby applies
//! it. A batch of commands is most of what a busy active sends; going
//! through serde cost a `Vec` of borrowed commands per batch and peer,
//! and on the standby a decoded list next to the frame. Every other
//! message goes through the derived encoding.
//!
//! A message starts with its variant's index, a varint that is one byte
//! for these few variants: [`COMMANDS`] then the fields in order (term,
//! first sequence number, the list's length, the commands), as serde's
//! derived (and postcard's) struct-variant layout has it. The tests pin
//! the bytes against the derived encoding.

use baton_core::EncodedCommands;

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
    let mut out = postcard::to_extend(&(term, first_seq, commands.len()), out)?;
    out.extend_from_slice(commands.as_bytes());
    Ok(out)
}

/// The message `bytes` encode (all of them, nothing after).
pub(super) fn decode(bytes: &[u8]) -> Result<PriorityMessage, postcard::Error> {
    let Some((&COMMANDS, body)) = bytes.split_first() else {
        return postcard::from_bytes(bytes);
    };
    let ((term, first_seq, count), listed) = postcard::take_from_bytes::<(Term, u64, usize)>(body)?;
    let commands = EncodedCommands::parse(count, listed).map_err(|error| {
        tracing::debug!(%error, "a batch of commands does not decode");
        postcard::Error::DeserializeBadEncoding
    })?;
    Ok(PriorityMessage::Commands {
        term,
        first_seq,
        commands,
    })
}

#[cfg(test)]
#[path = "wire_tests.rs"]
mod tests;
