//! Response lines: their exact bytes, how a client reads them, what it
//! refuses, and the (op, key) each one is matched by.

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test

use baton_core::Key;
use baton_proto::{
    parse_response, ErrorReply, Mode, Op, Response, ResponseError, Role, StatusReport,
};
use bytes::BytesMut;

fn key(k: &str) -> Key {
    Key::try_from(k).unwrap()
}

fn line(resp: &Response) -> String {
    let mut dst = BytesMut::new();
    resp.encode(&mut dst);
    String::from_utf8(dst.to_vec()).unwrap()
}

fn parse(line: &str) -> Response {
    parse_response(line.as_bytes()).unwrap_or_else(|e| panic!("{line:?} refused: {e}"))
}

fn single_status() -> StatusReport {
    StatusReport {
        role: Role::Single,
        mode: Mode::Single,
        self_addr: "127.0.0.1:7411".into(),
        active: Some("127.0.0.1:7411".into()),
        token: 0,
        locks: 0,
        waiters: 0,
        extra: Vec::new(),
    }
}

/// Every variant with its line, LF excluded.
fn samples() -> Vec<(Response, &'static str)> {
    vec![
        (
            Response::Granted {
                key: key("orders/42"),
                token: 1057,
            },
            "A orders/42 1057",
        ),
        (
            Response::TimedOut {
                key: key("orders/42"),
            },
            "T orders/42",
        ),
        (
            Response::Released {
                key: key("orders/42"),
            },
            "R orders/42",
        ),
        (
            Response::Renewed {
                key: key("orders/43"),
            },
            "K orders/43",
        ),
        (
            Response::NotHeld {
                op: Op::Release,
                key: key("orders/42"),
            },
            "N R orders/42",
        ),
        (
            Response::NotHeld {
                op: Op::Renew,
                key: key("orders/42"),
            },
            "N K orders/42",
        ),
        (
            Response::Moved {
                op: Op::Acquire,
                key: key("k"),
                addr: Some("10.0.0.2:7411".into()),
            },
            "M A k 10.0.0.2:7411",
        ),
        (
            Response::Moved {
                op: Op::Renew,
                key: key("k"),
                addr: None,
            },
            "M K k -",
        ),
        (
            Response::Error(ErrorReply {
                op: Some(Op::Acquire),
                key: Some(b"bad-lease".to_vec()),
                reason: "lease must be greater than 0".into(),
            }),
            "E A bad-lease lease must be greater than 0",
        ),
        (
            Response::Error(ErrorReply {
                op: None,
                key: None,
                reason: "line too long".into(),
            }),
            "E ? ? line too long",
        ),
        (
            Response::Status(single_status()),
            "S role=single mode=single self=127.0.0.1:7411 active=127.0.0.1:7411 token=0 locks=0 waiters=0",
        ),
        (
            Response::Status(StatusReport {
                role: Role::Follower,
                mode: Mode::Raft,
                active: None,
                token: 99,
                locks: 2,
                waiters: 5,
                extra: vec![("term".into(), "7".into())],
                ..single_status()
            }),
            "S role=follower mode=raft self=127.0.0.1:7411 active=- token=99 locks=2 waiters=5 term=7",
        ),
    ]
}

#[test]
fn every_variant_is_written_and_read_back() {
    for (resp, text) in samples() {
        assert_eq!(line(&resp), format!("{text}\n"));
        assert_eq!(parse(text), resp, "{text}");
    }
}

#[test]
fn the_example_session_responses_parse() {
    assert_eq!(
        parse("A orders/43 1058"),
        Response::Granted {
            key: key("orders/43"),
            token: 1058
        }
    );
    assert_eq!(
        parse("N R orders/42"),
        Response::NotHeld {
            op: Op::Release,
            key: key("orders/42")
        }
    );
}

#[test]
fn status_fields_come_in_any_order_with_unknown_ones_kept() {
    let resp = parse(
        "S waiters=1 future=x token=8 locks=2 active=- self=h:1 mode=priority role=active more=a=b",
    );
    assert_eq!(
        resp,
        Response::Status(StatusReport {
            role: Role::Active,
            mode: Mode::Priority,
            self_addr: "h:1".into(),
            active: None,
            token: 8,
            locks: 2,
            waiters: 1,
            extra: vec![("future".into(), "x".into()), ("more".into(), "a=b".into())],
        })
    );
}

#[test]
fn error_reasons_run_to_the_end_of_the_line() {
    assert_eq!(
        parse("E K k  two  spaces "),
        Response::Error(ErrorReply {
            op: Some(Op::Renew),
            key: Some(b"k".to_vec()),
            reason: " two  spaces ".into()
        })
    );
    assert_eq!(
        parse("E S ? "),
        Response::Error(ErrorReply {
            op: Some(Op::Status),
            key: None,
            reason: String::new()
        })
    );
}

fn refused(line: &[u8]) -> ResponseError {
    match parse_response(line) {
        Ok(resp) => panic!("{:?} accepted as {resp:?}", String::from_utf8_lossy(line)),
        Err(e) => e,
    }
}

#[test]
fn malformed_lines_are_refused() {
    assert!(matches!(refused(b""), ResponseError::EmptyLine));
    for bad in [&b"X k"[..], b"a k 1", b"AA k 1", b" A k 1", b"?"] {
        assert!(
            matches!(refused(bad), ResponseError::UnknownKind),
            "{bad:?}"
        );
    }
    for bad in [
        &b"A k"[..],
        b"A k 0",
        b"A k -1",
        b"A k 1 2",
        b"A k 18446744073709551616",
        b"A  k 1",
        b"A k 1 ",
        b"T",
        b"T k x",
        b"R",
        b"K k 1",
        b"N k",
        b"N A k",
        b"N S k",
        b"N R k x",
        b"M A k",
        b"M X k a:1",
        b"M A k a:1 x",
        b"E",
        b"E A",
        b"E A k",
        b"E X k reason",
        b"E A  reason",
        b"S role=single",
        b"S role=king mode=single self=a active=- token=0 locks=0 waiters=0",
        b"S role=single mode=paxos self=a active=- token=0 locks=0 waiters=0",
        b"S role=single mode=single self=a active=- token=x locks=0 waiters=0",
        b"S role=single mode=single self=a active= token=0 locks=0 waiters=0",
        b"S role=single mode=single self=a active=- token=0 locks=0 waiters=0 role=active",
        b"S role=single mode=single self=a active=- token=0 locks=0 waiters=0 bare",
        b"S role=single mode=single self=a active=- token=0 locks=0 waiters=0 =v",
        b"S role=single mode=single self=a active=- token=0 locks=0 waiters=0 x=\xff",
        b"S role=single mode=single self=a active=- token=0 locks=0 waiters=-1",
        b"S role=single  mode=single self=a active=- token=0 locks=0 waiters=0",
    ] {
        assert!(
            matches!(
                refused(bad),
                ResponseError::Malformed(_) | ResponseError::MissingStatusField(_)
            ),
            "{:?}",
            String::from_utf8_lossy(bad)
        );
    }
    assert!(matches!(
        refused(b"S role=single mode=single self=a token=0 locks=0 waiters=0"),
        ResponseError::MissingStatusField("active")
    ));
    for bad in [&b"A a\x01 1"[..], b"T a\x7f", b"R a\r"] {
        assert!(matches!(refused(bad), ResponseError::BadKey(_)), "{bad:?}");
    }
    let long = format!("T {}", "k".repeat(251));
    assert!(matches!(refused(long.as_bytes()), ResponseError::BadKey(_)));
}

#[test]
fn responses_name_the_op_and_key_they_answer() {
    let expected: Vec<(Option<Op>, Option<&[u8]>)> = vec![
        (Some(Op::Acquire), Some(b"orders/42")),
        (Some(Op::Acquire), Some(b"orders/42")),
        (Some(Op::Release), Some(b"orders/42")),
        (Some(Op::Renew), Some(b"orders/43")),
        (Some(Op::Release), Some(b"orders/42")),
        (Some(Op::Renew), Some(b"orders/42")),
        (Some(Op::Acquire), Some(b"k")),
        (Some(Op::Renew), Some(b"k")),
        (Some(Op::Acquire), Some(b"bad-lease")),
        (None, None),
        (Some(Op::Status), None),
        (Some(Op::Status), None),
    ];
    let samples = samples();
    assert_eq!(samples.len(), expected.len());
    for ((resp, text), (op, key)) in samples.iter().zip(expected) {
        assert_eq!((resp.op(), resp.key()), (op, key), "{text}");
    }
}
