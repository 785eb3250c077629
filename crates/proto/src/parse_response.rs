//! Reading a response line, client side. Strict: anything a Baton node
//! would not send is refused, because a client that guesses could match a
//! response to the wrong request.

use baton_core::{
    HolderState, HolderValue, Key, KeyDetail, KeyState, LiveGrant, LockMode, StateTag, Token,
    MAX_LISTED_HOLDERS, MAX_PERMITS,
};

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
                Some(op @ (Op::Release | Op::Renew | Op::SetValue)) => op,
                _ => {
                    return Err(ResponseError::Malformed(
                        "N names an op other than R, K or V",
                    ))
                }
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
            let (key, state) = key_state(rest, false)?;
            Ok(Response::Queried { key, state })
        }
        b"W" => {
            let (key, state) = key_state(rest, true)?;
            Ok(Response::Watched { key, state })
        }
        b"V" => {
            let [key] = fields(rest)?;
            Ok(Response::ValueSet {
                key: Key::new(key)?,
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

/// The value of a `name=value` field, which must be named `name`.
fn named<'a>(name: &'static [u8], field: Option<&'a [u8]>) -> Result<&'a [u8], ResponseError> {
    field
        .and_then(|f| f.strip_prefix(name))
        .ok_or(ResponseError::Malformed("Q or W field out of place"))
}

/// `<key> token=<t> lease=<s> waiters=<n>[ <detail>][ state=<tag>]`: a
/// `Q` (`watch` false) or `W` answer's fields. A `W` answer always ends
/// with its tag; a plain key's tag must be the one its grant gives.
fn key_state(rest: Option<&[u8]>, watch: bool) -> Result<(Key, KeyState), ResponseError> {
    let rest = rest.ok_or(ResponseError::Malformed("missing field"))?;
    let mut it = rest.split(|&b| b == b' ').peekable();
    let key = Key::new(it.next().unwrap_or_default())?;
    let token = named(b"token=", it.next())?;
    let lease = named(b"lease=", it.next())?;
    let waiters = number_field(named(b"waiters=", it.next())?)?;
    let grant = live_grant(token, lease)?;
    let detail = match it.peek() {
        Some(field) if field.starts_with(b"permits=") => Some(Box::new(detail(&mut it)?)),
        _ => None,
    };
    let tag = match it.next() {
        None => None,
        Some(field) => Some(
            StateTag::parse(named(b"state=", Some(field))?)
                .ok_or(ResponseError::Malformed("bad state tag"))?,
        ),
    };
    if it.next().is_some() {
        return Err(ResponseError::Malformed("too many fields"));
    }
    let state = KeyState {
        grant,
        waiters,
        detail,
    };
    let consistent = match (&state.detail, tag) {
        (Some(detail), Some(tag)) => state.grant.is_some() && detail.tag == tag,
        (Some(_), None) => false,
        (None, Some(tag)) => watch && tag == state.tag(),
        (None, None) => !watch,
    };
    if !consistent {
        return Err(ResponseError::Malformed("Q or W state out of step"));
    }
    Ok((key, state))
}

/// A token and a lease, both `-` or both set.
fn live_grant(token: &[u8], lease: &[u8]) -> Result<Option<LiveGrant>, ResponseError> {
    match (token, lease) {
        (b"-", b"-") => Ok(None),
        (token, lease) => Ok(Some(LiveGrant {
            token: token_field(token)?,
            lease_left_ms: lease_field(lease)?,
        })),
    }
}

fn lease_field(lease: &[u8]) -> Result<u64, ResponseError> {
    crate::duration::parse_duration_ms(lease)
        .ok()
        .filter(|ms| *ms > 0)
        .ok_or(ResponseError::Malformed("bad lease in Q or W"))
}

/// `permits=<n> mode=<m> holders=<c> holder=...` up to the `state=` field,
/// whose tag the caller reads (and sets in the detail).
fn detail<'a>(
    it: &mut std::iter::Peekable<impl Iterator<Item = &'a [u8]>>,
) -> Result<KeyDetail, ResponseError> {
    let permits = number_field(named(b"permits=", it.next())?)?;
    let permits = u32::try_from(permits)
        .ok()
        .filter(|n| (1..=MAX_PERMITS).contains(n))
        .ok_or(ResponseError::Malformed("bad permits"))?;
    let mode = LockMode::from_word(named(b"mode=", it.next())?)
        .ok_or(ResponseError::Malformed("bad mode"))?;
    let holder_count = number_field(named(b"holders=", it.next())?)?;
    let mut holders = Vec::new();
    while let Some(field) = it.next_if(|f| f.starts_with(b"holder=")) {
        if holders.len() == MAX_LISTED_HOLDERS {
            return Err(ResponseError::Malformed("too many holders listed"));
        }
        holders.push(holder(named(b"holder=", Some(field))?)?);
    }
    let listed = holder_count.min(MAX_LISTED_HOLDERS as u64);
    if holder_count == 0 || holders.len() as u64 != listed {
        return Err(ResponseError::Malformed("holders listed out of step"));
    }
    let state = it.peek().and_then(|f| f.strip_prefix(b"state="));
    let tag = state
        .and_then(StateTag::parse)
        .ok_or(ResponseError::Malformed("bad state tag"))?;
    Ok(KeyDetail {
        permits,
        mode,
        holder_count,
        holders,
        tag,
    })
}

/// `<token>,<lease>,<value|->`; the value, last, may hold commas.
fn holder(text: &[u8]) -> Result<HolderState, ResponseError> {
    let mut parts = text.splitn(3, |&b| b == b',');
    let token = token_field(parts.next().unwrap_or_default())?;
    let lease_left_ms = lease_field(parts.next().unwrap_or_default())?;
    let value = match parts.next() {
        Some(b"-") => None,
        Some(value) => Some(
            HolderValue::new(value).map_err(|_| ResponseError::Malformed("bad holder value"))?,
        ),
        None => return Err(ResponseError::Malformed("holder without a value")),
    };
    Ok(HolderState {
        token,
        lease_left_ms,
        value,
    })
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
