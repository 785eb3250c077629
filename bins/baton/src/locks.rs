//! `baton locks [PREFIX]`: the held locks, from the HTTP endpoint's
//! `GET /v1/locks`, paged with `after` up to `--limit`, as a table (KEY
//! TOKEN LEASE WAITERS PERMITS MODE HOLDERS) or one JSON array (as the
//! endpoint gives it: with protocol 1.2, each holder's token, lease left
//! and value).
//!
//! The endpoint is `--http` when given; otherwise the `http=` field a node
//! shows in its `S` status (the serving node's first), with an unspecified
//! IP (`0.0.0.0`, `::`) replaced by the host that node was dialled at.

use std::net::SocketAddr;
use std::process::ExitCode;

use baton_client::{Client, NodeStatus};
use serde_json::Value;

use crate::admin_http::{query_escape, AdminHttp, Reply};
use crate::exit::Exit;

/// The most locks one request asks for: the endpoint's page cap.
const PAGE: u64 = 10_000;

/// What `baton locks` was asked.
#[derive(Debug)]
pub struct LocksOptions {
    pub prefix: Option<String>,
    pub json: bool,
    pub limit: u64,
}

/// Lists the locks through `http`; prints them, or one line saying why not.
pub async fn locks(http: &AdminHttp, options: &LocksOptions) -> ExitCode {
    match fetch(http, options).await {
        Ok(locks) => {
            if options.json {
                println!("{}", Value::Array(locks));
            } else {
                print!("{}", table(&locks));
            }
            Exit::Ok.code()
        }
        Err((exit, message)) => {
            eprintln!("baton: {message}");
            exit.code()
        }
    }
}

/// Every page up to the limit.
async fn fetch(http: &AdminHttp, options: &LocksOptions) -> Result<Vec<Value>, (Exit, String)> {
    let mut locks = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let want = (options.limit - locks.len() as u64).min(PAGE);
        let mut path = format!("/v1/locks?limit={want}");
        if let Some(prefix) = &options.prefix {
            path.push_str(&format!("&prefix={}", query_escape(prefix)));
        }
        if let Some(after) = &after {
            path.push_str(&format!("&after={}", query_escape(after)));
        }
        let reply = http
            .get(&path)
            .await
            .map_err(|e| (Exit::NoServer, e.to_string()))?;
        let (page, next) = page_of(http, reply)?;
        let progressed = !page.is_empty();
        locks.extend(page.into_iter().take(usize::try_from(want).unwrap_or(0)));
        match next {
            // A page that brought nothing cannot be followed by another.
            Some(next) if progressed && (locks.len() as u64) < options.limit => after = Some(next),
            _ => return Ok(locks),
        }
    }
}

/// The locks of one answer and its `next`, or the error it stands for.
fn page_of(http: &AdminHttp, reply: Reply) -> Result<(Vec<Value>, Option<String>), (Exit, String)> {
    let addr = http.addr();
    match reply.status {
        200 => {}
        401 => {
            // The endpoint's words say "authentication ..." themselves.
            let mut words = reply.error_text();
            if !words.starts_with("authentication") {
                words = format!("authentication failed: {words}");
            }
            return Err((
                Exit::AuthFailed,
                format!("{addr}: {words}: give an admin's --user and its secret"),
            ));
        }
        403 => {
            return Err((
                Exit::PermissionDenied,
                // The endpoint's words say "permission denied" themselves.
                format!("{addr}: {}", reply.error_text()),
            ));
        }
        400 => return Err((Exit::Rejected, format!("{addr}: {}", reply.error_text()))),
        code => {
            let mut message = format!("{addr}: HTTP {code}: {}", reply.error_text());
            if let Some(active) = reply.body.get("active").and_then(Value::as_str) {
                message.push_str(&format!(" (the serving node is {active})"));
            }
            // 503: the node does not serve (a standby, a follower, no
            // majority), which exit 4 stands for.
            let exit = if code == 503 {
                Exit::NoServer
            } else {
                Exit::Failure
            };
            return Err((exit, message));
        }
    }
    let bad = || {
        (
            Exit::Failure,
            format!("{addr}: unexpected /v1/locks answer: {}", reply.body),
        )
    };
    let locks = reply
        .body
        .get("locks")
        .and_then(Value::as_array)
        .ok_or_else(bad)?;
    let next = match reply.body.get("next") {
        None | Some(Value::Null) => None,
        Some(Value::String(next)) => Some(next.clone()),
        Some(_) => return Err(bad()),
    };
    Ok((locks.clone(), next))
}

/// KEY TOKEN LEASE WAITERS PERMITS MODE HOLDERS, columns padded to their
/// widest cell; `-` where a node older than protocol 1.2 gives no field.
fn table(locks: &[Value]) -> String {
    let text = |lock: &Value, name: &str| match lock.get(name) {
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => "-".to_owned(),
    };
    let mut rows = vec![[
        "KEY", "TOKEN", "LEASE", "WAITERS", "PERMITS", "MODE", "HOLDERS",
    ]
    .map(str::to_owned)];
    for lock in locks {
        let lease = match lock.get("lease_left_ms").and_then(Value::as_u64) {
            Some(ms) => format!("{}.{:03}", ms / 1000, ms % 1000),
            None => "-".to_owned(),
        };
        rows.push([
            text(lock, "key"),
            text(lock, "token"),
            lease,
            text(lock, "waiters"),
            text(lock, "permits"),
            text(lock, "mode"),
            lock.get("holders")
                .and_then(Value::as_array)
                .map_or("-".to_owned(), |holders| holders.len().to_string()),
        ]);
    }
    crate::status_table::pad(&rows)
}

/// The HTTP endpoint a node advertises, from the nodes' statuses: the
/// serving node's first, then any. `Err` is the line to print.
pub fn endpoint_of(nodes: &[NodeStatus]) -> Result<String, (Exit, String)> {
    let reachable: Vec<&NodeStatus> = nodes.iter().filter(|n| n.status.is_ok()).collect();
    let Some(first) = reachable.first() else {
        return Err(none_asked(nodes));
    };
    let serving = |n: &&&NodeStatus| crate::outage::serves(n);
    let http_of = |n: &NodeStatus| {
        let report = n.status.as_ref().ok()?;
        let (_, addr) = report.extra.iter().find(|(name, _)| name == "http")?;
        Some(dialable(addr, &n.addr))
    };
    reachable
        .iter()
        .filter(serving)
        .chain(reachable.iter())
        .find_map(|n| http_of(n))
        .ok_or_else(|| {
            (
                Exit::Failure,
                format!(
                    "{} has no HTTP endpoint: start batond with --http-listen, or pass --http",
                    first.addr
                ),
            )
        })
}

/// Why no node showed its status: a node's own refusal (credentials
/// required or refused, TLS) with its exit code, before unreachability.
fn none_asked(nodes: &[NodeStatus]) -> (Exit, String) {
    let refused = nodes.iter().find_map(|node| match &node.status {
        Err(err) if !matches!(err, baton_client::Error::NoServer) => Some((&node.addr, err)),
        _ => None,
    });
    match refused {
        Some((addr, err)) => {
            let mut message = err.to_string();
            if !message.contains(addr.as_str()) {
                message = format!("{addr}: {message}");
            }
            (Exit::of(err), message)
        }
        None => (
            Exit::NoServer,
            crate::unreachable::explain().unwrap_or_else(|| "no server reachable".into()),
        ),
    }
}

/// `advertised` with an unspecified IP replaced by the host of `dialled`.
fn dialable(advertised: &str, dialled: &str) -> String {
    let Ok(addr) = advertised.parse::<SocketAddr>() else {
        return advertised.to_owned();
    };
    if !addr.ip().is_unspecified() {
        return advertised.to_owned();
    }
    let host = dialled.rsplit_once(':').map_or(dialled, |(host, _)| host);
    format!("{host}:{}", addr.port())
}

/// Asks every node for its status, to find the endpoint.
pub async fn discover(
    client: Result<Client, baton_client::Error>,
) -> Result<String, (Exit, String)> {
    match client {
        Ok(client) => {
            let nodes = client.status_all().await;
            let _ = client.close().await;
            endpoint_of(&nodes)
        }
        Err(baton_client::Error::NoServer) => {
            let message =
                crate::unreachable::explain().unwrap_or_else(|| "no server reachable".into());
            Err((Exit::NoServer, message))
        }
        Err(err) => Err((Exit::of(&err), err.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unspecified_ip_becomes_the_dialled_host() {
        assert_eq!(dialable("0.0.0.0:8080", "10.0.0.5:7411"), "10.0.0.5:8080");
        assert_eq!(dialable("[::]:8080", "[::1]:7411"), "[::1]:8080");
        assert_eq!(dialable("0.0.0.0:8080", "node-1:7411"), "node-1:8080");
        assert_eq!(dialable("10.0.0.9:8080", "10.0.0.5:7411"), "10.0.0.9:8080");
        assert_eq!(dialable("web:8080", "10.0.0.5:7411"), "web:8080");
    }

    #[test]
    fn the_table_shows_lease_in_seconds() {
        let locks = vec![
            serde_json::json!({
                "key": "jobs/a", "token": "17", "lease_left_ms": 29_500, "waiters": 2
            }),
            serde_json::json!({
                "key": "pool", "token": "19", "lease_left_ms": 1_000, "waiters": 0,
                "permits": 4, "mode": "exclusive", "holders": [
                    {"token": "18", "lease_left_ms": 900, "value": "w1"},
                    {"token": "19", "lease_left_ms": 1000, "value": null}
                ]
            }),
        ];
        let table = table(&locks);
        let lines: Vec<Vec<&str>> = table
            .lines()
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(
            lines[0],
            ["KEY", "TOKEN", "LEASE", "WAITERS", "PERMITS", "MODE", "HOLDERS"]
        );
        // A node older than protocol 1.2: no permits, mode or holders.
        assert_eq!(lines[1], ["jobs/a", "17", "29.500", "2", "-", "-", "-"]);
        assert_eq!(
            lines[2],
            ["pool", "19", "1.000", "0", "4", "exclusive", "2"]
        );
    }
}
