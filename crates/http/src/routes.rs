//! The endpoint's routes and the bounds every request passes: at most
//! [`MAX_CONCURRENT_REQUESTS`] answered at once, and apart from them
//! [`MAX_CONCURRENT_ADMIN_REQUESTS`] on the `/v1/` routes (503 past it, at
//! once), each within [`REQUEST_TIMEOUT`] (503 past it), bodies of at most
//! [`MAX_BODY_BYTES`].

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use tokio::sync::Semaphore;

use crate::limits::{
    MAX_BODY_BYTES, MAX_CONCURRENT_ADMIN_REQUESTS, MAX_CONCURRENT_REQUESTS, REQUEST_TIMEOUT,
};
use crate::v1::error;
use crate::view::HttpContext;
use crate::{basic_auth, force_release, health, members, metrics_text, ui, v1};

/// The endpoint's router over `ctx`.
pub fn router(ctx: HttpContext) -> Router {
    let ctx = Arc::new(ctx);
    let admin_slots = Arc::new(Semaphore::new(MAX_CONCURRENT_ADMIN_REQUESTS));
    let admin = Router::new()
        .route("/v1/locks", get(v1::locks))
        .route("/v1/cluster", get(v1::cluster))
        .route("/v1/members", get(members::list).post(members::add))
        .route("/v1/members/{addr}", delete(members::remove))
        .route("/v1/force-release", post(force_release::release));
    let console = Router::new()
        .route("/ui", get(ui::page))
        .route("/ui/changes", get(ui::changes))
        .route("/ui/{file}", get(ui::file));
    // Inside the slot: a guesser's 250 ms waits take admin slots only.
    let guard = |routes: Router<Arc<HttpContext>>| {
        routes
            .route_layer(middleware::from_fn_with_state(
                ctx.clone(),
                basic_auth::require_admin,
            ))
            .route_layer(middleware::from_fn_with_state(admin_slots.clone(), bounded))
    };
    let admin =
        guard(admin).merge(guard(console).route_layer(middleware::from_fn(ui::readable_refusal)));
    let slots = Arc::new(Semaphore::new(MAX_CONCURRENT_REQUESTS));
    let open = Router::new()
        .route("/health", get(health_route))
        .route("/metrics", get(metrics_route))
        .fallback(|| async {
            error(
                StatusCode::NOT_FOUND,
                "no such route: /health, /metrics, /v1/locks, /v1/cluster, /v1/members, /v1/force-release, /ui",
            )
        })
        .layer(middleware::from_fn_with_state(slots, bounded));
    open.merge(admin)
        .with_state(ctx)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(middleware::from_fn(json_errors))
}

/// The most of a plain-text error body kept as the JSON error's words.
const MAX_ERROR_TEXT: usize = 1024;

/// An error axum answers on its own (405 for a method the route does not
/// take, a rejection of an extractor) gets the JSON body every other
/// error has: `{"error": ...}`, its status and headers kept. The
/// console's pages (`/ui`) answer in their own shape.
async fn json_errors(request: Request, next: Next) -> Response {
    let console = request.uri().path().starts_with("/ui");
    let asked = format!("{} {}", request.method(), request.uri().path());
    let response = next.run(request).await;
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|t| t.as_bytes().starts_with(b"application/json"));
    if console || is_json || !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, MAX_ERROR_TEXT)
        .await
        .map(|bytes| String::from_utf8_lossy(&bytes).trim().to_owned())
        .unwrap_or_default();
    let words = if !text.is_empty() {
        text
    } else if status == StatusCode::METHOD_NOT_ALLOWED {
        format!("method not allowed: {asked} (the Allow header lists the methods it takes)")
    } else {
        status
            .canonical_reason()
            .unwrap_or("request failed")
            .to_lowercase()
    };
    let json = error(status, words);
    let (json_parts, json_body) = json.into_parts();
    parts.headers.remove(header::CONTENT_LENGTH);
    for (name, value) in &json_parts.headers {
        parts.headers.insert(name, value.clone());
    }
    Response::from_parts(parts, json_body)
}

/// Every request: a slot among the concurrent ones, and a deadline.
async fn bounded(State(slots): State<Arc<Semaphore>>, request: Request, next: Next) -> Response {
    let Ok(_slot) = slots.try_acquire() else {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "too many requests at once; retry shortly",
        );
    };
    match tokio::time::timeout(REQUEST_TIMEOUT, next.run(request)).await {
        Ok(response) => response,
        Err(_) => error(StatusCode::SERVICE_UNAVAILABLE, "the request took too long"),
    }
}

async fn health_route(State(ctx): State<Arc<HttpContext>>) -> Response {
    let observed = ctx.node.observe();
    let (code, body) = health::assess(
        &observed.status,
        &ctx.self_addr,
        observed.health_issue.as_deref(),
        ctx.storage.failure(),
    );
    (code, Json(body)).into_response()
}

async fn metrics_route(State(ctx): State<Arc<HttpContext>>) -> Response {
    let text = metrics_text::render(&ctx);
    ([(header::CONTENT_TYPE, metrics_text::CONTENT_TYPE)], text).into_response()
}
