//! `baton member list|add|remove`: a Raft cluster's membership, through the
//! leader's HTTP endpoint (`/v1/members`, admin only with `--auth-file`).
//!
//! `add` asks again while the new node is a learner still catching up
//! (HTTP 202), each ask saying how long it still waits in all
//! (`wait_ms`, the addition's deadline on the leader), so that `--timeout`
//! holds whatever its length: once it runs out, the leader removes a
//! learner that has not caught up (HTTP 504, exit 3) and the membership is
//! as before. After a change that leaves an even number of voters, a
//! warning on stderr. A node that is not the
//! leader answers 421; the endpoint is found again (the serving node's
//! `http=`) and the request repeated, a few times at most.

use std::process::ExitCode;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::time::Instant;

use crate::admin_http::{query_escape, AdminHttp, Reply};
use crate::exit::Exit;

/// Tries after a 421 (a follower was asked, or the lead moved) before
/// giving up.
const REDIRECTS: usize = 5;
/// Pause between two asks while a learner catches up.
const CATCH_UP_POLL: Duration = Duration::from_millis(200);

/// What `baton member` was asked.
#[derive(Debug, Clone)]
pub enum MemberRequest {
    List { json: bool },
    Add { addr: String, timeout: Duration },
    Remove { addr: String },
}

/// Finds the leader's endpoint after a 421: from the `S` of the leader
/// it named (its client address), or of the servers when it named none.
pub trait Rediscover {
    fn endpoint(
        &mut self,
        leader: Option<String>,
    ) -> impl std::future::Future<Output = Result<AdminHttp, ExitCode>>;
}

/// Runs `request` against `http` (re-found through `again` when the
/// lead moved); prints the members, or one line saying why not.
pub async fn member(
    mut http: AdminHttp,
    again: &mut impl Rediscover,
    request: &MemberRequest,
) -> ExitCode {
    let deadline = match request {
        MemberRequest::Add { timeout, .. } => Instant::now() + *timeout,
        _ => Instant::now(),
    };
    let mut redirects = 0;
    loop {
        let reply = match send(&http, request, deadline).await {
            Ok(reply) => reply,
            Err(message) => return fail(Exit::NoServer, &message),
        };
        match reply.status {
            200 => return print_members(&reply.body, request),
            202 if Instant::now() < deadline => tokio::time::sleep(CATCH_UP_POLL).await,
            421 if redirects < REDIRECTS => {
                redirects += 1;
                let leader = reply.body["leader"].as_str().map(str::to_string);
                if leader.is_none() {
                    // An election: give it a moment.
                    tokio::time::sleep(CATCH_UP_POLL).await;
                }
                http = match again.endpoint(leader).await {
                    Ok(http) => http,
                    Err(code) => return code,
                };
            }
            _ => return fail(exit_of(reply.status), &describe(&http, &reply)),
        }
    }
}

/// Sends `request`; an add says how long is left until `deadline`.
async fn send(
    http: &AdminHttp,
    request: &MemberRequest,
    deadline: Instant,
) -> Result<Reply, String> {
    let sent = match request {
        MemberRequest::List { .. } => http.get("/v1/members").await,
        MemberRequest::Add { addr, .. } => {
            let left = deadline.saturating_duration_since(Instant::now());
            let body = json!({ "addr": addr, "wait_ms": left.as_millis() as u64 });
            http.post("/v1/members", &body).await
        }
        MemberRequest::Remove { addr } => {
            let path = format!("/v1/members/{}", query_escape(addr));
            http.delete(&path).await
        }
    };
    sent.map_err(|e| e.to_string())
}

fn exit_of(status: u16) -> Exit {
    match status {
        401 => Exit::AuthFailed,
        403 => Exit::PermissionDenied,
        // Still a learner when --timeout ran out (and removed again: 504).
        202 | 504 => Exit::TimedOut,
        400 | 404 | 409 | 421 => Exit::Rejected,
        // No majority of the voters answers the leader.
        503 => Exit::NoServer,
        _ => Exit::Failure,
    }
}

fn describe(http: &AdminHttp, reply: &Reply) -> String {
    let text = reply.error_text();
    match reply.status {
        421 => format!(
            "{}: {text} (leader: {})",
            http.addr(),
            reply.body["leader"].as_str().unwrap_or("none known")
        ),
        _ => format!("{}: {text}", http.addr()),
    }
}

fn fail(exit: Exit, message: &str) -> ExitCode {
    eprintln!("baton: {message}");
    exit.code()
}

/// The members as a table (ADDR MEMBERSHIP ID), or the JSON array.
fn print_members(body: &Value, request: &MemberRequest) -> ExitCode {
    let members = body["members"].as_array().cloned().unwrap_or_default();
    if matches!(request, MemberRequest::List { json: true }) {
        println!("{}", Value::Array(members.clone()));
    } else {
        print!("{}", table(&members));
    }
    if !matches!(request, MemberRequest::List { .. }) {
        if let Some(warning) = even_voters(&members) {
            eprintln!("baton: warning: {warning}");
        }
    }
    Exit::Ok.code()
}

/// A warning when the voters are even in number: a majority of 2n is
/// n + 1, so they tolerate n - 1 failures, as 2n - 1 voters do.
fn even_voters(members: &[Value]) -> Option<String> {
    let voters = members
        .iter()
        .filter(|m| m["membership"] == "voter")
        .count();
    (voters > 0 && voters % 2 == 0).then(|| {
        let tolerated = voters / 2 - 1;
        format!(
            "{voters} voters tolerate {tolerated} {}, as {} would (a majority is {}): an even number adds no safety; add or remove one",
            if tolerated == 1 { "failure" } else { "failures" },
            voters - 1,
            voters / 2 + 1
        )
    })
}

fn table(members: &[Value]) -> String {
    let rows: Vec<[String; 3]> = members
        .iter()
        .map(|m| {
            [
                m["addr"].as_str().unwrap_or("?").to_string(),
                m["membership"].as_str().unwrap_or("?").to_string(),
                match &m["id"] {
                    Value::String(id) => id.clone(),
                    // A node from before ids were strings.
                    Value::Number(id) => id.to_string(),
                    _ => "?".into(),
                },
            ]
        })
        .collect();
    let width = rows
        .iter()
        .map(|r| r[0].len())
        .max()
        .unwrap_or(0)
        .max("ADDR".len());
    let mut out = format!("{:<width$}  {:<10}  ID\n", "ADDR", "MEMBERSHIP");
    for [addr, membership, id] in rows {
        out.push_str(&format!("{addr:<width$}  {membership:<10}  {id}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_lines_up_addresses_roles_and_ids() {
        let members = vec![
            json!({"addr": "127.0.0.1:7411", "membership": "voter", "id": "0"}),
            json!({"addr": "node-four.example:7411", "membership": "learner", "id": "4611686018427387905"}),
        ];
        let text = table(&members);
        let lines: Vec<Vec<&str>> = text
            .lines()
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(lines[0], ["ADDR", "MEMBERSHIP", "ID"]);
        assert_eq!(lines[1], ["127.0.0.1:7411", "voter", "0"]);
        assert_eq!(
            lines[2],
            ["node-four.example:7411", "learner", "4611686018427387905"]
        );
    }

    #[test]
    fn an_even_number_of_voters_is_warned_of() {
        let member = |m: &str| json!({"addr": "a:1", "membership": m, "id": 0});
        let four = vec![member("voter"); 4];
        let warning = even_voters(&four).unwrap_or_default();
        assert!(warning.starts_with("4 voters"), "{warning}");
        assert!(
            warning.contains("tolerate 1 failure, as 3 would (a majority is 3)"),
            "{warning}"
        );
        let two = even_voters(&[member("voter"), member("voter")]).unwrap_or_default();
        assert!(
            two.contains("2 voters tolerate 0 failures, as 1 would (a majority is 2)"),
            "{two}"
        );
        let three_and_a_learner = [vec![member("voter"); 3], vec![member("learner")]].concat();
        assert_eq!(even_voters(&three_and_a_learner), None);
    }

    #[test]
    fn answers_map_to_the_documented_exit_codes() {
        assert_eq!(exit_of(401), Exit::AuthFailed);
        assert_eq!(exit_of(403), Exit::PermissionDenied);
        assert_eq!(exit_of(409), Exit::Rejected);
        assert_eq!(exit_of(202), Exit::TimedOut);
        assert_eq!(exit_of(504), Exit::TimedOut);
        assert_eq!(exit_of(503), Exit::NoServer);
        assert_eq!(exit_of(500), Exit::Failure);
    }
}
