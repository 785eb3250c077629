//! The `/v1/` routes: `GET /v1/locks` (a page of held locks) and
//! `GET /v1/cluster` (this node and the members it knows). Tokens are JSON
//! strings: they pass 2^53, where a JSON number read as a float (`jq`,
//! JavaScript) would lose its last digits. Keys are shown as UTF-8 (bytes
//! that are not are replaced by U+FFFD).

use std::sync::Arc;

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use baton_server::inspect::{LockPage, LockQuery, Member};
use baton_server::Served;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::health::{active_of, term_of};
use crate::limits::{DEFAULT_PAGE, MAX_BODY_BYTES, MAX_PAGE};
use crate::view::HttpContext;

/// The query string of `/v1/locks`; any other parameter is refused.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LocksParams {
    /// Only keys that start with this (default: every key).
    pub prefix: Option<String>,
    /// Only keys after this one: the `next` of the page before.
    pub after: Option<String>,
    /// At most this many locks, 1 to 10000 (larger is capped); default 1000.
    pub limit: Option<String>,
}

/// A client error, as JSON: `{"error": "..."}`.
pub fn error(code: StatusCode, message: impl Into<String>) -> Response {
    (code, Json(json!({ "error": message.into() }))).into_response()
}

/// A request body the route cannot take, as JSON with the status that
/// says why: 413 past [`MAX_BODY_BYTES`], 415 without the JSON content
/// type, 400 for anything else (not JSON, or not the shape `expected`).
pub fn bad_body(rejection: &JsonRejection, expected: &str) -> Response {
    match rejection.status() {
        StatusCode::UNSUPPORTED_MEDIA_TYPE => error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!("send the body as JSON (Content-Type: application/json): {expected}"),
        ),
        StatusCode::PAYLOAD_TOO_LARGE => error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the body is larger than {MAX_BODY_BYTES} bytes: expected {expected}"),
        ),
        _ => error(
            StatusCode::BAD_REQUEST,
            format!("expected {expected}: {}", rejection.body_text()),
        ),
    }
}

/// A query string the route does not take (an unknown parameter, bad
/// escaping), as JSON like every other error, in axum's words.
fn bad_query(rejection: &QueryRejection) -> Response {
    let text = rejection.body_text();
    let why = text
        .strip_prefix("Failed to deserialize query string: ")
        .unwrap_or(&text);
    error(StatusCode::BAD_REQUEST, format!("bad query string: {why}"))
}

/// 503 from a node that does not serve, with the serving node's address.
pub fn not_serving(active: Option<String>) -> Response {
    let body = json!({
        "error": "this node does not serve clients: ask the serving node",
        "active": active,
    });
    (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
}

impl LocksParams {
    /// The node's query, or what is wrong with the parameters.
    pub fn query(&self) -> Result<LockQuery, String> {
        let limit = match self.limit.as_deref() {
            None => DEFAULT_PAGE,
            Some(text) => match text.parse::<u64>() {
                Ok(0) => return Err("limit must be at least 1".into()),
                Ok(n) => usize::try_from(n).unwrap_or(MAX_PAGE).min(MAX_PAGE),
                Err(_) => return Err(format!("limit must be a number from 1 to {MAX_PAGE}")),
            },
        };
        let max = baton_core::MAX_KEY_LEN;
        let prefix = self.prefix.clone().unwrap_or_default().into_bytes();
        if prefix.len() > max {
            return Err(format!("prefix is longer than a key ({max} bytes)"));
        }
        let after = self.after.clone().map(String::into_bytes);
        if after.as_ref().is_some_and(|a| a.len() > max) {
            return Err(format!("after is longer than a key ({max} bytes)"));
        }
        Ok(LockQuery {
            prefix,
            after,
            limit,
        })
    }
}

#[derive(Debug, Serialize)]
struct LockJson {
    key: String,
    /// The newest holder's token and lease left (the only holder's, for
    /// a plain key).
    token: String,
    lease_left_ms: u64,
    waiters: u64,
    permits: u32,
    mode: &'static str,
    /// Every live holder, oldest first.
    holders: Vec<HolderJson>,
}

#[derive(Debug, Serialize)]
struct HolderJson {
    /// A string: a u64 does not fit a JSON number every parser reads exactly.
    token: String,
    lease_left_ms: u64,
    value: Option<String>,
}

#[derive(Debug, Serialize)]
struct PageJson {
    locks: Vec<LockJson>,
    /// Pass as `after` for the next page; null on the last page.
    next: Option<String>,
}

fn key_text(key: &baton_core::Key) -> String {
    String::from_utf8_lossy(key.as_bytes()).into_owned()
}

fn page_json(page: LockPage) -> PageJson {
    PageJson {
        locks: page
            .locks
            .into_iter()
            .map(|l| LockJson {
                key: key_text(&l.key),
                token: l.token.to_string(),
                lease_left_ms: l.lease_left_ms,
                waiters: l.waiters,
                permits: l.permits,
                mode: l.mode.as_str(),
                holders: l
                    .holders
                    .into_iter()
                    .map(|h| HolderJson {
                        token: h.token.to_string(),
                        lease_left_ms: h.lease_left_ms,
                        value: h
                            .value
                            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned()),
                    })
                    .collect(),
            })
            .collect(),
        next: page.next.as_ref().map(key_text),
    }
}

/// `GET /v1/locks`.
pub async fn locks(
    State(ctx): State<Arc<HttpContext>>,
    params: Result<Query<LocksParams>, QueryRejection>,
) -> Response {
    let params = match params {
        Ok(Query(params)) => params,
        Err(rejection) => return bad_query(&rejection),
    };
    let query = match params.query() {
        Ok(query) => query,
        Err(message) => return error(StatusCode::BAD_REQUEST, message),
    };
    // One pass over the table under the node's mutex: off the async
    // workers, so a large table delays no connection's task.
    let node = ctx.node.clone();
    let listed = tokio::task::spawn_blocking(move || node.list_locks(&query)).await;
    match listed {
        Ok(Served::Done(page)) => Json(page_json(page)).into_response(),
        Ok(Served::Redirect(active)) => not_serving(active),
        Ok(Served::Later) => not_serving(None),
        Err(_) => error(StatusCode::INTERNAL_SERVER_ERROR, "the listing failed"),
    }
}

#[derive(Debug, Serialize)]
struct MemberJson {
    addr: String,
    #[serde(rename = "self")]
    is_self: bool,
    state: &'static str,
    /// `voter`, or `learner` for a Raft member still catching up, or
    /// `removed` for a node that was taken out (its own view of itself).
    membership: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    matched_index: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    lag: Option<u64>,
}

/// `GET /v1/cluster`.
pub async fn cluster(State(ctx): State<Arc<HttpContext>>) -> Response {
    let observed = ctx.node.observe();
    let (status, members) = (observed.status, observed.members);
    let members: Vec<MemberJson> = if members.is_empty() {
        // A single node is its own cluster.
        vec![MemberJson {
            addr: ctx.self_addr.clone(),
            is_self: true,
            state: status.role.as_str(),
            membership: "voter",
            matched_index: None,
            lag: None,
        }]
    } else {
        members.into_iter().map(member_json).collect()
    };
    let body = json!({
        "role": status.role.as_str(),
        "mode": status.mode.as_str(),
        "self": ctx.self_addr,
        "active": active_of(&status, &ctx.self_addr),
        "term": term_of(&status),
        "token": status.token.to_string(),
        "locks": status.locks,
        "waiters": status.waiters,
        "members": members,
    });
    Json(body).into_response()
}

fn member_json(m: Member) -> MemberJson {
    MemberJson {
        addr: m.addr,
        is_self: m.is_self,
        state: m.state,
        membership: match (m.state, m.voter) {
            ("removed", _) => "removed",
            (_, true) => "voter",
            (_, false) => "learner",
        },
        matched_index: m.matched,
        lag: m.lag,
    }
}
