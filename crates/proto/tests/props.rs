//! Property tests: every request and response survives encode then parse,
//! and arbitrary bytes cut at arbitrary points never panic the codecs, with
//! the node's codec yielding exactly one item per line.

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test

use baton_core::{Key, KeyState, LiveGrant, MAX_KEY_LEN};
use baton_proto::{
    parse_request, parse_response, AcquireOptions, ClientCodec, ErrorReply, HolderState,
    HolderValue, KeyDetail, Limits, LockMode, Mode, Op, Request, RequestError, RequestErrorKind,
    Response, Role, Secret, ServerCodec, StateTag, StatusReport, MAX_LISTED_HOLDERS, MAX_PERMITS,
    MAX_REQUEST_LINE, MAX_RESPONSE_LINE, MAX_SECRET_LEN, MAX_VALUE_LEN,
};
use bytes::BytesMut;
use proptest::collection::vec;
use proptest::prelude::*;
use tokio_util::codec::{Decoder, Encoder};

const DAY_MS: u64 = 86_400_000;

fn key_bytes() -> impl Strategy<Value = Vec<u8>> {
    vec(prop_oneof![0x21u8..=0x7e, 0x80u8..=0xff], 1..=MAX_KEY_LEN)
}

fn key() -> impl Strategy<Value = Key> {
    key_bytes().prop_map(|k| Key::new(&k).unwrap())
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        Just(Op::Acquire),
        Just(Op::Release),
        Just(Op::Renew),
        Just(Op::Status),
        Just(Op::Auth),
        Just(Op::Query),
        Just(Op::SetValue),
        Just(Op::Watch)
    ]
}

/// Values follow the key rules' byte set, up to their own length.
fn value() -> impl Strategy<Value = HolderValue> {
    vec(prop_oneof![0x21u8..=0x7e, 0x80u8..=0xff], 1..=MAX_VALUE_LEN)
        .prop_filter("not -", |v| v != b"-")
        .prop_map(|v| HolderValue::new(&v).unwrap())
}

fn options() -> impl Strategy<Value = AcquireOptions> {
    prop_oneof![
        Just(AcquireOptions::default()),
        (1..=MAX_PERMITS, proptest::option::of(value())).prop_map(|(permits, value)| {
            AcquireOptions {
                permits,
                mode: LockMode::Exclusive,
                value,
            }
        }),
        proptest::option::of(value()).prop_map(|value| AcquireOptions {
            permits: 1,
            mode: LockMode::Shared,
            value,
        }),
    ]
}

fn tag() -> impl Strategy<Value = StateTag> {
    prop_oneof![
        Just(StateTag::Free),
        (1..=u64::MAX).prop_map(StateTag::Plain),
        (1..=u64::MAX, 1..=u64::MAX, any::<u64>()).prop_map(|(newest, count, hash)| {
            StateTag::Holders {
                newest,
                count,
                hash,
            }
        }),
    ]
}

/// Secrets follow the key rules' byte set, up to their own length.
fn secret() -> impl Strategy<Value = Secret> {
    vec(
        prop_oneof![0x21u8..=0x7e, 0x80u8..=0xff],
        1..=MAX_SECRET_LEN,
    )
    .prop_map(|s| Secret::new(&s).unwrap())
}

fn request() -> impl Strategy<Value = Request> {
    prop_oneof![
        (key(), 0..=DAY_MS, 1..=DAY_MS, options()).prop_map(|(key, wait_ms, lease_ms, options)| {
            Request::Acquire {
                key,
                wait_ms,
                lease_ms,
                options,
            }
        }),
        (key(), 1..=u64::MAX, proptest::option::of(value()))
            .prop_map(|(key, token, value)| Request::SetValue { key, token, value }),
        (key(), 0..=DAY_MS, tag()).prop_map(|(key, wait_ms, seen)| Request::Watch {
            key,
            wait_ms,
            seen
        }),
        (key(), 1..=u64::MAX).prop_map(|(key, token)| Request::Release { key, token }),
        (key(), 1..=u64::MAX, 1..=DAY_MS).prop_map(|(key, token, lease_ms)| Request::Renew {
            key,
            token,
            lease_ms
        }),
        Just(Request::Status),
        (key(), secret()).prop_map(|(user, secret)| Request::Auth { user, secret }),
        key().prop_map(|key| Request::Query { key }),
    ]
}

fn addr() -> impl Strategy<Value = String> {
    "[a-z0-9.:\\[\\]]{1,30}"
}

fn status() -> impl Strategy<Value = StatusReport> {
    (
        prop::sample::select(Role::ALL.to_vec()),
        prop::sample::select(Mode::ALL.to_vec()),
        addr(),
        proptest::option::of(addr()),
        any::<u64>(),
        any::<u64>(),
        any::<u64>(),
        // Prefixed so no extra is mistaken for a known field.
        vec(("x_[a-z_]{0,8}", "[a-z0-9=.:-]{0,12}"), 0..4),
    )
        .prop_map(
            |(role, mode, self_addr, active, token, locks, waiters, extra)| StatusReport {
                role,
                mode,
                self_addr,
                active,
                token,
                locks,
                waiters,
                extra,
            },
        )
}

fn error_reply() -> impl Strategy<Value = ErrorReply> {
    (
        proptest::option::of(op()),
        // A key that is literally `?` reads back as "no key": not generated.
        proptest::option::of(key_bytes().prop_filter("not ?", |k| k != b"?")),
        "[^\r\n]{0,60}",
    )
        .prop_map(|(op, key, reason)| ErrorReply { op, key, reason })
}

fn plain_state() -> impl Strategy<Value = KeyState> {
    (
        proptest::option::of((1..=u64::MAX, 1..=u64::MAX / 2)),
        0..=u64::MAX,
    )
        .prop_map(|(grant, waiters)| {
            let grant = grant.map(|(token, lease_left_ms)| LiveGrant {
                token,
                lease_left_ms,
            });
            KeyState::plain(grant, waiters)
        })
}

fn holder() -> impl Strategy<Value = HolderState> {
    (
        1..=u64::MAX,
        1..=u64::MAX / 2,
        proptest::option::of(value()),
    )
        .prop_map(|(token, lease_left_ms, value)| HolderState {
            token,
            lease_left_ms,
            value,
        })
}

/// A key that is not plain: its holders, as many listed as the count says.
fn detailed_state() -> impl Strategy<Value = KeyState> {
    (
        (1..=u64::MAX, 1..=u64::MAX / 2, 0..=u64::MAX),
        1..=MAX_PERMITS,
        prop_oneof![Just(LockMode::Exclusive), Just(LockMode::Shared)],
        vec(holder(), 1..=MAX_LISTED_HOLDERS),
        0..=1_000_000u64,
        (1..=u64::MAX, any::<u64>()),
    )
        .prop_map(
            |((token, lease_left_ms, waiters), permits, mode, holders, more, (count, hash))| {
                let listed = holders.len() as u64;
                let holder_count = if listed == MAX_LISTED_HOLDERS as u64 {
                    listed + more
                } else {
                    listed
                };
                KeyState {
                    grant: Some(LiveGrant {
                        token,
                        lease_left_ms,
                    }),
                    waiters,
                    detail: Some(Box::new(KeyDetail {
                        permits,
                        mode,
                        holder_count,
                        holders,
                        tag: StateTag::Holders {
                            newest: token,
                            count,
                            hash,
                        },
                    })),
                }
            },
        )
}

fn key_state() -> impl Strategy<Value = KeyState> {
    prop_oneof![plain_state(), detailed_state()]
}

fn response() -> impl Strategy<Value = Response> {
    prop_oneof![
        (key(), 1..=u64::MAX).prop_map(|(key, token)| Response::Granted { key, token }),
        key().prop_map(|key| Response::TimedOut { key }),
        key().prop_map(|key| Response::Released { key }),
        key().prop_map(|key| Response::Renewed { key }),
        (
            prop_oneof![Just(Op::Release), Just(Op::Renew), Just(Op::SetValue)],
            key()
        )
            .prop_map(|(op, key)| Response::NotHeld { op, key }),
        key().prop_map(|key| Response::ValueSet { key }),
        (key(), key_state()).prop_map(|(key, state)| Response::Watched { key, state }),
        (op(), key(), proptest::option::of(addr())).prop_map(|(op, key, addr)| Response::Moved {
            op,
            key,
            addr
        }),
        error_reply().prop_map(Response::Error),
        status().prop_map(Response::Status),
        key().prop_map(|user| Response::Authenticated { user }),
        (key(), key_state()).prop_map(|(key, state)| Response::Queried { key, state }),
    ]
}

/// A line of `len` bytes with its ending, content a valid-looking prefix.
fn sized_line(len: usize, crlf: bool, terminated: bool) -> Vec<u8> {
    let mut line = b"A k 1 ".to_vec();
    line.resize(len.max(line.len()), b'1');
    match (terminated, crlf) {
        (false, _) => {}
        (true, false) => line.push(b'\n'),
        (true, true) => line.extend_from_slice(b"\r\n"),
    }
    line
}

/// Byte streams likely to hit every path: noise, protocol-ish bytes, lines
/// right around the length limit, and well-formed requests.
fn stream() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        vec(any::<u8>(), 0..3000),
        // Mostly protocol bytes, some noise; mapped from plain bytes
        // because that generates and shrinks far faster than a union.
        vec(any::<u8>(), 0..3000).prop_map(|bytes| {
            const ALPHABET: &[u8] = b"\n\r AKRSTNMESUVWQ=.,01?-kpmv";
            bytes
                .into_iter()
                .map(|b| match ALPHABET.get(usize::from(b % 32)) {
                    Some(&a) => a,
                    None => b,
                })
                .collect()
        }),
        vec(
            (
                prop_oneof![1015usize..1030, 4088usize..4100],
                any::<bool>(),
                any::<bool>()
            ),
            0..5
        )
        .prop_map(|lines| {
            lines
                .into_iter()
                .flat_map(|(len, crlf, terminated)| sized_line(len, crlf, terminated))
                .collect()
        }),
        vec(request(), 0..8).prop_map(|reqs| {
            let mut dst = BytesMut::new();
            reqs.iter().for_each(|r| r.encode(&mut dst));
            dst.to_vec()
        }),
        vec(response(), 0..8).prop_map(|resps| {
            let mut dst = BytesMut::new();
            resps.iter().for_each(|r| r.encode(&mut dst));
            dst.to_vec()
        }),
    ]
}

/// Cuts `input` into pieces whose sizes cycle through `sizes`.
fn pieces<'a>(input: &'a [u8], sizes: &'a [usize]) -> impl Iterator<Item = &'a [u8]> + 'a {
    let mut at = 0;
    sizes.iter().cycle().map_while(move |&size| {
        if at >= input.len() {
            return None;
        }
        let end = (at + size).min(input.len());
        let piece = &input[at..end];
        at = end;
        Some(piece)
    })
}

fn server_decode(input: &[u8], sizes: &[usize]) -> Vec<Result<Request, RequestError>> {
    let mut codec = ServerCodec::default();
    let mut buf = BytesMut::new();
    let mut items = Vec::new();
    for piece in pieces(input, sizes) {
        buf.extend_from_slice(piece);
        while let Some(item) = codec.decode(&mut buf).unwrap() {
            items.push(item);
        }
        assert!(buf.len() < MAX_REQUEST_LINE);
    }
    while let Some(item) = codec.decode_eof(&mut buf).unwrap() {
        items.push(item);
    }
    assert!(buf.is_empty());
    items
}

/// Splits `input` at each LF: the terminated lines (LF included) and the
/// unterminated tail.
fn lines(input: &[u8]) -> (Vec<&[u8]>, &[u8]) {
    let mut lines = Vec::new();
    let mut rest = input;
    while let Some(lf) = rest.iter().position(|&b| b == b'\n') {
        lines.push(&rest[..=lf]);
        rest = &rest[lf + 1..];
    }
    (lines, rest)
}

fn content(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

fn too_long() -> Result<Request, RequestError> {
    Err(RequestError {
        op: None,
        key: None,
        kind: RequestErrorKind::LineTooLong,
    })
}

proptest! {
    #[test]
    fn requests_round_trip(req in request()) {
        let mut dst = BytesMut::new();
        req.encode(&mut dst);
        prop_assert_eq!(dst.last(), Some(&b'\n'));
        prop_assert!(dst.len() <= MAX_REQUEST_LINE);
        let line = &dst[..dst.len() - 1];
        prop_assert!(!line.contains(&b'\n'));
        prop_assert_eq!(parse_request(line, &Limits::default()), Ok(req));
    }

    #[test]
    fn responses_round_trip(resp in response()) {
        let mut dst = BytesMut::new();
        resp.encode(&mut dst);
        prop_assert_eq!(dst.last(), Some(&b'\n'));
        prop_assert!(dst.len() <= MAX_RESPONSE_LINE);
        let line = &dst[..dst.len() - 1];
        prop_assert!(!line.contains(&b'\n'));
        prop_assert_eq!(parse_response(line).unwrap(), resp);
    }

    #[test]
    fn requests_survive_the_codecs_cut_anywhere(
        reqs in vec(request(), 0..10),
        sizes in vec(1usize..600, 1..10),
    ) {
        let mut wire = BytesMut::new();
        let mut client = ClientCodec::default();
        for req in &reqs {
            client.encode(req, &mut wire).unwrap();
        }
        let got: Vec<_> = server_decode(&wire, &sizes).into_iter().map(Result::unwrap).collect();
        prop_assert_eq!(got, reqs);
    }

    #[test]
    fn responses_survive_the_codecs_cut_anywhere(
        resps in vec(response(), 0..10),
        sizes in vec(1usize..600, 1..10),
    ) {
        let mut wire = BytesMut::new();
        let mut server = ServerCodec::default();
        for resp in &resps {
            server.encode(resp, &mut wire).unwrap();
        }
        let mut client = ClientCodec::default();
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for piece in pieces(&wire, &sizes) {
            buf.extend_from_slice(piece);
            while let Some(resp) = client.decode(&mut buf).unwrap() {
                got.push(resp);
            }
        }
        prop_assert!(client.decode_eof(&mut buf).unwrap().is_none());
        prop_assert_eq!(got, resps);
    }

    #[test]
    fn the_node_codec_yields_one_item_per_line(
        input in stream(),
        sizes in vec(1usize..1100, 1..10),
    ) {
        let (terminated, tail) = lines(&input);
        let mut expected: Vec<_> = terminated
            .iter()
            .map(|line| {
                if line.len() <= MAX_REQUEST_LINE {
                    parse_request(content(line), &Limits::default())
                } else {
                    too_long()
                }
            })
            .collect();
        if tail.len() >= MAX_REQUEST_LINE {
            expected.push(too_long());
        }
        prop_assert_eq!(server_decode(&input, &sizes), expected);
    }

    #[test]
    fn the_client_codec_reads_lines_until_the_first_bad_one(
        input in stream(),
        sizes in vec(1usize..5000, 1..10),
    ) {
        let (terminated, tail) = lines(&input);
        let mut expected = Vec::new();
        let mut expect_error = tail.len() >= MAX_RESPONSE_LINE;
        for line in terminated {
            match (line.len() <= MAX_RESPONSE_LINE).then(|| parse_response(content(line))) {
                Some(Ok(resp)) => expected.push(resp),
                _ => {
                    expect_error = true;
                    break;
                }
            }
        }

        let mut client = ClientCodec::default();
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        let mut failed = false;
        'feed: for piece in pieces(&input, &sizes) {
            buf.extend_from_slice(piece);
            loop {
                match client.decode(&mut buf) {
                    Ok(Some(resp)) => got.push(resp),
                    Ok(None) => break,
                    Err(_) => {
                        failed = true;
                        break 'feed;
                    }
                }
                prop_assert!(got.len() <= input.len());
            }
            prop_assert!(buf.len() < MAX_RESPONSE_LINE);
        }
        if !failed {
            prop_assert!(client.decode_eof(&mut buf).unwrap().is_none());
        }
        prop_assert_eq!(got, expected);
        prop_assert_eq!(failed, expect_error);
    }

    #[test]
    fn every_refusal_is_one_e_line_a_client_can_read(line in stream()) {
        let line = &line[..line.len().min(MAX_REQUEST_LINE - 1)];
        let line = line.split(|&b| b == b'\n').next().unwrap_or_default();
        match parse_request(line, &Limits::default()) {
            Ok(req) => {
                // What a node accepts, it can write back the same way.
                let mut dst = BytesMut::new();
                req.encode(&mut dst);
                prop_assert_eq!(parse_request(content(&dst), &Limits::default()), Ok(req));
            }
            Err(err) => {
                let reply = err.to_reply();
                let mut dst = BytesMut::new();
                Response::Error(reply.clone()).encode(&mut dst);
                prop_assert_eq!(dst.iter().filter(|&&b| b == b'\n').count(), 1);
                match parse_response(content(&dst)).unwrap() {
                    Response::Error(back) => {
                        prop_assert_eq!(back.op, reply.op);
                        prop_assert_eq!(back.reason, reply.reason);
                        if reply.key.as_deref() != Some(b"?") {
                            prop_assert_eq!(back.key, reply.key);
                        }
                    }
                    other => prop_assert!(false, "read back as {:?}", other),
                }
            }
        }
    }

    #[test]
    fn malformed_auth_lines_are_one_e_u_line_without_the_secret(
        user in key_bytes(),
        secret in vec(any::<u8>(), 0..300),
        extra in proptest::option::of("[a-z]{0,3}"),
    ) {
        // A line cannot carry an LF: the secret is drawn without one (one
        // with an LF filtered out of the line alone was valid once read).
        let secret: Vec<u8> = secret.into_iter().filter(|&b| b != b'\n').collect();
        let mut line = b"U ".to_vec();
        line.extend_from_slice(&user);
        line.push(b' ');
        line.extend_from_slice(&secret);
        if let Some(extra) = &extra {
            line.push(b' ');
            line.extend_from_slice(extra.as_bytes());
        }
        let line: Vec<u8> = line.into_iter().filter(|&b| b != b'\n').collect();
        let valid = extra.is_none()
            && !secret.is_empty()
            && secret.len() <= MAX_SECRET_LEN
            && secret.iter().all(|&b| b > b' ' && b != 0x7f);
        match parse_request(&line, &Limits::default()) {
            Ok(Request::Auth { user: got_user, secret: got }) => {
                prop_assert!(valid, "accepted {:?}", line);
                prop_assert_eq!(got_user.as_bytes(), &user[..]);
                prop_assert_eq!(got.as_bytes(), &secret[..]);
            }
            Ok(other) => prop_assert!(false, "read as {:?}", other),
            Err(err) => {
                prop_assert!(!valid, "refused {:?}: {}", line, err);
                prop_assert_eq!(err.op, Some(Op::Auth));
                let mut dst = BytesMut::new();
                Response::Error(err.to_reply()).encode(&mut dst);
                prop_assert_eq!(dst.iter().filter(|&&b| b == b'\n').count(), 1);
                // The reply names the user at most, never the secret.
                if secret.len() >= 4 && !user.windows(secret.len()).any(|w| w == &secret[..]) {
                    prop_assert!(!dst.windows(secret.len()).any(|w| w == &secret[..]));
                }
                prop_assert!(matches!(parse_response(content(&dst)), Ok(Response::Error(_))));
            }
        }
    }
}
