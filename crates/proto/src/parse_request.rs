//! Reading a request line, with every refusal docs/protocol.md asks for.
//!
//! Fields are read left to right and the first bad one is reported, so a
//! client always learns about the earliest mistake in its line.

use baton_core::{AcquireOptions, HolderValue, Key, StateTag, Token};

use crate::acquire_options::parse_options;
use crate::duration::{parse_duration_ms, DurationError};
use crate::error_reply::echoable;
use crate::limits::{Limits, MAX_REQUEST_LINE};
use crate::number::parse_u64;
use crate::op::Op;
use crate::request::Request;
use crate::request_error::{Field, RequestError, RequestErrorKind};
use crate::secret::Secret;

/// Parses one request line, given without its LF (and without the CR
/// before it, which the codec drops). Allocates only the key.
pub fn parse_request(line: &[u8], limits: &Limits) -> Result<Request, RequestError> {
    // The line plus its LF must fit, as in the codec.
    if line.len() >= MAX_REQUEST_LINE {
        return Err(RequestError::unread(RequestErrorKind::LineTooLong));
    }
    if line.is_empty() {
        return Err(RequestError::unread(RequestErrorKind::EmptyLine));
    }
    let mut fields = line.split(|&b| b == b' ');
    let first = fields.next().unwrap_or_default();
    let Some(op) = Op::from_field(first) else {
        return Err(RequestError::unread(if first.is_empty() {
            RequestErrorKind::EmptyField
        } else {
            RequestErrorKind::UnknownOp
        }));
    };
    let mut cursor = Cursor {
        fields,
        op,
        key: None,
        limits,
    };
    let request = match op {
        Op::Acquire => {
            let key = cursor.key()?;
            let wait_ms = cursor.wait()?;
            let lease_ms = cursor.lease()?;
            let options = cursor.acquire_options()?;
            Request::Acquire {
                key,
                wait_ms,
                lease_ms,
                options,
            }
        }
        Op::SetValue => {
            let key = cursor.key()?;
            let token = cursor.token()?;
            let value = cursor.value()?;
            Request::SetValue { key, token, value }
        }
        Op::Watch => {
            let key = cursor.key()?;
            let wait_ms = cursor.wait()?;
            let seen = cursor.seen()?;
            Request::Watch { key, wait_ms, seen }
        }
        Op::Release => {
            let key = cursor.key()?;
            let token = cursor.token()?;
            Request::Release { key, token }
        }
        Op::Renew => {
            let key = cursor.key()?;
            let token = cursor.token()?;
            let lease_ms = cursor.lease()?;
            Request::Renew {
                key,
                token,
                lease_ms,
            }
        }
        Op::Status => Request::Status,
        Op::Query => Request::Query { key: cursor.key()? },
        Op::Auth => {
            let user = cursor.user()?;
            let secret = cursor.secret()?;
            Request::Auth { user, secret }
        }
    };
    cursor.finish()?;
    Ok(request)
}

/// The fields after the op, read in order, with what an error must echo.
struct Cursor<'a, I> {
    fields: I,
    op: Op,
    key: Option<&'a [u8]>,
    limits: &'a Limits,
}

impl<'a, I: Iterator<Item = &'a [u8]>> Cursor<'a, I> {
    fn error(&self, kind: RequestErrorKind) -> RequestError {
        RequestError {
            op: Some(self.op),
            key: self.key.filter(|k| echoable(k)).map(<[u8]>::to_vec),
            kind,
        }
    }

    fn next(&mut self, field: Field) -> Result<&'a [u8], RequestError> {
        match self.fields.next() {
            None => Err(self.error(RequestErrorKind::MissingField(field))),
            Some([]) => Err(self.error(RequestErrorKind::EmptyField)),
            Some(text) => Ok(text),
        }
    }

    fn key(&mut self) -> Result<Key, RequestError> {
        let text = self.next(Field::Key)?;
        self.key = Some(text);
        Key::new(text).map_err(|e| self.error(e.into()))
    }

    /// A `U` request's user name: the key rules, echoed where a key is.
    fn user(&mut self) -> Result<Key, RequestError> {
        let text = self.next(Field::User)?;
        self.key = Some(text);
        Key::new(text).map_err(|e| self.error(RequestErrorKind::BadUser(e)))
    }

    /// Never echoed: the error names the rule broken, not the bytes.
    fn secret(&mut self) -> Result<Secret, RequestError> {
        let text = self.next(Field::Secret)?;
        Secret::new(text).map_err(|e| self.error(RequestErrorKind::BadSecret(e)))
    }

    /// Reads a duration field; `allow_zero` is false for a lease, which
    /// must be positive.
    fn duration(
        &mut self,
        field: Field,
        max_ms: u64,
        allow_zero: bool,
    ) -> Result<u64, RequestError> {
        // Zero is refused before the maximum so the reason is the same
        // whatever maximum a node is configured with.
        let kind = match parse_duration_ms(self.next(field)?) {
            Ok(0) if !allow_zero => RequestErrorKind::LeaseZero,
            Ok(ms) if ms <= max_ms => return Ok(ms),
            Ok(_) | Err(DurationError::Overflow) => RequestErrorKind::ExceedsMax { field, max_ms },
            Err(DurationError::Syntax) => RequestErrorKind::BadDuration(field),
        };
        Err(self.error(kind))
    }

    fn wait(&mut self) -> Result<u64, RequestError> {
        self.duration(Field::Wait, self.limits.max_wait_ms, true)
    }

    fn lease(&mut self) -> Result<u64, RequestError> {
        self.duration(Field::Lease, self.limits.max_lease_ms, false)
    }

    fn token(&mut self) -> Result<Token, RequestError> {
        match parse_u64(self.next(Field::Token)?) {
            Some(token) if token > 0 => Ok(token),
            _ => Err(self.error(RequestErrorKind::BadToken)),
        }
    }

    /// The option fields of an acquire: the rest of the line.
    fn acquire_options(&mut self) -> Result<AcquireOptions, RequestError> {
        parse_options(&mut self.fields).map_err(|kind| self.error(kind))
    }

    /// A `V` request's value; `-` clears it.
    fn value(&mut self) -> Result<Option<HolderValue>, RequestError> {
        match self.next(Field::Value)? {
            b"-" => Ok(None),
            text => HolderValue::new(text)
                .map(Some)
                .map_err(|e| self.error(RequestErrorKind::BadValue(e))),
        }
    }

    /// A `W` request's last seen state tag.
    fn seen(&mut self) -> Result<StateTag, RequestError> {
        let text = self.next(Field::Seen)?;
        StateTag::parse(text).ok_or_else(|| self.error(RequestErrorKind::BadSeen))
    }

    fn finish(&mut self) -> Result<(), RequestError> {
        match self.fields.next() {
            None => Ok(()),
            Some([]) => Err(self.error(RequestErrorKind::EmptyField)),
            Some(_) => Err(self.error(RequestErrorKind::TooManyFields)),
        }
    }
}
