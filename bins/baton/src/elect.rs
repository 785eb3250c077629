//! `baton elect NAME --value V -- CMD...` (campaign, run CMD while
//! leading, resign when it ends) and `baton leader NAME` (the leader's
//! value).

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use baton_client::Client;
use serde_json::json;

use crate::exit::Exit;
use crate::fail;

/// What `baton elect` was asked to do.
#[derive(Debug)]
pub struct ElectOptions<'a> {
    pub name: &'a OsString,
    pub value: &'a str,
    pub lease: Duration,
    pub child_exit_code: bool,
    pub command: &'a [OsString],
}

/// Waits for leadership, then runs the command as `baton run` does under
/// a lock: leadership lost stops it (exit 7), its end resigns.
pub async fn elect(client: &Client, options: ElectOptions<'_>) -> ExitCode {
    let election = match client.election(options.name.as_encoded_bytes()) {
        Ok(election) => election,
        Err(err) => return fail(&err),
    };
    // A campaign waits as long as it takes: not through an outage.
    let campaign = election.campaign(options.value, options.lease);
    let leadership = match crate::outage::bounded(client, Duration::ZERO, campaign).await {
        Ok(leadership) => leadership,
        Err(err) => return fail(&err),
    };
    crate::run::run_held(
        leadership.into_guard(),
        options.name,
        options.command,
        options.child_exit_code,
    )
    .await
}

/// Prints the leader's value (`-` if it has none); exit 6 without a leader.
pub async fn leader(client: &Client, name: &[u8], as_json: bool) -> ExitCode {
    let leader = match client.election(name) {
        Ok(election) => election.leader().await,
        Err(err) => return fail(&err),
    };
    let shown = String::from_utf8_lossy(name);
    match leader {
        Ok(Some(leader)) => {
            let value = leader.value.map(|v| v.to_string());
            if as_json {
                let object = json!({
                    "name": shown,
                    "token": leader.token.to_string(),
                    "value": value,
                });
                println!("{object}");
            } else {
                println!("{}", value.as_deref().unwrap_or("-"));
            }
            Exit::Ok.code()
        }
        Ok(None) => {
            eprintln!("baton: {shown} has no leader");
            Exit::NotHeld.code()
        }
        Err(err) => fail(&err),
    }
}
