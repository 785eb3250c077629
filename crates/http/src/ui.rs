//! The operator's console at `/ui`: one HTML page, its stylesheet and its
//! script, embedded in the binary (nothing is fetched at run time, so it
//! works on networks without internet). The page reads what every tool
//! reads, `/v1/cluster`, `/v1/locks` and `/metrics`, every two seconds, and
//! changes things through `/v1/force-release` and `/v1/members`. Served
//! behind the `/v1/` routes' admin check: a non-admin gets 403 and no page.
//! A refusal of a console route (401, 403, 404, 503) is a short HTML page
//! a browser shows, with the 401's `WWW-Authenticate` kept so the browser
//! asks for a user; the `/v1/` routes keep their JSON errors.
//!
//! The charts are computed in the page from successive scrapes of
//! `/metrics`, not from a history kept in the node: the node keeps no more
//! state and takes no more lock than a scrape, and costs nothing while
//! nobody looks; the page's history starts when it is opened. The recent
//! role and member changes are the one thing kept ([`crate::changes`]: a
//! sample a second, the last 50), so that a page opened after a failover
//! still shows it.

use std::sync::Arc;

use axum::extract::{Path, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::v1::error;
use crate::view::HttpContext;

const PAGE: &str = include_str!("../assets/console.html");
const STYLE: &str = include_str!("../assets/console.css");
const SCRIPT: &str = include_str!("../assets/console.js");
const REFUSAL: &str = include_str!("../assets/refusal.html");

/// The largest JSON error read back to be shown in a refusal page (the
/// endpoint's own errors are a line or two).
const MAX_ERROR_BYTES: usize = 4096;

/// Only this origin's files, no inline script, no framing (a framed
/// console could be clicked into a force-release).
const POLICY: &str = "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";
/// A refusal page loads nothing and runs nothing; its style is inline
/// (the console's stylesheet needs the login the page is refusing).
const REFUSAL_POLICY: &str = "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

fn asset(content_type: &'static str, body: &'static str) -> Response {
    let response = (
        [(header::CONTENT_TYPE, HeaderValue::from_static(content_type))],
        body,
    )
        .into_response();
    guarded(response, POLICY)
}

/// `response` with the console's security headers, `policy` its CSP.
fn guarded(mut response: Response, policy: &'static str) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(policy),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// `GET /ui`: the page.
pub async fn page() -> Response {
    asset("text/html; charset=utf-8", PAGE)
}

/// `GET /ui/changes`: the recent changes this node's endpoint saw, newest
/// first: `{"changes": [{"at_ms", "what"}]}`.
pub async fn changes(State(ctx): State<Arc<HttpContext>>) -> Response {
    let recent = ctx.changes.recent();
    guarded(Json(json!({ "changes": recent })).into_response(), POLICY)
}

/// `GET /ui/{file}`: the page's stylesheet and script.
pub async fn file(Path(name): Path<String>) -> Response {
    match name.as_str() {
        "console.css" => asset("text/css; charset=utf-8", STYLE),
        "console.js" => asset("text/javascript; charset=utf-8", SCRIPT),
        "" => page().await,
        _ => error(StatusCode::NOT_FOUND, "no such file of the console"),
    }
}

/// The middleware of the console's routes, outside their admin check: an
/// error answer becomes a page a person can read.
pub async fn readable_refusal(request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    if response.status().is_success() {
        return response;
    }
    refusal_page(response).await
}

async fn refusal_page(response: Response) -> Response {
    let (parts, body) = response.into_parts();
    let message = axum::body::to_bytes(body, MAX_ERROR_BYTES)
        .await
        .ok()
        .and_then(|bytes| serde_json::from_slice::<serde_json::Value>(&bytes).ok())
        .and_then(|json| json["error"].as_str().map(str::to_owned))
        .unwrap_or_else(|| "the request was refused".to_owned());
    let status = parts.status;
    let html = refusal_html(status, &message);
    let mut page = (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/html; charset=utf-8"),
        )],
        html,
    )
        .into_response();
    if let Some(challenge) = parts.headers.get(header::WWW_AUTHENTICATE) {
        page.headers_mut()
            .insert(header::WWW_AUTHENTICATE, challenge.clone());
    }
    guarded(page, REFUSAL_POLICY)
}

/// The refusal page of `status`, saying `message` and what to do.
fn refusal_html(status: StatusCode, message: &str) -> String {
    let advice = match status {
        StatusCode::UNAUTHORIZED => "The console takes the same login as the node's /v1/ routes: HTTP basic auth of an admin user of the node's --auth-file. Reload the page to be asked again.",
        StatusCode::FORBIDDEN => "The console shows keys and tokens, so it is for the admin users of the node's --auth-file only. Sign in as one of them (a new private window asks again).",
        StatusCode::NOT_FOUND => "The console is at /ui.",
        _ => "Reload the page in a moment.",
    };
    let title = status.canonical_reason().unwrap_or("Refused");
    // The message last: nothing in it is taken for a placeholder.
    REFUSAL
        .replace("{advice}", advice)
        .replace("{title}", title)
        .replace("{status}", status.as_str())
        .replace("{message}", &escape_html(message))
}

/// `text` safe inside HTML text.
fn escape_html(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_page_escapes_the_message_and_fills_every_placeholder() {
        let page = refusal_html(StatusCode::FORBIDDEN, "<b>\"x\" & 'y'</b> {advice}");
        assert!(page.contains("&lt;b&gt;&quot;x&quot; &amp; &#39;y&#39;&lt;/b&gt; {advice}"));
        assert!(page.contains("<title>Forbidden · Baton console</title>"));
        assert!(page.contains("<h1>403 Forbidden</h1>"));
        assert!(page.contains("admin users"));
        let filled = page.replace("{advice}</p>", "");
        assert!(!filled.contains("{title}") && !filled.contains("{status}"));
    }
}
