//! The options of a 1.2 acquire (`permits=`, `mode=`, `value=`,
//! [`AcquireOptions`]): how they are written, and how they are read with
//! every refusal docs/protocol.md gives.

use baton_core::{AcquireOptions, HolderValue, LockMode, MAX_PERMITS};
use bytes::{BufMut, BytesMut};

use crate::error_reply::echoable;
use crate::number::put_u64;
use crate::request_error::RequestErrorKind;

/// The longest option name echoed in an error; a longer one is written `?`.
const MAX_ECHOED_NAME: usize = 32;

/// Writes the options that differ from the default, each after a space.
pub(crate) fn encode_options(options: &AcquireOptions, dst: &mut BytesMut) {
    if options.permits != 1 {
        dst.put_slice(b" permits=");
        put_u64(dst, u64::from(options.permits));
    }
    if options.mode == LockMode::Shared {
        dst.put_slice(b" mode=shared");
    }
    if let Some(value) = &options.value {
        dst.put_slice(b" value=");
        dst.put_slice(value.as_bytes());
    }
}

/// Reads the option fields of an acquire, left to right, each at most
/// once, then checks they go together.
pub(crate) fn parse_options<'a>(
    fields: impl Iterator<Item = &'a [u8]>,
) -> Result<AcquireOptions, RequestErrorKind> {
    let mut options = AcquireOptions::default();
    let (mut permits, mut mode, mut value) = (false, false, false);
    for field in fields {
        if field.is_empty() {
            return Err(RequestErrorKind::EmptyField);
        }
        // An option is `<name>=<value>`; a field without `=` is no option
        // but an extra field, refused as protocol 1.1 refused it.
        let Some(eq) = field.iter().position(|&b| b == b'=') else {
            return Err(RequestErrorKind::TooManyFields);
        };
        let (name, text) = (&field[..eq], &field[eq + 1..]);
        let seen = match name {
            b"permits" => &mut permits,
            b"mode" => &mut mode,
            b"value" => &mut value,
            _ => return Err(RequestErrorKind::UnknownOption(shown(name))),
        };
        if std::mem::replace(seen, true) {
            return Err(RequestErrorKind::RepeatedOption(shown(name)));
        }
        match name {
            b"permits" => options.permits = parse_permits(text)?,
            b"mode" => options.mode = LockMode::from_word(text).ok_or(RequestErrorKind::BadMode)?,
            _ => options.value = Some(HolderValue::new(text).map_err(RequestErrorKind::BadValue)?),
        }
    }
    if options.mode == LockMode::Shared && options.permits != 1 {
        return Err(RequestErrorKind::SharedPermits);
    }
    Ok(options)
}

/// `1` to [`MAX_PERMITS`] in decimal, no sign, no leading zero.
fn parse_permits(text: &[u8]) -> Result<u32, RequestErrorKind> {
    let digits = !text.is_empty() && text.len() <= 5 && text.iter().all(u8::is_ascii_digit);
    if !digits || text[0] == b'0' {
        return Err(RequestErrorKind::BadPermits);
    }
    let n = text.iter().fold(0u32, |n, &d| n * 10 + u32::from(d - b'0'));
    if n > MAX_PERMITS {
        return Err(RequestErrorKind::BadPermits);
    }
    Ok(n)
}

/// An option name as an error shows it: `?` when it could garble the line
/// or is too long to be worth echoing.
fn shown(name: &[u8]) -> String {
    if echoable(name) && name.len() <= MAX_ECHOED_NAME {
        String::from_utf8_lossy(name).into_owned()
    } else {
        "?".to_owned()
    }
}
