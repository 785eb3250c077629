//! `POST /v1/force-release` with `{"key": "...", "token": "..."}`: ends
//! the grant of `key` that carries `token`, as `baton force-release` does
//! with `Q` then `R` (the console's confirmation names both). Naming the
//! token means a grant made since the operator read it is never released.
//! Behind the `/v1/` routes' admin check; the JSON body (a form cannot
//! send `application/json` across sites without asking) keeps another
//! site's page from posting it with the operator's cached credentials.
//!
//! Answers: 200 `{"released": true, "key", "token"}`; 409 when no grant of
//! the key carries that token (nothing changed); 400 for a bad body; 503
//! with `active` on a node that does not serve; 504 when the node did not
//! answer in time (a Raft leader without its majority); 413 for a body
//! past the endpoint's limit, 415 for one not sent as JSON.

use std::sync::Arc;

use axum::extract::rejection::JsonRejection;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use baton_core::{Key, Token};
use baton_server::ForceRelease;
use serde::Deserialize;
use serde_json::json;

use crate::v1::{bad_body, error, not_serving};
use crate::view::HttpContext;

/// The body: the key and the token to release, a string as `/v1/locks`
/// writes it (it passes 2^53).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReleaseRequest {
    key: String,
    token: String,
}

impl ReleaseRequest {
    /// The key and token, or what is wrong with them.
    fn parse(&self) -> Result<(Key, Token), String> {
        let key = Key::new(self.key.as_bytes()).map_err(|e| format!("bad key: {e}"))?;
        let token = self
            .token
            .parse::<Token>()
            .map_err(|_| format!("bad token {:?}: a number as a string", self.token))?;
        Ok((key, token))
    }
}

/// `POST /v1/force-release`.
pub async fn release(
    State(ctx): State<Arc<HttpContext>>,
    body: Result<Json<ReleaseRequest>, JsonRejection>,
) -> Response {
    let request = match body {
        Ok(Json(request)) => request,
        Err(rejection) => {
            return bad_body(&rejection, r#"{"key": "...", "token": "..."}"#);
        }
    };
    let (key, token) = match request.parse() {
        Ok(parsed) => parsed,
        Err(why) => return error(StatusCode::BAD_REQUEST, why),
    };
    let name = request.key;
    match ctx.node.force_release(&key, token).await {
        ForceRelease::Released => Json(json!({
            "released": true,
            "key": name,
            "token": token.to_string(),
        }))
        .into_response(),
        ForceRelease::NotHeld => error(
            StatusCode::CONFLICT,
            format!("{name} is not held with token {token}: nothing released"),
        ),
        ForceRelease::NotServing(active) => not_serving(active),
        ForceRelease::NoAnswer => error(
            StatusCode::GATEWAY_TIMEOUT,
            "the node did not answer in time (no majority?): the release may still apply",
        ),
    }
}
