//! The operator's HTTP endpoint of a Baton node (`batond --http-listen`):
//!
//! - `GET /health`: 200 with a small JSON body while the node serves, or is
//!   a standby/follower that knows the serving node; 503 otherwise
//!   ([`health`] says exactly when).
//! - `GET /metrics`: the node's `baton_*` metrics in the Prometheus text
//!   format, rendered by `prometheus-client` ([`metrics_text`]).
//! - `GET /v1/locks?prefix=P&limit=N&after=K`: a page of the held locks,
//!   sorted by key; `GET /v1/cluster`: role, mode and the members as this
//!   node knows them ([`v1`]). With `--auth-file` both need an admin user
//!   (HTTP basic auth, [`basic_auth`]); `/health` and `/metrics` stay open:
//!   they show no key.
//! - `POST /v1/force-release` (admin): ends a key's grant by its token
//!   ([`force_release`]); `GET /ui`: the operator's console in a browser,
//!   over these same routes, and `GET /ui/changes`, the recent changes
//!   the endpoint saw ([`changes`]) (admin).
//!
//! The endpoint is one more task set of the node: [`HttpEndpoint::spawn`]
//! starts its accept loop among the node's [`Tasks`](baton_server::Tasks),
//! so it stops with the node. Everything is bounded ([`limits`]): open
//! connections, requests served at once, the time to send headers and to
//! answer, the request body, the page size.

pub mod basic_auth;
pub mod changes;
pub mod force_release;
pub mod health;
pub mod limits;
pub mod members;
pub mod metrics_text;
mod routes;
mod serve;
mod ui;
pub mod v1;
mod view;

pub use routes::router;
pub use serve::{HttpEndpoint, HttpError, PlainTcp, StreamHandshake};
pub use view::{HttpContext, NodeView, StorageHealth};

#[cfg(test)]
mod tests;
