//! Protocol 1.2's lines: acquire options, `V`, `W`, the extended `Q`
//! answer, each refusal's exact `E` line, and a property that every
//! combination of option fields is either read back the same or refused
//! with one `E A` line, as a model of the rules says.

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test

use baton_core::Key;
use baton_proto::{
    parse_request, parse_response, AcquireOptions, HolderValue, Limits, LockMode, Op, Request,
    Response, StateTag,
};
use bytes::BytesMut;
use proptest::prelude::*;

fn key(k: &str) -> Key {
    Key::try_from(k).unwrap()
}

fn parse(line: &str) -> Request {
    parse_request(line.as_bytes(), &Limits::default()).unwrap()
}

fn answer(line: &str) -> String {
    let err = parse_request(line.as_bytes(), &Limits::default()).unwrap_err();
    let mut dst = BytesMut::new();
    Response::Error(err.to_reply()).encode(&mut dst);
    String::from_utf8(dst.to_vec()).unwrap()
}

fn acquire(options: AcquireOptions) -> Request {
    Request::Acquire {
        key: key("k"),
        wait_ms: 1000,
        lease_ms: 2000,
        options,
    }
}

#[test]
fn options_are_read_in_any_order() {
    let value = HolderValue::try_from("10.0.0.7:80").unwrap();
    let both = AcquireOptions {
        permits: 4,
        mode: LockMode::Exclusive,
        value: Some(value.clone()),
    };
    assert_eq!(
        parse("A k 1 2 permits=4 value=10.0.0.7:80"),
        acquire(both.clone())
    );
    assert_eq!(parse("A k 1 2 value=10.0.0.7:80 permits=4"), acquire(both));
    let shared = AcquireOptions {
        mode: LockMode::Shared,
        ..AcquireOptions::default()
    };
    assert_eq!(parse("A k 1 2 mode=shared"), acquire(shared.clone()));
    assert_eq!(parse("A k 1 2 permits=1 mode=shared"), acquire(shared));
    assert_eq!(
        parse("A k 1 2 mode=exclusive permits=1"),
        acquire(AcquireOptions::default())
    );
    assert_eq!(
        parse("A k 1 2 value=a=b,c"),
        acquire(AcquireOptions {
            value: Some(HolderValue::try_from("a=b,c").unwrap()),
            ..AcquireOptions::default()
        })
    );
    assert_eq!(
        parse("A k 1 2 permits=10000").op(),
        Op::Acquire,
        "the largest semaphore"
    );
}

#[test]
fn every_bad_option_has_its_e_line() {
    for (line, reply) in [
        ("A k 1 2 x", "E A k too many fields\n"),
        ("A k 1 2 x=1", "E A k unknown option x\n"),
        ("A k 1 2 shared=1", "E A k unknown option shared\n"),
        ("A k 1 2 =1", "E A k unknown option ?\n"),
        (
            "A k 1 2 permits=2 permits=2",
            "E A k repeated option permits\n",
        ),
        (
            "A k 1 2 mode=shared mode=shared",
            "E A k repeated option mode\n",
        ),
        ("A k 1 2 value=a value=a", "E A k repeated option value\n"),
        (
            "A k 1 2 permits=0",
            "E A k permits must be a decimal integer from 1 to 10000\n",
        ),
        (
            "A k 1 2 permits=10001",
            "E A k permits must be a decimal integer from 1 to 10000\n",
        ),
        (
            "A k 1 2 permits=04",
            "E A k permits must be a decimal integer from 1 to 10000\n",
        ),
        (
            "A k 1 2 permits=+4",
            "E A k permits must be a decimal integer from 1 to 10000\n",
        ),
        (
            "A k 1 2 permits=",
            "E A k permits must be a decimal integer from 1 to 10000\n",
        ),
        ("A k 1 2 permits", "E A k too many fields\n"),
        (
            "A k 1 2 mode=Shared",
            "E A k mode must be shared or exclusive\n",
        ),
        (
            "A k 1 2 mode=shared permits=2",
            "E A k shared locks take no permits\n",
        ),
        (
            "A k 1 2 permits=3 mode=shared",
            "E A k shared locks take no permits\n",
        ),
        ("A k 1 2 value=", "E A k value is empty\n"),
        (
            "A k 1 2 value=-",
            "E A k value cannot be -, which means no value\n",
        ),
        (
            "A k 1 2 value=a\x01",
            "E A k value has a forbidden byte 0x01\n",
        ),
        ("A k 1 2 mode=shared ", "E A k empty field\n"),
        ("V k 1", "E V k missing value\n"),
        (
            "V k 0 a",
            "E V k token must be a decimal integer greater than 0\n",
        ),
        ("V k 1 a b", "E V k too many fields\n"),
        ("V k 1 a\x7f", "E V k value has a forbidden byte 0x7f\n"),
        ("W k 1", "E W k missing seen\n"),
        (
            "W k x -",
            "E W k wait is not a decimal number of seconds with at most 3 decimals\n",
        ),
        (
            "W k 1 07",
            "E W k seen must be - or a state tag from a Q or W answer\n",
        ),
        ("W k 1 - x", "E W k too many fields\n"),
    ] {
        assert_eq!(answer(line), reply, "{line:?}");
    }
    let long = format!("A k 1 2 value={}", "v".repeat(129));
    assert_eq!(answer(&long), "E A k value is 129 bytes, longer than 128\n");
    let long = format!("A k 1 2 {}=1", "o".repeat(33));
    assert_eq!(answer(&long), "E A k unknown option ?\n");
}

#[test]
fn v_and_w_requests_read_as_written() {
    assert_eq!(
        parse("V k 7 leader-1"),
        Request::SetValue {
            key: key("k"),
            token: 7,
            value: Some(HolderValue::try_from("leader-1").unwrap()),
        }
    );
    assert_eq!(
        parse("V k 7 -"),
        Request::SetValue {
            key: key("k"),
            token: 7,
            value: None,
        }
    );
    assert_eq!(
        parse("W k 0 -"),
        Request::Watch {
            key: key("k"),
            wait_ms: 0,
            seen: StateTag::Free,
        }
    );
    assert_eq!(
        parse("W k 2.5 12.3.00000000000000ab"),
        Request::Watch {
            key: key("k"),
            wait_ms: 2500,
            seen: StateTag::Holders {
                newest: 12,
                count: 3,
                hash: 0xab
            },
        }
    );
}

#[test]
fn new_answers_are_matched_by_their_op() {
    for (line, op) in [
        ("V k", Op::SetValue),
        ("N V k", Op::SetValue),
        ("M W k 127.0.0.1:7411", Op::Watch),
        ("M W k -", Op::Watch),
        ("E W k too many watches", Op::Watch),
        ("W k token=- lease=- waiters=0 state=-", Op::Watch),
        ("W k token=5 lease=1.000 waiters=2 state=5", Op::Watch),
        (
            "Q k token=9 lease=1.000 waiters=0 permits=2 mode=exclusive holders=2 \
             holder=5,0.500,- holder=9,1.000,a,b state=9.2.00000000000000ab",
            Op::Query,
        ),
    ] {
        let resp = parse_response(line.as_bytes()).unwrap_or_else(|e| panic!("{line}: {e}"));
        assert_eq!(resp.op(), Some(op), "{line}");
        assert_eq!(resp.key(), Some(&b"k"[..]), "{line}");
        let mut dst = BytesMut::new();
        resp.encode(&mut dst);
        assert_eq!(&dst[..dst.len() - 1], line.as_bytes());
    }
}

#[test]
fn inconsistent_q_and_w_answers_are_refused() {
    for line in [
        "W k token=5 lease=1.000 waiters=0",
        "W k token=5 lease=1.000 waiters=0 state=6",
        "W k token=- lease=- waiters=0 state=5",
        "Q k token=5 lease=1.000 waiters=0 state=5",
        "Q k token=5 lease=1.000 waiters=0 permits=2 mode=exclusive holders=1 holder=5,1.000,-",
        "Q k token=5 lease=1.000 waiters=0 permits=2 mode=exclusive holders=2 holder=5,1.000,- state=5.2.00000000000000ab",
        "Q k token=5 lease=1.000 waiters=0 permits=0 mode=exclusive holders=1 holder=5,1.000,- state=5.1.00000000000000ab",
        "Q k token=5 lease=1.000 waiters=0 permits=1 mode=both holders=1 holder=5,1.000,- state=5.1.00000000000000ab",
        "Q k token=5 lease=1.000 waiters=0 permits=1 mode=shared holders=1 holder=5,1.000 state=5.1.00000000000000ab",
        "Q k token=- lease=- waiters=0 permits=1 mode=shared holders=1 holder=5,1.000,- state=5.1.00000000000000ab",
        "N A k",
        "V k x",
    ] {
        assert!(parse_response(line.as_bytes()).is_err(), "{line}");
    }
}

/// One option field, good or bad, as a client might write it.
fn option_field() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "0", "1", "2", "4", "10000", "10001", "01", "+1", "", "x"
        ])
        .prop_map(|n| format!("permits={n}")),
        prop::sample::select(vec!["shared", "exclusive", "Shared", ""])
            .prop_map(|m| format!("mode={m}")),
        "[!-~]{0,3}".prop_map(|v| format!("value={v}")),
        Just("permits".to_owned()),
        Just("value".to_owned()),
        "[a-z]{1,6}=[0-9]".prop_map(|f| f),
    ]
}

/// What the rules of docs/protocol.md make of `fields`: the options, or
/// the reason of the `E A` line.
fn model(fields: &[String]) -> Result<AcquireOptions, String> {
    let mut options = AcquireOptions::default();
    let mut seen: Vec<&str> = Vec::new();
    for field in fields {
        let Some((name, text)) = field.split_once('=') else {
            return Err("too many fields".into());
        };
        if !["permits", "mode", "value"].contains(&name) {
            return Err(format!("unknown option {name}"));
        }
        if seen.contains(&name) {
            return Err(format!("repeated option {name}"));
        }
        seen.push(name);
        match name {
            "permits" => match text.parse::<u32>() {
                Ok(n) if (1..=10_000).contains(&n) && !text.starts_with(['0', '+']) => {
                    options.permits = n
                }
                _ => return Err("permits must be a decimal integer from 1 to 10000".into()),
            },
            "mode" => match text {
                "shared" => options.mode = LockMode::Shared,
                "exclusive" => options.mode = LockMode::Exclusive,
                _ => return Err("mode must be shared or exclusive".into()),
            },
            _ => match HolderValue::try_from(text) {
                Ok(v) => options.value = Some(v),
                Err(e) => return Err(e.to_string()),
            },
        }
    }
    if options.mode == LockMode::Shared && options.permits != 1 {
        return Err("shared locks take no permits".into());
    }
    Ok(options)
}

proptest! {
    #[test]
    fn option_fields_are_taken_or_refused_as_the_rules_say(
        fields in prop::collection::vec(option_field(), 0..5),
    ) {
        let mut line = "A k 1 2".to_owned();
        for field in &fields {
            line.push(' ');
            line.push_str(field);
        }
        match (parse_request(line.as_bytes(), &Limits::default()), model(&fields)) {
            (Ok(request), Ok(options)) => {
                prop_assert_eq!(&request, &acquire(options));
                let mut dst = BytesMut::new();
                request.encode(&mut dst);
                let back = parse_request(&dst[..dst.len() - 1], &Limits::default());
                prop_assert_eq!(back, Ok(request));
            }
            (Err(err), Err(reason)) => {
                prop_assert_eq!(err.op, Some(Op::Acquire));
                prop_assert_eq!(err.key.as_deref(), Some(&b"k"[..]));
                prop_assert_eq!(err.to_string(), reason);
            }
            (got, expected) => prop_assert!(false, "{:?}: got {:?}, model {:?}", line, got, expected),
        }
    }
}
