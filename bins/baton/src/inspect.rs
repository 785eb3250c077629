//! `baton inspect KEY` and `baton force-release KEY`: an operator's look
//! at one lock (`Q`), and breaking a stuck one (`Q` then `R` with the
//! token it showed, so a grant made in between is never released).

use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;

use baton_client::{Client, KeyState, KeyStateExt};
use baton_proto::Response;
use serde_json::{json, Value};

use crate::exit::Exit;
use crate::fail;

/// What follows the key in the protocol's `Q` answer: `token=<t>
/// lease=<s> waiters=<n>` (`-` while free), then, for a key that is not
/// plain, its permits, mode, holders and state tag. Written by the
/// protocol's own encoder.
pub fn describe(state: &KeyState) -> String {
    let mut line = bytes::BytesMut::new();
    // Any valid key: the fields after it are what is shown.
    let key = baton_client::Key::new(b"k").expect("a valid key");
    Response::Queried {
        key,
        state: state.clone(),
    }
    .encode(&mut line);
    let line = String::from_utf8_lossy(&line);
    line.trim_end()
        .strip_prefix("Q k ")
        .unwrap_or(&line)
        .to_owned()
}

/// The holders, oldest first: token (a string), lease left and value.
pub fn holders_json(state: &KeyState) -> Value {
    let holders = state.holders().into_iter().map(|holder| {
        json!({
            "token": holder.token.to_string(),
            "lease_left_ms": holder.lease_left_ms,
            "value": holder.value.map(|v| v.to_string()),
        })
    });
    Value::Array(holders.collect())
}

/// The token is a string, as in every JSON the project prints: it passes
/// 2^53, where a JSON number read as a float (`jq`, JavaScript) loses
/// digits and a release with it would fail. `token` and `lease_left_ms`
/// are the newest holder's, as in /v1/locks.
fn json(key: &str, state: &KeyState) -> String {
    let mut object = json!({
        "key": key,
        "held": state.grant.is_some(),
        "waiters": state.waiters,
        "permits": state.permits(),
        "mode": state.mode().as_str(),
        "holder_count": state.holder_count(),
        "holders": holders_json(state),
        "state": state.tag().to_string(),
    });
    if let Some(grant) = &state.grant {
        object["token"] = json!(grant.token.to_string());
        object["lease_left_ms"] = json!(grant.lease_left_ms);
    }
    object.to_string()
}

/// Prints the key's state; exits 0 whether it is held or free.
pub async fn inspect(client: &Client, key: &[u8], as_json: bool) -> ExitCode {
    match client.inspect(key).await {
        Ok(state) => {
            let name = String::from_utf8_lossy(key);
            if as_json {
                println!("{}", json(&name, &state));
            } else {
                println!("{name} {}", describe(&state));
            }
            Exit::Ok.code()
        }
        Err(err) => fail(&err),
    }
}

/// Releases whatever grant holds `key` now. Asks on a terminal unless
/// `yes`; off a terminal, refuses without `yes`.
pub async fn force_release(client: &Client, key: &[u8], yes: bool) -> ExitCode {
    let name = String::from_utf8_lossy(key).into_owned();
    let state = match client.inspect(key).await {
        Ok(state) => state,
        Err(err) => return fail(&err),
    };
    let Some(grant) = state.grant else {
        eprintln!("baton: {name} is not held");
        return Exit::NotHeld.code();
    };
    if !yes && !confirmed(&name, grant.token) {
        return Exit::Usage.code();
    }
    match client.release(key, grant.token).await {
        Ok(()) => {
            println!("released {name} (token {})", grant.token);
            Exit::Ok.code()
        }
        Err(err) => fail(&err),
    }
}

/// Asks on the terminal; `false` (with the reason printed) if the answer
/// is not yes or there is no terminal to ask on.
fn confirmed(name: &str, token: u64) -> bool {
    if !std::io::stdin().is_terminal() {
        eprintln!("baton: not on a terminal: give --yes to release {name} (token {token})");
        return false;
    }
    eprint!("release {name}, held with token {token}? [y/N] ");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    if std::io::stdin().lock().read_line(&mut answer).is_err() {
        return false;
    }
    let yes = matches!(answer.trim(), "y" | "Y" | "yes" | "YES");
    if !yes {
        eprintln!("baton: not released");
    }
    yes
}
