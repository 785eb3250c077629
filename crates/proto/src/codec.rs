//! tokio-util codecs: [`ServerCodec`] on a node, [`ClientCodec`] in a client.

use bytes::BytesMut;
use tokio_util::codec::{Decoder, Encoder};

use crate::limits::{Limits, MAX_REQUEST_LINE, MAX_RESPONSE_LINE};
use crate::line::{Lines, Next};
use crate::parse_request::parse_request;
use crate::parse_response::parse_response;
use crate::request::Request;
use crate::request_error::{RequestError, RequestErrorKind};
use crate::response::Response;
use crate::response_error::ResponseError;

/// `Encoder` of `$item` and of `&$item` for `$codec`: the item writes
/// itself (`Response::encode`, `Request::encode`).
macro_rules! encodes_itself {
    ($codec:ty, $item:ty) => {
        impl Encoder<&$item> for $codec {
            type Error = std::io::Error;

            fn encode(&mut self, item: &$item, dst: &mut BytesMut) -> Result<(), Self::Error> {
                item.encode(dst);
                Ok(())
            }
        }

        impl Encoder<$item> for $codec {
            type Error = std::io::Error;

            fn encode(&mut self, item: $item, dst: &mut BytesMut) -> Result<(), Self::Error> {
                item.encode(dst);
                Ok(())
            }
        }
    };
}

/// A node's side: decodes requests, encodes responses.
///
/// A bad request is an item, not a decoder error, because the connection
/// goes on after the node answers it with `E`.
#[derive(Debug)]
pub struct ServerCodec {
    limits: Limits,
    lines: Lines,
}

impl ServerCodec {
    pub fn new(limits: Limits) -> Self {
        ServerCodec {
            limits,
            lines: Lines::new(MAX_REQUEST_LINE),
        }
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Whether a request line is unfinished: bytes of it are buffered in
    /// `src`, or a too-long one is being discarded up to its LF (the
    /// node's line timeout runs while it is).
    #[inline]
    pub fn mid_line(&self, src: &[u8]) -> bool {
        !src.is_empty() || self.lines.discarding()
    }

    /// Whether a too-long line is being discarded up to its LF.
    #[inline]
    pub fn discarding(&self) -> bool {
        self.lines.discarding()
    }
}

impl Default for ServerCodec {
    fn default() -> Self {
        ServerCodec::new(Limits::default())
    }
}

impl Decoder for ServerCodec {
    type Item = Result<Request, RequestError>;
    type Error = std::io::Error;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Self::Item>, Self::Error> {
        match self.lines.next(src) {
            Next::Line(lf) => {
                let parsed = parse_request(Lines::content(src, lf), &self.limits);
                Lines::consume(src, lf);
                Ok(Some(parsed))
            }
            Next::TooLong => Ok(Some(Err(RequestError::unread(
                RequestErrorKind::LineTooLong,
            )))),
            Next::NeedMore => Ok(None),
        }
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<Self::Item>, Self::Error> {
        let item = self.decode(src)?;
        Ok(self.lines.at_eof(src, item))
    }
}

encodes_itself!(ServerCodec, Response);

/// A client's side: encodes requests, decodes responses.
///
/// A response line that does not parse is a decoder error: the client can
/// no longer match responses to requests, so the connection is done.
#[derive(Debug)]
pub struct ClientCodec {
    lines: Lines,
}

impl ClientCodec {
    /// A codec that accepts response lines of up to `max_line` bytes, LF
    /// included.
    pub fn with_max_line(max_line: usize) -> Self {
        ClientCodec {
            lines: Lines::new(max_line),
        }
    }
}

impl Default for ClientCodec {
    fn default() -> Self {
        ClientCodec::with_max_line(MAX_RESPONSE_LINE)
    }
}

impl Decoder for ClientCodec {
    type Item = Response;
    type Error = ResponseError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Self::Item>, Self::Error> {
        match self.lines.next(src) {
            Next::Line(lf) => {
                let parsed = parse_response(Lines::content(src, lf));
                Lines::consume(src, lf);
                parsed.map(Some)
            }
            Next::TooLong => Err(ResponseError::LineTooLong {
                max: self.lines.max(),
            }),
            Next::NeedMore => Ok(None),
        }
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<Self::Item>, Self::Error> {
        let item = self.decode(src)?;
        Ok(self.lines.at_eof(src, item))
    }
}

encodes_itself!(ClientCodec, Request);
