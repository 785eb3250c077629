//! HTTP basic auth for the `/v1/` routes on a node with `--auth-file`:
//! the user must be an admin of that file. No credentials or wrong ones:
//! 401 with `WWW-Authenticate` (a wrong one after the same 250 ms and
//! per-source throttle a failed `U` gets); a user that is not an admin:
//! 403. Without `--auth-file` the routes are open, as the client port is.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use baton_server::auth::{AdminCheck, FAIL_DELAY};

use crate::v1::error;
use crate::view::HttpContext;

/// The challenge of a 401.
pub const CHALLENGE: &str = "Basic realm=\"baton\", charset=\"UTF-8\"";

/// `user:secret` of an `Authorization: Basic` header.
pub fn credentials(headers: &HeaderMap) -> Option<(Vec<u8>, Vec<u8>)> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, encoded) = value.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let colon = decoded.iter().position(|&b| b == b':')?;
    Some((decoded[..colon].to_vec(), decoded[colon + 1..].to_vec()))
}

fn unauthorized(message: &str) -> Response {
    let mut response = error(StatusCode::UNAUTHORIZED, message);
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static(CHALLENGE),
    );
    response
}

/// The middleware of the `/v1/` routes.
pub async fn require_admin(
    State(ctx): State<Arc<HttpContext>>,
    request: Request,
    next: Next,
) -> Response {
    let Some(auth) = &ctx.auth else {
        return next.run(request).await;
    };
    let Some((user, secret)) = credentials(request.headers()) else {
        return unauthorized(
            "authentication required (HTTP basic auth, an admin user of the auth file)",
        );
    };
    let source = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(addr)| addr.ip());
    match auth.check_admin(source, &user, &secret) {
        AdminCheck::Admin => next.run(request).await,
        AdminCheck::NotAdmin => error(
            StatusCode::FORBIDDEN,
            "permission denied: the /v1/ routes need an admin user",
        )
        .into_response(),
        AdminCheck::Failed => {
            tokio::time::sleep(FAIL_DELAY).await;
            unauthorized("authentication failed")
        }
    }
}
