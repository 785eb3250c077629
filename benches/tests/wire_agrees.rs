//! The bench speaks Baton's protocol with a codec of its own (`wire`,
//! `echo`, `status`: hand-written so the driver's cost stays small). These
//! properties hold it to baton-proto, the protocol's owner, both ways:
//! what the bench writes, baton-proto reads as meant, and what baton-proto
//! writes, the bench reads as meant (or, for what the driver never
//! expects, as `Other`).

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test

use baton_bench::echo;
use baton_bench::status::Status;
use baton_bench::wire::{self, Reply};
use baton_core::{Key, MAX_KEY_LEN};
use baton_proto::{
    parse_request, parse_response, ErrorReply, Limits, Mode, Op, Request, Response, Role,
    StatusReport,
};
use bytes::BytesMut;
use proptest::prelude::*;

/// Up to a day, the default maximum, so every acquire is one a node takes.
const MAX_MS: u64 = 86_400_000;

/// Keys as docs/protocol.md allows them: printable bytes and UTF-8 bytes, no
/// space, no control byte, 1 to 250 of them.
fn key() -> impl Strategy<Value = Key> {
    let byte = prop_oneof![0x21u8..=0x7e, 0x80u8..=0xff];
    proptest::collection::vec(byte, 1..=MAX_KEY_LEN).prop_map(|k| Key::new(&k).unwrap())
}

/// The requests the bench writes: acquires and releases.
fn bench_request() -> impl Strategy<Value = Request> {
    prop_oneof![
        (key(), 0..=MAX_MS, 1..=MAX_MS).prop_map(|(key, wait_ms, lease_ms)| Request::Acquire {
            key,
            wait_ms,
            lease_ms,
            options: baton_proto::AcquireOptions::default(),
        }),
        (key(), 1..=u64::MAX).prop_map(|(key, token)| Request::Release { key, token }),
    ]
}

/// Every request baton-proto can write.
fn any_request() -> impl Strategy<Value = Request> {
    prop_oneof![
        bench_request(),
        (key(), 1..=u64::MAX, 1..=MAX_MS).prop_map(|(key, token, lease_ms)| Request::Renew {
            key,
            token,
            lease_ms
        }),
        Just(Request::Status),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop::sample::select(vec![Op::Acquire, Op::Release, Op::Renew, Op::Status])
}

fn status_report() -> impl Strategy<Value = StatusReport> {
    let roles = prop::sample::select(Role::ALL.to_vec());
    let modes = prop::sample::select(Mode::ALL.to_vec());
    let numbers = (any::<u64>(), any::<u64>(), any::<u64>());
    let active = proptest::option::of("127\\.0\\.0\\.1:[0-9]{1,5}");
    (roles, modes, active, numbers).prop_map(|(role, mode, active, (token, locks, waiters))| {
        StatusReport {
            role,
            mode,
            self_addr: "127.0.0.1:7411".into(),
            active,
            token,
            locks,
            waiters,
            extra: Vec::new(),
        }
    })
}

/// Every response baton-proto can write.
fn any_response() -> impl Strategy<Value = Response> {
    let reply = (proptest::option::of(op()), "[ -~]{0,40}")
        .prop_map(|(op, reason)| ErrorReply {
            op,
            key: None,
            reason,
        })
        .prop_map(Response::Error);
    prop_oneof![
        (key(), 1..=u64::MAX).prop_map(|(key, token)| Response::Granted { key, token }),
        key().prop_map(|key| Response::TimedOut { key }),
        key().prop_map(|key| Response::Released { key }),
        key().prop_map(|key| Response::Renewed { key }),
        (prop::sample::select(vec![Op::Release, Op::Renew]), key())
            .prop_map(|(op, key)| Response::NotHeld { op, key }),
        (op(), key(), proptest::option::of("[a-z0-9.:]{1,20}"))
            .prop_map(|(op, key, addr)| Response::Moved { op, key, addr }),
        reply,
        status_report().prop_map(Response::Status),
    ]
}

/// The bench's encoding of a request it sends.
fn bench_encode(request: &Request) -> Vec<u8> {
    let mut out = Vec::new();
    match request {
        Request::Acquire {
            key,
            wait_ms,
            lease_ms,
            options,
        } if options.is_plain() => wire::acquire(&mut out, key.as_bytes(), *wait_ms, *lease_ms),
        Request::Release { key, token } => wire::release(&mut out, key.as_bytes(), *token),
        other => panic!("the bench never sends {other:?}"),
    }
    out
}

fn proto_encode(encode: impl FnOnce(&mut BytesMut)) -> Vec<u8> {
    let mut dst = BytesMut::new();
    encode(&mut dst);
    dst.to_vec()
}

/// One line without its LF, checking there is exactly one.
fn one_line(bytes: &[u8]) -> &[u8] {
    let line = bytes.strip_suffix(b"\n").expect("a line ends in LF");
    assert!(!line.contains(&b'\n'), "one line: {bytes:?}");
    line
}

/// What the driver's reply parser should make of a response.
fn as_bench_reply(response: &Response) -> Reply<'_> {
    match response {
        Response::Granted { key, token } => Reply::Granted {
            key: key.as_bytes(),
            token: *token,
        },
        Response::Released { key } => Reply::Released {
            key: key.as_bytes(),
        },
        Response::TimedOut { key } => Reply::TimedOut {
            key: key.as_bytes(),
        },
        _ => Reply::Other,
    }
}

proptest! {
    /// What the bench writes, baton-proto reads back as the same request,
    /// byte for byte the line baton-proto itself would write.
    #[test]
    fn bench_requests_read_as_meant(request in bench_request()) {
        let line = bench_encode(&request);
        prop_assert_eq!(&line, &proto_encode(|dst| request.encode(dst)));
        let parsed = parse_request(one_line(&line), &Limits::default());
        prop_assert_eq!(parsed, Ok(request));
    }

    /// What baton-proto writes, the driver reads as the same response; any
    /// response the driver never expects under load is `Other`.
    #[test]
    fn proto_responses_read_as_meant(response in any_response()) {
        let line = proto_encode(|dst| response.encode(dst));
        prop_assert_eq!(wire::parse_reply(one_line(&line)), as_bench_reply(&response));
    }

    /// The echo ceiling reads any request baton-proto writes and answers
    /// with a line baton-proto reads as the answer to that request.
    #[test]
    fn echo_answers_proto_requests_as_baton_would(request in any_request()) {
        let line = proto_encode(|dst| request.encode(dst));
        let mut answer = Vec::new();
        let mut tokens = 0;
        echo::answer(one_line(&line), &mut tokens, &mut answer);
        let response = parse_response(one_line(&answer)).unwrap();
        prop_assert_eq!(response.op(), Some(request.op()));
        prop_assert_eq!(response.key(), request.key().map(Key::as_bytes));
        if let Response::Granted { token, .. } = response {
            prop_assert_eq!(token, 1);
        }
    }

    /// The responses the echo server writes, baton-proto reads, and the
    /// driver reads them the same way baton-proto does.
    #[test]
    fn echo_responses_agree_with_proto(request in bench_request()) {
        let mut answer = Vec::new();
        echo::answer(one_line(&bench_encode(&request)), &mut 41, &mut answer);
        let response = parse_response(one_line(&answer)).unwrap();
        prop_assert_eq!(wire::parse_reply(one_line(&answer)), as_bench_reply(&response));
    }

    /// The bench's `S` reader finds every field baton-proto writes.
    #[test]
    fn status_fields_read_as_written(report in status_report()) {
        let line = proto_encode(|dst| Response::Status(report.clone()).encode(dst));
        let status = Status::parse(std::str::from_utf8(&line).unwrap()).unwrap();
        prop_assert_eq!(status.get("role"), Some(report.role.as_str()));
        prop_assert_eq!(status.get("mode"), Some(report.mode.as_str()));
        prop_assert_eq!(status.get("active"), Some(report.active.as_deref().unwrap_or("-")));
        prop_assert_eq!(status.number("token"), Some(report.token));
        prop_assert_eq!(status.number("locks"), Some(report.locks));
        prop_assert_eq!(status.number("waiters"), Some(report.waiters));
    }
}

/// The refused line a full node writes: the driver sees a protocol error
/// (`Other`), not a grant, and baton-proto owns its bytes.
#[test]
fn the_refused_line_is_other_to_the_driver() {
    let line = baton_proto::connection_refused_line();
    assert_eq!(wire::parse_reply(one_line(&line)), Reply::Other);
}
