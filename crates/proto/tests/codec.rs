//! The codecs over a byte stream: line length boundaries, recovery after a
//! too-long line, byte-at-a-time input, end of stream, and the example
//! session of docs/protocol.md byte for byte.

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test

use baton_core::Key;
use baton_proto::{
    AcquireOptions, ClientCodec, Limits, Request, RequestError, RequestErrorKind, Response,
    ResponseError, ServerCodec,
};
use bytes::BytesMut;
use tokio_util::codec::{Decoder, Encoder};

type Item = Result<Request, RequestError>;

/// Feeds `input` in chunks of `chunk` bytes, then ends the stream.
fn decode_all(codec: &mut ServerCodec, input: &[u8], chunk: usize) -> Vec<Item> {
    let mut buf = BytesMut::new();
    let mut items = Vec::new();
    for piece in input.chunks(chunk) {
        buf.extend_from_slice(piece);
        while let Some(item) = codec.decode(&mut buf).unwrap() {
            items.push(item);
        }
    }
    while let Some(item) = codec.decode_eof(&mut buf).unwrap() {
        items.push(item);
    }
    assert!(buf.is_empty(), "bytes left after the end of the stream");
    items
}

fn server_items(input: &[u8]) -> Vec<Item> {
    decode_all(&mut ServerCodec::default(), input, input.len().max(1))
}

fn kind(item: &Item) -> Option<&RequestErrorKind> {
    item.as_ref().err().map(|e| &e.kind)
}

fn too_long(item: &Item) -> bool {
    kind(item) == Some(&RequestErrorKind::LineTooLong)
}

/// A line of exactly `len` bytes, LF (and CR if `crlf`) included, whose
/// content is a refused status request: valid length, invalid content.
fn filler_line(len: usize, crlf: bool) -> Vec<u8> {
    let ending: &[u8] = if crlf { b"\r\n" } else { b"\n" };
    let mut line = b"S ".to_vec();
    line.resize(len - ending.len(), b'x');
    line.extend_from_slice(ending);
    assert_eq!(line.len(), len);
    line
}

#[test]
fn a_line_of_1024_bytes_with_its_lf_is_judged_on_its_content() {
    for crlf in [false, true] {
        let items = server_items(&filler_line(1024, crlf));
        assert_eq!(items.len(), 1);
        assert_eq!(kind(&items[0]), Some(&RequestErrorKind::TooManyFields));
    }
}

#[test]
fn a_line_of_1025_bytes_is_too_long_counting_its_cr() {
    for crlf in [false, true] {
        let items = server_items(&filler_line(1025, crlf));
        assert_eq!(items.len(), 1);
        assert!(too_long(&items[0]));
        let err = items[0].as_ref().unwrap_err();
        let mut dst = BytesMut::new();
        Response::Error(err.to_reply()).encode(&mut dst);
        assert_eq!(&dst[..], b"E ? ? line too long\n");
    }
}

#[test]
fn the_line_after_a_too_long_one_parses() {
    let mut input = filler_line(5000, false);
    input.extend_from_slice(b"S\n");
    input.extend_from_slice(&filler_line(1025, true));
    input.extend_from_slice(b"R k 1\r\n");
    for chunk in [1, 7, 1023, 1024, 1025, input.len()] {
        let items = decode_all(&mut ServerCodec::default(), &input, chunk);
        assert_eq!(items.len(), 4, "chunk {chunk}");
        assert!(too_long(&items[0]));
        assert_eq!(items[1], Ok(Request::Status));
        assert!(too_long(&items[2]));
        assert_eq!(
            items[3],
            Ok(Request::Release {
                key: Key::try_from("k").unwrap(),
                token: 1
            })
        );
    }
}

#[test]
fn a_too_long_line_fed_a_byte_at_a_time_yields_one_error_at_once() {
    let mut codec = ServerCodec::default();
    let mut buf = BytesMut::new();
    let mut items = Vec::new();
    for i in 0..3000 {
        buf.extend_from_slice(b"x");
        while let Some(item) = codec.decode(&mut buf).unwrap() {
            items.push((i, item));
        }
        // Never more than one line's worth is buffered.
        assert!(buf.len() < 1024);
    }
    assert_eq!(items.len(), 1);
    // The 1024th byte is the one that makes the line too long.
    assert_eq!(items[0].0, 1023);
    assert!(too_long(&items[0].1));
    buf.extend_from_slice(b"\nS\n");
    assert_eq!(codec.decode(&mut buf).unwrap(), Some(Ok(Request::Status)));
    assert_eq!(codec.decode(&mut buf).unwrap(), None);
}

#[test]
fn need_more_is_not_an_error_and_eof_drops_a_partial_line() {
    let mut codec = ServerCodec::default();
    let mut buf = BytesMut::from(&b"A k 1"[..]);
    assert_eq!(codec.decode(&mut buf).unwrap(), None);
    assert_eq!(codec.decode_eof(&mut buf).unwrap(), None);
    assert!(buf.is_empty());

    let mut client = ClientCodec::default();
    let mut buf = BytesMut::from(&b"A k"[..]);
    assert!(client.decode(&mut buf).unwrap().is_none());
    assert!(client.decode_eof(&mut buf).unwrap().is_none());
    assert!(buf.is_empty());
}

#[test]
fn only_one_cr_before_the_lf_is_dropped() {
    let items = server_items(b"S\r\nS\r\r\nS\rS\n\r\n\n");
    assert_eq!(items.len(), 5);
    assert_eq!(items[0], Ok(Request::Status));
    assert_eq!(kind(&items[1]), Some(&RequestErrorKind::UnknownOp));
    assert_eq!(kind(&items[2]), Some(&RequestErrorKind::UnknownOp));
    assert_eq!(kind(&items[3]), Some(&RequestErrorKind::EmptyLine));
    assert_eq!(kind(&items[4]), Some(&RequestErrorKind::EmptyLine));
}

#[test]
fn the_example_session_byte_for_byte() {
    let requests = b"A orders/42 5 30\nA orders/43 0 10\nR orders/42 1057\nR orders/42 1057\nK orders/43 1058 60\nA bad-lease 0 0\n";
    let key = |k: &str| Key::try_from(k).unwrap();
    let expected = vec![
        Request::Acquire {
            key: key("orders/42"),
            wait_ms: 5000,
            lease_ms: 30000,
            options: AcquireOptions::default(),
        },
        Request::Acquire {
            key: key("orders/43"),
            wait_ms: 0,
            lease_ms: 10000,
            options: AcquireOptions::default(),
        },
        Request::Release {
            key: key("orders/42"),
            token: 1057,
        },
        Request::Release {
            key: key("orders/42"),
            token: 1057,
        },
        Request::Renew {
            key: key("orders/43"),
            token: 1058,
            lease_ms: 60000,
        },
    ];

    // Client side: the requests encode to exactly the session's lines.
    let mut client = ClientCodec::default();
    let mut wire = BytesMut::new();
    for req in &expected {
        client.encode(req, &mut wire).unwrap();
    }
    client
        .encode(
            Request::Acquire {
                key: key("bad-lease"),
                wait_ms: 0,
                lease_ms: 0,
                options: AcquireOptions::default(),
            },
            &mut wire,
        )
        .unwrap();
    assert_eq!(&wire[..], &requests[..]);

    // Node side: they decode, the last one to the session's E.
    let mut server = ServerCodec::new(Limits::default());
    let items = decode_all(&mut server, requests, 3);
    assert_eq!(items.len(), 6);
    for (item, req) in items.iter().zip(&expected) {
        assert_eq!(item.as_ref(), Ok(req));
    }
    let err = items[5].clone().unwrap_err();
    let responses = [
        Response::Granted {
            key: key("orders/42"),
            token: 1057,
        },
        Response::Granted {
            key: key("orders/43"),
            token: 1058,
        },
        Response::Released {
            key: key("orders/42"),
        },
        Response::NotHeld {
            op: baton_proto::Op::Release,
            key: key("orders/42"),
        },
        Response::Renewed {
            key: key("orders/43"),
        },
        Response::Error(err.to_reply()),
    ];
    let mut wire = BytesMut::new();
    for (i, resp) in responses.iter().enumerate() {
        if i % 2 == 0 {
            server.encode(resp, &mut wire).unwrap();
        } else {
            server.encode(resp.clone(), &mut wire).unwrap();
        }
    }
    let text = b"A orders/42 1057\nA orders/43 1058\nR orders/42\nN R orders/42\nK orders/43\nE A bad-lease lease must be greater than 0\n";
    assert_eq!(&wire[..], &text[..]);

    // Client side again: the responses decode to what was sent.
    let mut decoded = Vec::new();
    while let Some(resp) = client.decode(&mut wire).unwrap() {
        decoded.push(resp);
    }
    assert_eq!(decoded, responses);
}

#[test]
fn the_client_refuses_an_overlong_or_malformed_response() {
    let mut client = ClientCodec::default();
    let mut buf = BytesMut::from(vec![b'x'; 4096].as_slice());
    assert!(matches!(
        client.decode(&mut buf),
        Err(ResponseError::LineTooLong { max: 4096 })
    ));

    let mut client = ClientCodec::with_max_line(16);
    let mut buf = BytesMut::from(&b"T fifteen-bytes!\n"[..]);
    assert!(matches!(
        client.decode(&mut buf),
        Err(ResponseError::LineTooLong { max: 16 })
    ));
    let mut client = ClientCodec::with_max_line(16);
    let mut buf = BytesMut::from(&b"T fourteen-byt\r\n"[..]);
    assert!(matches!(
        client.decode(&mut buf),
        Ok(Some(Response::TimedOut { .. }))
    ));

    let mut client = ClientCodec::default();
    let mut buf = BytesMut::from(&b"Z\n"[..]);
    assert!(matches!(
        client.decode(&mut buf),
        Err(ResponseError::UnknownKind)
    ));
}

#[test]
fn a_long_status_line_fits_the_client() {
    let mut line =
        b"S role=single mode=single self=a:1 active=- token=0 locks=0 waiters=0".to_vec();
    while line.len() < 4000 {
        line.extend_from_slice(b" pad=xxxxxxxxxx");
    }
    line.push(b'\n');
    let mut client = ClientCodec::default();
    let mut buf = BytesMut::from(line.as_slice());
    assert!(matches!(
        client.decode(&mut buf),
        Ok(Some(Response::Status(_)))
    ));
}
