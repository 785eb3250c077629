//! The operator's console at `/ui`: one HTML page, its stylesheet and its
//! script, embedded in the binary (nothing is fetched at run time, so it
//! works on networks without internet). The page reads what every tool
//! reads, `/v1/cluster`, `/v1/locks` and `/metrics`, every two seconds, and
//! changes things through `/v1/force-release` and `/v1/members`. Served
//! behind the `/v1/` routes' admin check: a non-admin gets 403 and no page.
//!
//! The charts are computed in the page from successive scrapes of
//! `/metrics`, not from a history kept in the node: the node keeps no more
//! state and takes no more lock than a scrape, and costs nothing while
//! nobody looks; the page's history starts when it is opened.

use axum::extract::Path;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::v1::error;

const PAGE: &str = include_str!("../assets/console.html");
const STYLE: &str = include_str!("../assets/console.css");
const SCRIPT: &str = include_str!("../assets/console.js");

/// Only this origin's files, no inline script, no framing (a framed
/// console could be clicked into a force-release).
const POLICY: &str = "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

fn asset(content_type: &'static str, body: &'static str) -> Response {
    let mut response = (
        [(header::CONTENT_TYPE, HeaderValue::from_static(content_type))],
        body,
    )
        .into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(POLICY),
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

/// `GET /ui/{file}`: the page's stylesheet and script.
pub async fn file(Path(name): Path<String>) -> Response {
    match name.as_str() {
        "console.css" => asset("text/css; charset=utf-8", STYLE),
        "console.js" => asset("text/javascript; charset=utf-8", SCRIPT),
        "" => page().await,
        _ => error(StatusCode::NOT_FOUND, "no such file of the console"),
    }
}
