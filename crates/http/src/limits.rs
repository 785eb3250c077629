//! The bounds of the HTTP endpoint. Every one of them holds whatever a
//! client sends: the endpoint may be reachable by anyone the operator's
//! network lets through.

use std::time::Duration;

/// Connections open at once; one more is closed at once, unanswered.
pub const MAX_CONNECTIONS: usize = 256;
/// Requests to `/health`, `/metrics` (and unknown routes) answered at
/// once, over every connection; one more is answered 503 at once.
pub const MAX_CONCURRENT_REQUESTS: usize = 64;
/// Requests to the `/v1/` routes answered at once, apart: clients that
/// guess passwords (each failure waits 250 ms) or list large tables
/// cannot take the slots `/health` needs.
pub const MAX_CONCURRENT_ADMIN_REQUESTS: usize = 16;
/// Time a client has to send a request's headers (idle keep-alive
/// connections included) and to finish a TLS handshake.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Time a request may take to be answered; past it, 503.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest request body (no route takes one; the rest is refused 413).
pub const MAX_BODY_BYTES: usize = 16 * 1024;
/// The largest request head (request line and headers) hyper buffers.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;
/// The most locks one `/v1/locks` page holds (a larger `limit` is capped).
pub const MAX_PAGE: usize = baton_server::inspect::MAX_PAGE;
/// The page size when the request names none.
pub const DEFAULT_PAGE: usize = 1_000;
