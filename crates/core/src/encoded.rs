//! Commands kept encoded: the journal a serving node replicates, written as
//! each command is applied, so that no key outlives its request in a list
//! waiting to be sent, and a batch bound for several standbys is encoded
//! once and shared (a reference count per copy).
//!
//! The bytes are postcard's encoding of each [`Command`] in turn, what
//! serde derives for it: the variant's index, then its fields in order,
//! every integer a LEB128 varint and a key its length then its bytes. A
//! `Vec<Command>` encodes as its length and then exactly these bytes, so a
//! message that carries a list can write it with a copy. The tests pin the
//! bytes against postcard itself.
//!
//! Bytes from a peer are hostile: [`EncodedCommands::parse`] checks every
//! command (a known variant, canonical-enough varints within u64, a key
//! within the key rules) before anything decodes them, and decoding never
//! panics on bytes it did not check.

use bytes::Bytes;

use crate::holder_value::{validate as validate_value, HolderValue, ValueError, MAX_VALUE_LEN};
use crate::key::{validate as validate_key, Key, KeyError, MAX_KEY_LEN};
use crate::lock_mode::{AcquireOptions, LockMode};
use crate::table::Command;
use crate::Token;

/// Why bytes are not a list of encoded commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("the commands end in the middle of one")]
    Truncated,
    #[error("an integer runs past 64 bits")]
    Overflow,
    #[error("unknown command variant {0}")]
    Variant(u64),
    #[error("a command's key: {0}")]
    Key(KeyError),
    #[error("a command's value: {0}")]
    Value(ValueError),
    #[error("a grant's options do not hold together")]
    Options,
    #[error("{0} bytes follow the last command")]
    Trailing(usize),
}

/// A list of commands in their postcard encoding, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EncodedCommands {
    count: usize,
    /// The highest token the commands name, kept as they are encoded or
    /// checked, so that a receiver's plausibility check needs no walk.
    highest_token: Token,
    bytes: Bytes,
}

impl EncodedCommands {
    /// How many commands.
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The commands' encoding, without a length in front.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Checks that `bytes` are exactly `count` commands and keeps them.
    pub fn parse(count: usize, bytes: &[u8]) -> Result<EncodedCommands, DecodeError> {
        let mut rest = bytes;
        let mut highest_token = 0;
        for _ in 0..count {
            let (command, after) = take_command(rest)?;
            validate_key_of(&command)?;
            command.validate_options()?;
            highest_token = highest_token.max(command.token);
            rest = after;
        }
        if !rest.is_empty() {
            return Err(DecodeError::Trailing(rest.len()));
        }
        Ok(EncodedCommands {
            count,
            highest_token,
            bytes: Bytes::copy_from_slice(bytes),
        })
    }

    /// The commands, decoded one at a time.
    pub fn iter(&self) -> impl Iterator<Item = Result<Command, DecodeError>> + '_ {
        let mut rest = &self.bytes[..];
        (0..self.count).map(move |_| {
            let (command, after) = take_command(rest)?;
            rest = after;
            command.into_command()
        })
    }

    /// The highest token the commands name, a token floor included (0
    /// for none): what a receiver checks for plausibility before applying
    /// them.
    pub fn highest_token(&self) -> Token {
        self.highest_token
    }

    /// Cuts the list into runs of at most `room` bytes each (a run of one
    /// command may be larger), in order, sharing these bytes. At least one
    /// run, empty for no commands.
    pub fn split(&self, room: usize) -> Vec<EncodedCommands> {
        let mut runs = Vec::new();
        let (mut start, mut end) = (0usize, 0usize);
        let mut run = CommandEncoder::default();
        for _ in 0..self.count {
            let Ok((command, after)) = take_command(&self.bytes[end..]) else {
                debug_assert!(false, "our own encoding failed to walk");
                break;
            };
            let size = self.bytes.len() - end - after.len();
            if run.count > 0 && end - start + size > room {
                runs.push(self.run(start, end, &run));
                (start, run) = (end, CommandEncoder::default());
            }
            end += size;
            run.counted(command.token);
        }
        runs.push(self.run(start, end, &run));
        runs
    }

    /// The bytes from `start` to `end`, as counted by `run`.
    fn run(&self, start: usize, end: usize, run: &CommandEncoder) -> EncodedCommands {
        EncodedCommands {
            count: run.count,
            highest_token: run.highest_token,
            bytes: self.bytes.slice(start..end),
        }
    }
}

/// As a `Vec<Command>` serializes: what a message that derives its
/// encoding writes. The cluster's wire encodes `Commands` with a copy of
/// the bytes instead; this is the reference it is tested against, and
/// what sizes a message header.
impl serde::Serialize for EncodedCommands {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{Error, SerializeSeq};
        let mut seq = serializer.serialize_seq(Some(self.count))?;
        for command in self.iter() {
            seq.serialize_element(&command.map_err(S::Error::custom)?)?;
        }
        seq.end()
    }
}

impl<'de> serde::Deserialize<'de> for EncodedCommands {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let commands = Vec::<Command>::deserialize(deserializer)?;
        Ok(commands.iter().collect())
    }
}

/// Encodes commands one after the other (the journal of a serving node).
#[derive(Debug, Default)]
pub struct CommandEncoder {
    count: usize,
    highest_token: Token,
    bytes: Vec<u8>,
}

impl CommandEncoder {
    pub fn push(&mut self, command: &Command) {
        let token = encode_command(command, &mut self.bytes);
        self.counted(token);
    }

    fn counted(&mut self, token: Token) {
        self.count += 1;
        self.highest_token = self.highest_token.max(token);
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The commands pushed since the last call; the encoder starts over
    /// with room for as many bytes (bursts tend to look alike).
    pub fn take(&mut self) -> EncodedCommands {
        let room = self.bytes.len();
        let bytes = std::mem::replace(&mut self.bytes, Vec::with_capacity(room));
        EncodedCommands {
            count: std::mem::take(&mut self.count),
            highest_token: std::mem::take(&mut self.highest_token),
            bytes: Bytes::from(bytes),
        }
    }
}

impl<'a> FromIterator<&'a Command> for EncodedCommands {
    fn from_iter<I: IntoIterator<Item = &'a Command>>(commands: I) -> Self {
        let mut encoder = CommandEncoder::default();
        commands.into_iter().for_each(|c| encoder.push(c));
        encoder.take()
    }
}

impl FromIterator<Command> for EncodedCommands {
    fn from_iter<I: IntoIterator<Item = Command>>(commands: I) -> Self {
        let mut encoder = CommandEncoder::default();
        commands.into_iter().for_each(|c| encoder.push(&c));
        encoder.take()
    }
}

/// The variants' indexes, in [`Command`]'s order (serde's derive).
const GRANT: u64 = 0;
const RELEASE: u64 = 1;
const RENEW: u64 = 2;
const EXPIRE: u64 = 3;
const RAISE_TOKEN_FLOOR: u64 = 4;
const GRANT_WITH: u64 = 5;
const SET_VALUE: u64 = 6;

/// Appends `command`'s encoding; returns the token it names (a floor's
/// included, 0 for a grant).
fn encode_command(command: &Command, out: &mut Vec<u8>) -> Token {
    match command {
        Command::Grant { key, lease_ms } => {
            encode_varint(GRANT, out);
            encode_key(key, out);
            encode_varint(*lease_ms, out);
            0
        }
        Command::Release { key, token } => {
            encode_varint(RELEASE, out);
            encode_key(key, out);
            encode_varint(*token, out);
            *token
        }
        Command::Renew {
            key,
            token,
            lease_ms,
        } => {
            encode_varint(RENEW, out);
            encode_key(key, out);
            encode_varint(*token, out);
            encode_varint(*lease_ms, out);
            *token
        }
        Command::Expire { key, token } => {
            encode_varint(EXPIRE, out);
            encode_key(key, out);
            encode_varint(*token, out);
            *token
        }
        Command::GrantWith {
            key,
            lease_ms,
            options,
        } => {
            encode_varint(GRANT_WITH, out);
            encode_key(key, out);
            encode_varint(*lease_ms, out);
            encode_varint(u64::from(options.permits), out);
            encode_varint(mode_index(options.mode), out);
            encode_value(options.value.as_ref(), out);
            0
        }
        Command::SetValue { key, token, value } => {
            encode_varint(SET_VALUE, out);
            encode_key(key, out);
            encode_varint(*token, out);
            encode_value(value.as_ref(), out);
            *token
        }
        Command::RaiseTokenFloor { floor } => {
            encode_varint(RAISE_TOKEN_FLOOR, out);
            encode_varint(*floor, out);
            *floor
        }
    }
}

/// A mode as serde's derive numbers its variants.
fn mode_index(mode: LockMode) -> u64 {
    match mode {
        LockMode::Exclusive => 0,
        LockMode::Shared => 1,
    }
}

/// An `Option<HolderValue>` as postcard writes it: 0, or 1 and the bytes.
fn encode_value(value: Option<&HolderValue>, out: &mut Vec<u8>) {
    match value {
        None => out.push(0),
        Some(value) => {
            out.push(1);
            encode_varint(value.len() as u64, out);
            out.extend_from_slice(value.as_bytes());
        }
    }
}

fn encode_key(key: &Key, out: &mut Vec<u8>) {
    encode_varint(key.len() as u64, out);
    out.extend_from_slice(key.as_bytes());
}

/// LEB128, as postcard writes every integer wider than a byte.
fn encode_varint(mut value: u64, out: &mut Vec<u8>) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// The varint at the front of `bytes`, and what follows it.
fn take_varint(bytes: &[u8]) -> Result<(u64, &[u8]), DecodeError> {
    let mut value = 0u64;
    for (i, &byte) in bytes.iter().enumerate().take(10) {
        let bits = u64::from(byte & 0x7f);
        // The tenth byte holds bit 63 only.
        if i == 9 && bits > 1 {
            return Err(DecodeError::Overflow);
        }
        value |= bits << (7 * i);
        if byte & 0x80 == 0 {
            return Ok((value, &bytes[i + 1..]));
        }
    }
    if bytes.len() >= 10 {
        Err(DecodeError::Overflow)
    } else {
        Err(DecodeError::Truncated)
    }
}

/// One command read in place: its key and value borrowed, not yet checked.
struct RawCommand<'a> {
    variant: u64,
    key: &'a [u8],
    token: Token,
    lease_ms: u64,
    permits: u64,
    mode: u64,
    value: Option<&'a [u8]>,
}

fn take_command(bytes: &[u8]) -> Result<(RawCommand<'_>, &[u8]), DecodeError> {
    let (variant, rest) = take_varint(bytes)?;
    let mut raw = RawCommand {
        variant,
        key: &[],
        token: 0,
        lease_ms: 0,
        permits: 1,
        mode: 0,
        value: None,
    };
    let rest = match variant {
        GRANT => {
            let rest = take_key(rest, &mut raw.key)?;
            take_into(rest, &mut raw.lease_ms)?
        }
        RELEASE | EXPIRE => {
            let rest = take_key(rest, &mut raw.key)?;
            take_into(rest, &mut raw.token)?
        }
        RENEW => {
            let rest = take_key(rest, &mut raw.key)?;
            let rest = take_into(rest, &mut raw.token)?;
            take_into(rest, &mut raw.lease_ms)?
        }
        GRANT_WITH => {
            let rest = take_key(rest, &mut raw.key)?;
            let rest = take_into(rest, &mut raw.lease_ms)?;
            let rest = take_into(rest, &mut raw.permits)?;
            let rest = take_into(rest, &mut raw.mode)?;
            take_value(rest, &mut raw.value)?
        }
        SET_VALUE => {
            let rest = take_key(rest, &mut raw.key)?;
            let rest = take_into(rest, &mut raw.token)?;
            take_value(rest, &mut raw.value)?
        }
        RAISE_TOKEN_FLOOR => take_into(rest, &mut raw.token)?,
        other => return Err(DecodeError::Variant(other)),
    };
    Ok((raw, rest))
}

/// An `Option<HolderValue>`: its bytes borrowed, their length bounded.
fn take_value<'a>(bytes: &'a [u8], value: &mut Option<&'a [u8]>) -> Result<&'a [u8], DecodeError> {
    let (&present, rest) = bytes.split_first().ok_or(DecodeError::Truncated)?;
    match present {
        0 => Ok(rest),
        1 => {
            let too_long = |len| DecodeError::Value(ValueError::TooLong { len });
            let (bytes, rest) = take_bytes(rest, MAX_VALUE_LEN, too_long)?;
            *value = Some(bytes);
            Ok(rest)
        }
        other => Err(DecodeError::Variant(u64::from(other))),
    }
}

fn take_into<'a>(bytes: &'a [u8], into: &mut u64) -> Result<&'a [u8], DecodeError> {
    let (value, rest) = take_varint(bytes)?;
    *into = value;
    Ok(rest)
}

fn take_key<'a>(bytes: &'a [u8], key: &mut &'a [u8]) -> Result<&'a [u8], DecodeError> {
    let too_long = |len| DecodeError::Key(KeyError::TooLong { len });
    let (bytes, rest) = take_bytes(bytes, MAX_KEY_LEN, too_long)?;
    *key = bytes;
    Ok(rest)
}

/// A length-prefixed run of at most `max` bytes, borrowed, and what
/// follows it. A length past `max` is refused (`too_long`) before it is
/// used.
fn take_bytes(
    bytes: &[u8],
    max: usize,
    too_long: impl Fn(usize) -> DecodeError,
) -> Result<(&[u8], &[u8]), DecodeError> {
    let (len, rest) = take_varint(bytes)?;
    let len = usize::try_from(len)
        .ok()
        .filter(|&len| len <= max)
        .ok_or_else(|| too_long(usize::try_from(len).unwrap_or(usize::MAX)))?;
    if rest.len() < len {
        return Err(DecodeError::Truncated);
    }
    Ok(rest.split_at(len))
}

fn validate_key_of(command: &RawCommand<'_>) -> Result<(), DecodeError> {
    if command.variant == RAISE_TOKEN_FLOOR {
        return Ok(());
    }
    validate_key(command.key).map_err(DecodeError::Key)
}

impl RawCommand<'_> {
    /// Checks a grant's options and any value: a mode of the enum, permits
    /// that hold together with it, a value within the value rules.
    fn validate_options(&self) -> Result<(), DecodeError> {
        if let Some(value) = self.value {
            validate_value(value).map_err(DecodeError::Value)?;
        }
        if self.variant != GRANT_WITH {
            return Ok(());
        }
        let mode = match self.mode {
            0 => LockMode::Exclusive,
            1 => LockMode::Shared,
            _ => return Err(DecodeError::Options),
        };
        let permits = u32::try_from(self.permits).map_err(|_| DecodeError::Options)?;
        let options = AcquireOptions {
            permits,
            mode,
            value: None,
        };
        if options.is_valid() {
            Ok(())
        } else {
            Err(DecodeError::Options)
        }
    }

    /// The value, taken as checked (see [`Self::into_command`]).
    fn value(&self) -> Result<Option<HolderValue>, DecodeError> {
        self.value
            .map(|v| HolderValue::new(v).map_err(DecodeError::Value))
            .transpose()
    }

    /// The command, its key taken as checked: every `EncodedCommands`
    /// holds keys that were written from a `Key` or checked by `parse`.
    fn into_command(self) -> Result<Command, DecodeError> {
        let key = || Key::from_checked(self.key);
        Ok(match self.variant {
            GRANT_WITH => Command::GrantWith {
                key: key(),
                lease_ms: self.lease_ms,
                options: AcquireOptions {
                    permits: u32::try_from(self.permits).map_err(|_| DecodeError::Options)?,
                    mode: if self.mode == 1 {
                        LockMode::Shared
                    } else {
                        LockMode::Exclusive
                    },
                    value: self.value()?,
                },
            },
            SET_VALUE => Command::SetValue {
                key: key(),
                token: self.token,
                value: self.value()?,
            },
            GRANT => Command::Grant {
                key: key(),
                lease_ms: self.lease_ms,
            },
            RELEASE => Command::Release {
                key: key(),
                token: self.token,
            },
            RENEW => Command::Renew {
                key: key(),
                token: self.token,
                lease_ms: self.lease_ms,
            },
            EXPIRE => Command::Expire {
                key: key(),
                token: self.token,
            },
            RAISE_TOKEN_FLOOR => Command::RaiseTokenFloor { floor: self.token },
            other => return Err(DecodeError::Variant(other)),
        })
    }
}

#[cfg(test)]
#[path = "encoded_tests.rs"]
mod tests;
