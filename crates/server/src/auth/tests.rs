//! The users file's rules, and the session's verdicts.

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test

use std::sync::Arc;

use baton_core::Key;
use baton_proto::{Request, Response, Secret};

use super::file::parse;
use super::session::{Gated, Session};
use super::users::sha256;
use super::Auth;

const GOOD: &str = r#"
[[user]]
name = "billing"
secret = "s3cr3t-value"
prefixes = ["billing/", "jobs/billing-"]

[[user]]
name = "ops"
secret_sha256 = "PLACEHOLDER"
admin = true
"#;

fn good() -> String {
    let hex: String = sha256(b"ops-secret")
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    GOOD.replace("PLACEHOLDER", &hex)
}

fn refused(text: &str) -> String {
    match parse(text) {
        Ok(users) => panic!("accepted {users:?} from {text}"),
        Err(problem) => {
            assert!(!problem.contains('\n'), "not one line: {problem}");
            problem
        }
    }
}

#[test]
fn a_good_file_defines_its_users() {
    let users = parse(&good()).unwrap();
    assert_eq!(users.len(), 2);
    let billing = Key::try_from("billing").unwrap();
    let ops = Key::try_from("ops").unwrap();
    let b = users.verify(&billing, &sha256(b"s3cr3t-value")).unwrap();
    assert!(b.permits(b"billing/1") && !b.permits(b"orders/1"));
    let o = users.verify(&ops, &sha256(b"ops-secret")).unwrap();
    assert!(o.permits(b"orders/1"));
    assert!(users.verify(&ops, &sha256(b"s3cr3t-value")).is_none());
    // Upper-case hex reads the same.
    let upper = good().to_uppercase().replace("[[USER]]", "[[user]]");
    assert!(parse(&upper).is_err(), "field names are case-sensitive");
}

#[test]
fn every_broken_rule_is_named() {
    let cases: &[(&str, &str)] = &[
        ("", "no [[user]]"),
        ("[[user]]\nname = \"a\"\nsecret = \"x\"\nprefixes = [\"a/\"]\ncolour = 1\n", "unknown field"),
        ("[[user]]\nname = \"a\"\nprefixes = [\"a/\"]\n", "needs secret or secret_sha256"),
        ("[[user]]\nname = \"a\"\nsecret = \"x\"\nsecret_sha256 = \"00\"\nprefixes = [\"a/\"]\n", "not both"),
        ("[[user]]\nname = \"a\"\nsecret_sha256 = \"00\"\nprefixes = [\"a/\"]\n", "64 hexadecimal digits"),
        (&format!("[[user]]\nname = \"a\"\nsecret_sha256 = \"{}\"\nprefixes = [\"a/\"]\n", "g".repeat(64)), "64 hexadecimal digits"),
        ("[[user]]\nname = \"a\"\nsecret = \"has space\"\nprefixes = [\"a/\"]\n", "secret has a space"),
        ("[[user]]\nname = \"a\"\nsecret = \"\"\nprefixes = [\"a/\"]\n", "secret is empty"),
        (&format!("[[user]]\nname = \"a\"\nsecret = \"{}\"\nprefixes = [\"a/\"]\n", "x".repeat(251)), "longer than 250"),
        ("[[user]]\nname = \"a b\"\nsecret = \"x\"\nprefixes = [\"a/\"]\n", "forbidden byte"),
        ("[[user]]\nname = \"\"\nsecret = \"x\"\nprefixes = [\"a/\"]\n", "is empty"),
        ("[[user]]\nname = \"a\"\nsecret = \"x\"\n", "needs prefixes"),
        ("[[user]]\nname = \"a\"\nsecret = \"x\"\nprefixes = []\n", "prefixes is empty"),
        ("[[user]]\nname = \"a\"\nsecret = \"x\"\nprefixes = [\"\"]\n", "prefix \"\""),
        ("[[user]]\nname = \"a\"\nsecret = \"x\"\nprefixes = [\"a b\"]\n", "forbidden byte"),
        ("[[user]]\nname = \"a\"\nsecret = \"x\"\nadmin = true\nprefixes = [\"a/\"]\n", "remove prefixes"),
        ("[[user]]\nname = \"a\"\nsecret = \"x\"\nadmin = false\n", "needs prefixes"),
        ("[[user]]\nname = \"a\"\nsecret = \"x\"\nadmin = true\n[[user]]\nname = \"a\"\nsecret = \"y\"\nadmin = true\n", "defined twice"),
        ("[[user]]\nname = \"a\"\nsecret = \"x\"\nadmin = \"yes\"\n", "line 4"),
        ("[[user]\nname = 1\n", "line 1"),
        ("[user]\nname = \"a\"\n", "line 1"),
    ];
    for (text, expected) in cases {
        let problem = refused(text);
        assert!(
            problem.contains(expected),
            "{text:?}: {problem:?} lacks {expected:?}"
        );
        assert!(!problem.contains("s3cr"), "{problem}");
    }
}

#[test]
fn an_admin_with_an_empty_prefix_list_is_an_admin() {
    let users =
        parse("[[user]]\nname = \"ops\"\nsecret = \"x\"\nadmin = true\nprefixes = []\n").unwrap();
    let ops = Key::try_from("ops").unwrap();
    let access = users.verify(&ops, &sha256(b"x")).unwrap();
    assert!(access.permits(b"orders/1") && access.permits(b"billing/1"));
}

#[test]
fn a_secret_is_never_quoted_in_a_problem() {
    let text = "[[user]]\nname = \"a\"\nsecret = \"hunter2 x\"\nprefixes = [\"a/\"]\n";
    assert!(!refused(text).contains("hunter2"));
    let text = "[[user]]\nname = \"a\"\nsecret_sha256 = \"hunter2\"\nprefixes = [\"a/\"]\n";
    assert!(!refused(text).contains("hunter2"));
}

#[test]
fn counts_are_bounded() {
    let mut many = String::new();
    for i in 0..=super::MAX_USERS {
        many.push_str(&format!(
            "[[user]]\nname = \"u{i}\"\nsecret = \"x\"\nadmin = true\n"
        ));
    }
    assert!(refused(&many).contains("more than the 10000"));
    let prefixes: Vec<String> = (0..=super::MAX_PREFIXES)
        .map(|i| format!("\"p{i}/\""))
        .collect();
    let text = format!(
        "[[user]]\nname = \"a\"\nsecret = \"x\"\nprefixes = [{}]\n",
        prefixes.join(",")
    );
    assert!(refused(&text).contains("more than the 256"));
}

fn auth_with(text: &str) -> (Arc<Auth>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("users.toml");
    std::fs::write(&path, text).unwrap();
    (Arc::new(Auth::load(&path).unwrap()), dir)
}

fn u(user: &str, secret: &str) -> Request {
    Request::Auth {
        user: Key::try_from(user).unwrap(),
        secret: Secret::new(secret.as_bytes()).unwrap(),
    }
}

fn release(key: &str) -> Request {
    Request::Release {
        key: Key::try_from(key).unwrap(),
        token: 1,
    }
}

fn reason(gated: Option<Gated>) -> String {
    match gated {
        None => "pass".into(),
        Some(Gated::Answer(Response::Error(e)) | Gated::Hold(Response::Error(e), _)) => e.reason,
        Some(Gated::Answer(Response::Authenticated { user })) => {
            format!("U {}", String::from_utf8_lossy(user.as_bytes()))
        }
        Some(other) => format!("{other:?}"),
    }
}

#[test]
fn a_session_gates_until_authenticated_then_by_prefix() {
    let (auth, _dir) = auth_with(&good());
    let mut s = Session::new(auth);
    assert_eq!(reason(s.gate(&Request::Status)), "authentication required");
    assert_eq!(
        reason(s.gate(&release("billing/1"))),
        "authentication required"
    );
    assert!(matches!(
        s.gate(&u("billing", "wrong")),
        Some(Gated::Hold(..))
    ));
    assert_eq!(
        reason(s.gate(&release("billing/1"))),
        "authentication required"
    );
    assert_eq!(reason(s.gate(&u("billing", "s3cr3t-value"))), "U billing");
    assert_eq!(reason(s.gate(&release("billing/1"))), "pass");
    assert_eq!(reason(s.gate(&release("orders/1"))), "permission denied");
    assert_eq!(reason(s.gate(&Request::Status)), "pass");
    // A failed U drops the identity the connection had.
    assert_eq!(reason(s.gate(&u("ops", "nope"))), "authentication failed");
    assert_eq!(
        reason(s.gate(&release("billing/1"))),
        "authentication required"
    );
    assert_eq!(reason(s.gate(&u("ops", "ops-secret"))), "U ops");
    assert_eq!(reason(s.gate(&release("anything"))), "pass");
    assert_eq!(reason(s.gate(&u("nobody", "x"))), "authentication failed");
}

#[test]
fn a_reload_reaches_open_sessions() {
    let (auth, dir) = auth_with(&good());
    let mut billing = Session::new(Arc::clone(&auth));
    let mut ops = Session::new(Arc::clone(&auth));
    assert_eq!(
        reason(billing.gate(&u("billing", "s3cr3t-value"))),
        "U billing"
    );
    assert_eq!(reason(ops.gate(&u("ops", "ops-secret"))), "U ops");
    let path = dir.path().join("users.toml");
    // A bad file changes nothing.
    std::fs::write(&path, "nonsense").unwrap();
    assert!(auth.reload().is_err());
    assert_eq!(reason(billing.gate(&release("billing/1"))), "pass");
    // ops removed, billing's prefixes changed.
    std::fs::write(
        &path,
        "[[user]]\nname = \"billing\"\nsecret = \"s3cr3t-value\"\nprefixes = [\"orders/\"]\n",
    )
    .unwrap();
    assert_eq!(auth.reload().unwrap(), 1);
    assert_eq!(reason(ops.gate(&release("x"))), "authentication required");
    assert_eq!(
        reason(billing.gate(&release("billing/1"))),
        "permission denied"
    );
    assert_eq!(reason(billing.gate(&release("orders/1"))), "pass");
    // A changed secret ends the session too.
    std::fs::write(
        &path,
        "[[user]]\nname = \"billing\"\nsecret = \"rotated\"\nprefixes = [\"orders/\"]\n",
    )
    .unwrap();
    auth.reload().unwrap();
    assert_eq!(
        reason(billing.gate(&release("orders/1"))),
        "authentication required"
    );
}

#[test]
fn guessing_from_one_address_runs_dry() {
    let (auth, _dir) = auth_with(&good());
    let mut s = Session::new(Arc::clone(&auth));
    s.set_peer(Some([192, 0, 2, 7].into()));
    for _ in 0..super::FAIL_BURST {
        assert_eq!(
            reason(s.gate(&u("billing", "guess"))),
            "authentication failed"
        );
    }
    // The bucket is empty: even the right secret fails for now.
    assert_eq!(
        reason(s.gate(&u("billing", "s3cr3t-value"))),
        "authentication failed"
    );
    let mut elsewhere = Session::new(auth);
    elsewhere.set_peer(Some([192, 0, 2, 8].into()));
    assert_eq!(
        reason(elsewhere.gate(&u("billing", "s3cr3t-value"))),
        "U billing"
    );
}
