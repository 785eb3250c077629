//! Reading a response line, client side. Strict: anything a Baton node
//! would not send is refused, because a client that guesses could match a
//! response to the wrong request.

use baton_core::{Key, KeyState, LiveGrant, Token};

use crate::error_reply::ErrorReply;
use crate::number::parse_u64;
use crate::op::Op;
use crate::response::Response;
use crate::response_error::ResponseError;
use crate::status::StatusReport;

/// Parses one response line, given without its LF (and without the CR
/// before it, which the codec drops).
pub fn parse_response(line: &[u8]) -> Result<Response, ResponseError> {
    if line.is_empty() {
        return Err(ResponseError::EmptyLine);
    }
    let (kind, rest) = split_once(line);
    match kind {
        b"A" => {
            let [key, token] = fields(rest)?;
            Ok(Response::Granted {
                key: Key::new(key)?,
                token: token_field(token)?,
            })
        }
        b"T" => {
            let [key] = fields(rest)?;
            Ok(Response::TimedOut {
                key: Key::new(key)?,
            })
        }
        b"R" => {
            let [key] = fields(rest)?;
            Ok(Response::Released {
                key: Key::new(key)?,
            })
        }
        b"K" => {
            let [key] = fields(rest)?;
            Ok(Response::Renewed {
                key: Key::new(key)?,
            })
        }
        b"N" => {
            let [op, key] = fields(rest)?;
            let op = match Op::from_field(op) {
                Some(op @ (Op::Release | Op::Renew)) => op,
                _ => return Err(ResponseError::Malformed("N names an op other than R or K")),
            };
            Ok(Response::NotHeld {
                op,
                key: Key::new(key)?,
            })
        }
        b"M" => {
            let [op, key, addr] = fields(rest)?;
            Ok(Response::Moved {
                op: op_field(op)?,
                key: Key::new(key)?,
                addr: addr_field(addr)?,
            })
        }
        b"U" => {
            let [user] = fields(rest)?;
            Ok(Response::Authenticated {
                user: Key::new(user)?,
            })
        }
        b"Q" => {
            let [key, token, lease, waiters] = fields(rest)?;
            Ok(Response::Queried {
                key: Key::new(key)?,
                state: key_state(token, lease, waiters)?,
            })
        }
        b"E" => error_reply(rest).map(Response::Error),
        b"S" => status(rest).map(Response::Status),
        _ => Err(ResponseError::UnknownKind),
    }
}

/// Splits off the first field; the rest is `None` when there is no space.
fn split_once(line: &[u8]) -> (&[u8], Option<&[u8]>) {
    match line.iter().position(|&b| b == b' ') {
        Some(i) => (&line[..i], Some(&line[i + 1..])),
        None => (line, None),
    }
}

/// Exactly `N` non-empty space-separated fields.
fn fields<const N: usize>(rest: Option<&[u8]>) -> Result<[&[u8]; N], ResponseError> {
    let mut out = [&[][..]; N];
    let mut it = rest.into_iter().flat_map(|r| r.split(|&b| b == b' '));
    for slot in &mut out {
        *slot = match it.next() {
            None => return Err(ResponseError::Malformed("missing field")),
            Some([]) => return Err(ResponseError::Malformed("empty field")),
            Some(field) => field,
        };
    }
    match it.next() {
        None => Ok(out),
        Some(_) => Err(ResponseError::Malformed("too many fields")),
    }
}

/// `token=<t> lease=<s> waiters=<n>`, token and lease both `-` or both set.
fn key_state(token: &[u8], lease: &[u8], waiters: &[u8]) -> Result<KeyState, ResponseError> {
    let named = |field: &'static [u8], text: &[u8]| -> Result<Vec<u8>, ResponseError> {
        text.strip_prefix(field)
            .map(<[u8]>::to_vec)
            .ok_or(ResponseError::Malformed("Q field out of place"))
    };
    let (token, lease) = (named(b"token=", token)?, named(b"lease=", lease)?);
    let waiters = number_field(&named(b"waiters=", waiters)?)?;
    let grant = match (token.as_slice(), lease.as_slice()) {
        (b"-", b"-") => None,
        (token, lease) => {
            let lease_left_ms = crate::duration::parse_duration_ms(lease)
                .ok()
                .filter(|ms| *ms > 0)
                .ok_or(ResponseError::Malformed("bad lease in Q"))?;
            Some(LiveGrant {
                token: token_field(token)?,
                lease_left_ms,
            })
        }
    };
    Ok(KeyState { grant, waiters })
}

fn op_field(field: &[u8]) -> Result<Op, ResponseError> {
    Op::from_field(field).ok_or(ResponseError::Malformed("unknown op"))
}

fn token_field(field: &[u8]) -> Result<Token, ResponseError> {
    match parse_u64(field) {
        Some(token) if token > 0 => Ok(token),
        _ => Err(ResponseError::Malformed("bad token")),
    }
}

fn number_field(field: &[u8]) -> Result<u64, ResponseError> {
    parse_u64(field).ok_or(ResponseError::Malformed("bad number"))
}

fn text(field: &[u8]) -> Result<&str, ResponseError> {
    std::str::from_utf8(field).map_err(|_| ResponseError::Malformed("text is not UTF-8"))
}

/// An address, or `None` for `-`.
fn addr_field(field: &[u8]) -> Result<Option<String>, ResponseError> {
    match field {
        b"-" => Ok(None),
        [] => Err(ResponseError::Malformed("empty address")),
        _ => Ok(Some(text(field)?.to_owned())),
    }
}

fn error_reply(rest: Option<&[u8]>) -> Result<ErrorReply, ResponseError> {
    let (op, rest) = split_once(rest.ok_or(ResponseError::Malformed("missing field"))?);
    let (key, reason) = split_once(rest.ok_or(ResponseError::Malformed("missing field"))?);
    let reason = reason.ok_or(ResponseError::Malformed("missing reason"))?;
    let op = match op {
        b"?" => None,
        _ => Some(op_field(op)?),
    };
    let key = match key {
        b"?" => None,
        [] => return Err(ResponseError::Malformed("empty field")),
        _ => Some(key.to_vec()),
    };
    // The reason is for people; a stray byte in it is no reason to drop
    // the connection.
    let reason = String::from_utf8_lossy(reason).into_owned();
    Ok(ErrorReply { op, key, reason })
}

fn status(rest: Option<&[u8]>) -> Result<StatusReport, ResponseError> {
    let mut role = None;
    let mut mode = None;
    let mut self_addr = None;
    let mut active = None;
    let mut token = None;
    let mut locks = None;
    let mut waiters = None;
    let mut extra = Vec::new();
    for field in rest.into_iter().flat_map(|r| r.split(|&b| b == b' ')) {
        let eq = field
            .iter()
            .position(|&b| b == b'=')
            .ok_or(ResponseError::Malformed("status field without '='"))?;
        let (name, value) = (text(&field[..eq])?, &field[eq + 1..]);
        match name {
            "" => return Err(ResponseError::Malformed("status field without a name")),
            "role" => set_once(&mut role, parse_word(value)?)?,
            "mode" => set_once(&mut mode, parse_word(value)?)?,
            "self" => set_once(&mut self_addr, text(value)?.to_owned())?,
            "active" => set_once(&mut active, addr_field(value)?)?,
            "token" => set_once(&mut token, number_field(value)?)?,
            "locks" => set_once(&mut locks, number_field(value)?)?,
            "waiters" => set_once(&mut waiters, number_field(value)?)?,
            _ => extra.push((name.to_owned(), text(value)?.to_owned())),
        }
    }
    Ok(StatusReport {
        role: role.ok_or(ResponseError::MissingStatusField("role"))?,
        mode: mode.ok_or(ResponseError::MissingStatusField("mode"))?,
        self_addr: self_addr.ok_or(ResponseError::MissingStatusField("self"))?,
        active: active.ok_or(ResponseError::MissingStatusField("active"))?,
        token: token.ok_or(ResponseError::MissingStatusField("token"))?,
        locks: locks.ok_or(ResponseError::MissingStatusField("locks"))?,
        waiters: waiters.ok_or(ResponseError::MissingStatusField("waiters"))?,
        extra,
    })
}

fn parse_word<T: std::str::FromStr>(value: &[u8]) -> Result<T, ResponseError> {
    text(value)?
        .parse()
        .map_err(|_| ResponseError::Malformed("unknown role or mode"))
}

/// A known status field given twice is refused: which one would be true?
fn set_once<T>(slot: &mut Option<T>, value: T) -> Result<(), ResponseError> {
    match slot.replace(value) {
        None => Ok(()),
        Some(_) => Err(ResponseError::Malformed("repeated status field")),
    }
}
