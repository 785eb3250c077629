//! `baton watch KEY`: the key's state, then one line per change of its
//! holders or their values, until SIGINT or SIGTERM.

use std::process::ExitCode;

use baton_client::{Client, KeyState, KeyStateExt};
use futures_util::StreamExt;
use serde_json::json;
use tokio::signal::unix::{signal, SignalKind};

use crate::exit::Exit;
use crate::fail;

/// `KEY state=<tag> holders=<n> holder=<token>,<value or -> ...`: the
/// holders oldest first, the value last so that it may hold commas.
fn line(key: &str, state: &KeyState) -> String {
    let mut line = format!(
        "{key} state={} holders={}",
        state.tag(),
        state.holder_count()
    );
    for holder in state.holders() {
        let value = holder.value.map_or("-".to_owned(), |v| v.to_string());
        line.push_str(&format!(" holder={},{value}", holder.token));
    }
    line
}

fn json_line(key: &str, state: &KeyState) -> String {
    json!({
        "key": key,
        "state": state.tag().to_string(),
        "permits": state.permits(),
        "mode": state.mode().as_str(),
        "holder_count": state.holder_count(),
        "holders": crate::inspect::holders_json(state),
        "waiters": state.waiters,
    })
    .to_string()
}

/// Prints each state until interrupted (exit 0) or the watch fails (the
/// error's exit code).
pub async fn watch(client: &Client, key: &[u8], as_json: bool) -> ExitCode {
    let (mut term, mut int) = match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(term), Ok(int)) => (term, int),
        (Err(err), _) | (_, Err(err)) => {
            eprintln!("baton: cannot watch signals: {err}");
            return Exit::Failure.code();
        }
    };
    let mut states = match client.watch(key) {
        Ok(states) => states,
        Err(err) => return fail(&err),
    };
    let name = String::from_utf8_lossy(key);
    loop {
        let state = tokio::select! {
            state = states.next() => state,
            _ = term.recv() => return Exit::Ok.code(),
            _ = int.recv() => return Exit::Ok.code(),
        };
        match state {
            Some(Ok(state)) if as_json => println!("{}", json_line(&name, &state)),
            Some(Ok(state)) => println!("{}", line(&name, &state)),
            Some(Err(err)) => return fail(&err),
            // The stream ends only after an error.
            None => return Exit::Failure.code(),
        }
    }
}

#[cfg(test)]
mod tests {
    use baton_client::{HolderState, HolderValue, KeyDetail, LiveGrant, LockMode, StateTag};

    use super::*;

    #[test]
    fn one_line_names_each_holder_and_its_value() {
        assert_eq!(line("k", &KeyState::plain(None, 3)), "k state=- holders=0");
        let plain = KeyState::plain(
            Some(LiveGrant {
                token: 7,
                lease_left_ms: 1,
            }),
            0,
        );
        assert_eq!(line("k", &plain), "k state=7 holders=1 holder=7,-");
        let holder = |token, value: Option<&str>| HolderState {
            token,
            lease_left_ms: 5,
            value: value.and_then(|v| HolderValue::try_from(v).ok()),
        };
        let tag = StateTag::Holders {
            newest: 9,
            count: 2,
            hash: 0xab,
        };
        let two = KeyState {
            grant: Some(LiveGrant {
                token: 9,
                lease_left_ms: 5,
            }),
            waiters: 0,
            detail: Some(Box::new(KeyDetail {
                permits: 2,
                mode: LockMode::Exclusive,
                holder_count: 2,
                holders: vec![holder(8, Some("a,b")), holder(9, None)],
                tag,
            })),
        };
        assert_eq!(
            line("k", &two),
            "k state=9.2.00000000000000ab holders=2 holder=8,a,b holder=9,-"
        );
    }
}
