//! `/v1/members`: a Raft cluster's membership, listed and changed online
//! (`baton member list/add/remove`), behind the `/v1/` routes' admin check.
//!
//! - `GET /v1/members`: `{"members": [{"id", "addr", "membership"}]}`,
//!   `id` a decimal string, `membership` being `voter` or `learner`.
//! - `POST /v1/members` with `{"addr": "host:port"}`: adds that node (a
//!   learner first, a voter once it has caught up). The leader carries the
//!   addition through whatever the caller does: the learner becomes a
//!   voter once caught up, or is removed again at the addition's deadline,
//!   60 s after it began; `"wait_ms": N` sets the deadline to N ms from
//!   now (each ask may, at most a day). One request waits a few seconds:
//!   200 with the members once the node votes; 202 while it is a learner
//!   still catching up (ask again); 504 once the deadline came and it was
//!   removed again (the membership is as before). 409 if it is already a
//!   voter, or another node is being added.
//! - `DELETE /v1/members/{addr}`: removes it. 404 if it is not a member,
//!   409 for the last voter, or when a majority of the voters left would
//!   not answer.
//! - Either: 409 while the change before it is being committed, 503 when
//!   a majority of the voters does not answer (or the change was proposed
//!   but not committed in time; it takes effect once it is).
//!
//! Changes are made by the leader only: another node answers 421 with the
//! leader's client address in `leader` (`null` while none is known). A node
//! of another mode answers 404: its peer list changes by rolling restart.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize, Serializer};
use serde_json::json;

use crate::v1::error;
use crate::view::HttpContext;

/// A future a membership change resolves with.
pub type AdminFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Vec<MemberEntry>, AdminError>> + Send + 'a>>;

/// Changes the membership of the node the endpoint serves.
pub trait MembershipAdmin: Send + Sync + 'static {
    /// The members as this node's log holds them.
    fn list(&self) -> Vec<MemberEntry>;
    /// Adds the node at `addr`; `wait` is how long the caller still waits
    /// in all for it to vote (`None`: the addition's own deadline).
    fn add<'a>(&'a self, addr: &'a str, wait: Option<Duration>) -> AdminFuture<'a>;
    /// Removes the node at `addr`.
    fn remove<'a>(&'a self, addr: &'a str) -> AdminFuture<'a>;
}

/// One member.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemberEntry {
    /// Written as a decimal string, as tokens are: the id of a node added
    /// with `--join` is above 2^53, which a JSON number loses (`jq`
    /// rounds it).
    #[serde(serialize_with = "decimal_string")]
    pub id: u64,
    pub addr: String,
    /// `voter` or `learner`.
    pub membership: &'static str,
}

fn decimal_string<S: Serializer>(id: &u64, out: S) -> Result<S::Ok, S::Error> {
    out.collect_str(id)
}

/// Why a change was not made, as the routes answer it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdminError {
    /// 421: another node leads (its client address, if known).
    NotLeader { leader: Option<String> },
    /// 400: the request itself is wrong.
    BadRequest(String),
    /// 404: no such member.
    NotFound(String),
    /// 409: the change contradicts the membership.
    Conflict(String),
    /// 202: a learner that has not caught up yet.
    Pending(String),
    /// 504: the addition's deadline came; the change was undone.
    TimedOut(String),
    /// 503: a majority of the voters does not answer.
    Unavailable(String),
    /// 500.
    Failed(String),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddRequest {
    addr: String,
    /// How long the caller still waits in all, in milliseconds.
    wait_ms: Option<u64>,
}

/// The node's membership admin; a node of another mode has none.
fn admin_of(ctx: &HttpContext) -> Option<&Arc<dyn MembershipAdmin>> {
    ctx.members.as_ref()
}

fn no_membership() -> Response {
    error(
        StatusCode::NOT_FOUND,
        "membership changes online are for --mode raft; a priority cluster changes its --peers by rolling restart (docs/operations.md)",
    )
}

fn answer(result: Result<Vec<MemberEntry>, AdminError>) -> Response {
    match result {
        Ok(members) => Json(json!({ "members": members })).into_response(),
        Err(AdminError::NotLeader { leader }) => (
            StatusCode::MISDIRECTED_REQUEST,
            Json(json!({ "error": "this node is not the leader", "leader": leader })),
        )
            .into_response(),
        Err(AdminError::BadRequest(why)) => error(StatusCode::BAD_REQUEST, why),
        Err(AdminError::NotFound(why)) => error(StatusCode::NOT_FOUND, why),
        Err(AdminError::Conflict(why)) => error(StatusCode::CONFLICT, why),
        Err(AdminError::Pending(why)) => error(StatusCode::ACCEPTED, why),
        Err(AdminError::TimedOut(why)) => error(StatusCode::GATEWAY_TIMEOUT, why),
        Err(AdminError::Unavailable(why)) => error(StatusCode::SERVICE_UNAVAILABLE, why),
        Err(AdminError::Failed(why)) => error(StatusCode::INTERNAL_SERVER_ERROR, why),
    }
}

/// `GET /v1/members`.
pub async fn list(State(ctx): State<Arc<HttpContext>>) -> Response {
    match admin_of(&ctx) {
        Some(admin) => answer(Ok(admin.list())),
        None => no_membership(),
    }
}

/// `POST /v1/members`.
pub async fn add(
    State(ctx): State<Arc<HttpContext>>,
    body: Result<Json<AddRequest>, axum::extract::rejection::JsonRejection>,
) -> Response {
    let Some(admin) = admin_of(&ctx) else {
        return no_membership();
    };
    match body {
        Ok(Json(request)) => {
            let wait = request.wait_ms.map(Duration::from_millis);
            answer(admin.add(&request.addr, wait).await)
        }
        Err(rejection) => error(
            StatusCode::BAD_REQUEST,
            format!("expected {{\"addr\": \"host:port\", \"wait_ms\": <optional>}}: {rejection}"),
        ),
    }
}

/// `DELETE /v1/members/{addr}`.
pub async fn remove(State(ctx): State<Arc<HttpContext>>, Path(addr): Path<String>) -> Response {
    match admin_of(&ctx) {
        Some(admin) => answer(admin.remove(&addr).await),
        None => no_membership(),
    }
}
