//! Request lines against docs/protocol.md: what is accepted, and the exact `E`
//! line every refusal is answered with.

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test

use baton_core::Key;
use baton_proto::{parse_request, AcquireOptions, Limits, Request, RequestErrorKind, Response};
use bytes::BytesMut;

fn key(k: &str) -> Key {
    Key::try_from(k).unwrap()
}

fn parse(line: &[u8]) -> Request {
    parse_request(line, &Limits::default())
        .unwrap_or_else(|e| panic!("{:?} refused: {e}", String::from_utf8_lossy(line)))
}

/// The `E` line a node answers `line` with, LF included.
fn answer_with(line: &[u8], limits: &Limits) -> String {
    let err = parse_request(line, limits)
        .err()
        .unwrap_or_else(|| panic!("{:?} accepted", String::from_utf8_lossy(line)));
    let mut dst = BytesMut::new();
    Response::Error(err.to_reply()).encode(&mut dst);
    String::from_utf8(dst.to_vec()).unwrap()
}

fn answer(line: &[u8]) -> String {
    answer_with(line, &Limits::default())
}

#[test]
fn the_example_session_requests_parse() {
    assert_eq!(
        parse(b"A orders/42 5 30"),
        Request::Acquire {
            key: key("orders/42"),
            wait_ms: 5000,
            lease_ms: 30000,
            options: AcquireOptions::default(),
        }
    );
    assert_eq!(
        parse(b"A orders/43 0 10"),
        Request::Acquire {
            key: key("orders/43"),
            wait_ms: 0,
            lease_ms: 10000,
            options: AcquireOptions::default(),
        }
    );
    assert_eq!(
        parse(b"R orders/42 1057"),
        Request::Release {
            key: key("orders/42"),
            token: 1057
        }
    );
    assert_eq!(
        parse(b"K orders/43 1058 60"),
        Request::Renew {
            key: key("orders/43"),
            token: 1058,
            lease_ms: 60000
        }
    );
    assert_eq!(parse(b"S"), Request::Status);
    assert_eq!(
        answer(b"A bad-lease 0 0"),
        "E A bad-lease lease must be greater than 0\n"
    );
}

#[test]
fn durations_convert_exactly() {
    for (text, ms) in [
        ("2.125", 2125),
        ("0.5", 500),
        ("007", 7000),
        ("0.001", 1),
        ("86400", 86_400_000),
        ("86400.000", 86_400_000),
    ] {
        let line = format!("A k {text} {text}");
        assert_eq!(
            parse(line.as_bytes()),
            Request::Acquire {
                key: key("k"),
                wait_ms: ms,
                lease_ms: ms,
                options: AcquireOptions::default(),
            },
            "{line}"
        );
    }
}

#[test]
fn keys_may_be_any_printable_bytes_up_to_250() {
    let long = "k".repeat(250);
    assert_eq!(
        parse(format!("R {long} 1").as_bytes()),
        Request::Release {
            key: key(&long),
            token: 1
        }
    );
    assert_eq!(
        parse("R é/jobs:nightly~ 1".as_bytes()),
        Request::Release {
            key: key("é/jobs:nightly~"),
            token: 1
        }
    );
}

#[test]
fn tokens_are_positive_decimal_u64() {
    assert_eq!(
        parse(b"R k 18446744073709551615"),
        Request::Release {
            key: key("k"),
            token: u64::MAX
        }
    );
    assert_eq!(
        parse(b"K k 007 1"),
        Request::Renew {
            key: key("k"),
            token: 7,
            lease_ms: 1000
        }
    );
    let reason = "token must be a decimal integer greater than 0";
    for token in [
        "0",
        "00",
        "18446744073709551616",
        "99999999999999999999999999",
        "+1",
        "-1",
        "1.0",
        "0x10",
        "1e3",
        "１",
    ] {
        assert_eq!(
            answer(format!("R k {token}").as_bytes()),
            format!("E R k {reason}\n"),
            "{token}"
        );
        assert_eq!(
            answer(format!("K k {token} 1").as_bytes()),
            format!("E K k {reason}\n"),
            "{token}"
        );
    }
}

#[test]
fn framing_errors() {
    assert_eq!(answer(b""), "E ? ? empty line\n");
    assert_eq!(answer(b"X k 1 1"), "E ? ? unknown op\n");
    assert_eq!(answer(b"a k 1 1"), "E ? ? unknown op\n");
    assert_eq!(answer(b"AA k 1 1"), "E ? ? unknown op\n");
    assert_eq!(answer(b"T k"), "E ? ? unknown op\n");
    assert_eq!(answer(b"\x01"), "E ? ? unknown op\n");
    assert_eq!(answer(b"S\r"), "E ? ? unknown op\n");
    assert_eq!(answer(b" S"), "E ? ? empty field\n");
    assert_eq!(answer(b" "), "E ? ? empty field\n");
}

#[test]
fn missing_fields_are_named() {
    assert_eq!(answer(b"A"), "E A ? missing key\n");
    assert_eq!(answer(b"A k"), "E A k missing wait\n");
    assert_eq!(answer(b"A k 1"), "E A k missing lease\n");
    assert_eq!(answer(b"R"), "E R ? missing key\n");
    assert_eq!(answer(b"R k"), "E R k missing token\n");
    assert_eq!(answer(b"K k"), "E K k missing token\n");
    assert_eq!(answer(b"K k 5"), "E K k missing lease\n");
}

#[test]
fn extra_fields_are_refused() {
    assert_eq!(answer(b"S x"), "E S ? too many fields\n");
    assert_eq!(answer(b"A k 1 1 x"), "E A k too many fields\n");
    assert_eq!(answer(b"R k 1 x"), "E R k too many fields\n");
    assert_eq!(answer(b"K k 1 1 x y"), "E K k too many fields\n");
}

#[test]
fn empty_fields_are_refused() {
    assert_eq!(answer(b"S "), "E S ? empty field\n");
    assert_eq!(answer(b"A  k 1 1"), "E A ? empty field\n");
    assert_eq!(answer(b"A k  1 1"), "E A k empty field\n");
    assert_eq!(answer(b"A k 1 1 "), "E A k empty field\n");
    assert_eq!(answer(b"A k 1 "), "E A k empty field\n");
    assert_eq!(answer(b"R k "), "E R k empty field\n");
    assert_eq!(answer(b"K k 1  1"), "E K k empty field\n");
}

#[test]
fn bad_keys_are_refused_and_echoed_when_printable() {
    let long = "k".repeat(300);
    assert_eq!(
        answer(format!("A {long} 1 1").as_bytes()),
        format!("E A {long} key is 300 bytes, longer than 250\n")
    );
    assert_eq!(
        answer(b"A a\x01b 1 1"),
        "E A ? key has a forbidden byte 0x01\n"
    );
    assert_eq!(
        answer(b"R a\x7f 1"),
        "E R ? key has a forbidden byte 0x7f\n"
    );
    assert_eq!(answer(b"R a\tb 1"), "E R ? key has a forbidden byte 0x09\n");
    // Only one CR is dropped before the LF; a second one is part of the
    // last field.
    assert_eq!(answer(b"R k\r"), "E R ? key has a forbidden byte 0x0d\n");
    assert_eq!(
        answer(b"R k 1\r"),
        "E R k token must be a decimal integer greater than 0\n"
    );
    assert_eq!(
        answer(b"A k\r 1 1"),
        "E A ? key has a forbidden byte 0x0d\n"
    );
}

#[test]
fn bad_durations_are_refused() {
    for text in [
        ".5", "1.", "1.2345", "+1", "-1", "1e3", "0x10", "１", "1.2.3", "1,5", "inf", "NaN",
    ] {
        assert_eq!(
            answer(format!("A k {text} 1").as_bytes()),
            "E A k wait is not a decimal number of seconds with at most 3 decimals\n",
            "{text}"
        );
        assert_eq!(
            answer(format!("A k 1 {text}").as_bytes()),
            "E A k lease is not a decimal number of seconds with at most 3 decimals\n",
            "{text}"
        );
        assert_eq!(
            answer(format!("K k 1 {text}").as_bytes()),
            "E K k lease is not a decimal number of seconds with at most 3 decimals\n",
            "{text}"
        );
    }
}

#[test]
fn zero_lease_is_refused_zero_wait_is_not() {
    for zero in ["0", "0.0", "0.000", "000"] {
        let expected = "E A k lease must be greater than 0\n";
        assert_eq!(answer(format!("A k 1 {zero}").as_bytes()), expected);
        assert_eq!(
            answer(format!("K k 1 {zero}").as_bytes()),
            "E K k lease must be greater than 0\n"
        );
        assert_eq!(
            parse(format!("A k {zero} 1").as_bytes()),
            Request::Acquire {
                key: key("k"),
                wait_ms: 0,
                lease_ms: 1000,
                options: AcquireOptions::default(),
            }
        );
    }
}

#[test]
fn maxima_are_enforced() {
    assert_eq!(
        answer(b"A k 86400.001 1"),
        "E A k wait exceeds the maximum of 86400 seconds\n"
    );
    assert_eq!(
        answer(b"A k 1 86401"),
        "E A k lease exceeds the maximum of 86400 seconds\n"
    );
    assert_eq!(
        answer(b"K k 1 999999999999999999999999999999"),
        "E K k lease exceeds the maximum of 86400 seconds\n"
    );
    let huge = "9".repeat(500);
    assert_eq!(
        answer(format!("A k {huge} 1").as_bytes()),
        "E A k wait exceeds the maximum of 86400 seconds\n"
    );
    let limits = Limits {
        max_wait_ms: 1500,
        max_lease_ms: 60_000,
    };
    assert_eq!(
        answer_with(b"A k 1.501 1", &limits),
        "E A k wait exceeds the maximum of 1.5 seconds\n"
    );
    assert_eq!(
        answer_with(b"A k 1 60.001", &limits),
        "E A k lease exceeds the maximum of 60 seconds\n"
    );
    assert_eq!(
        parse_request(b"A k 1.5 60", &limits),
        Ok(Request::Acquire {
            key: key("k"),
            wait_ms: 1500,
            lease_ms: 60_000,
            options: AcquireOptions::default(),
        })
    );
}

#[test]
fn the_first_bad_field_is_the_one_reported() {
    assert_eq!(
        answer(b"A k x 0 extra"),
        "E A k wait is not a decimal number of seconds with at most 3 decimals\n"
    );
    assert_eq!(
        answer(b"A k 1 0 extra"),
        "E A k lease must be greater than 0\n"
    );
    assert_eq!(
        answer(b"A a\x01 x 0"),
        "E A ? key has a forbidden byte 0x01\n"
    );
    assert_eq!(
        answer(b"K k 0 0"),
        "E K k token must be a decimal integer greater than 0\n"
    );
    assert_eq!(
        answer(b"A k 99999999 x"),
        "E A k wait exceeds the maximum of 86400 seconds\n"
    );
}

#[test]
fn an_overlong_line_given_directly_is_too_long() {
    let line = vec![b'S'; 1024];
    let err = parse_request(&line, &Limits::default()).unwrap_err();
    assert_eq!(err.kind, RequestErrorKind::LineTooLong);
    assert_eq!(answer(&line), "E ? ? line too long\n");
    // One byte shorter fits with its LF, so it is judged on its content.
    assert_eq!(answer(&line[..1023]), "E ? ? unknown op\n");
}
