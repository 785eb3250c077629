//! `--http-listen`: the operator's HTTP endpoint (`baton-http`), started
//! among the node's tasks once its client port is bound, stopped with it.

use std::net::SocketAddr;
use std::sync::Arc;

use baton_http::members::MembershipAdmin;
use baton_http::{HttpContext, HttpEndpoint, StorageHealth, StreamHandshake};
use baton_server::{LockNode, Prefixed, Server, ServerConfig, ServerTls};
use tokio::net::TcpStream;

/// With `--tls-cert`, the HTTP endpoint speaks TLS too, with the client
/// port's certificate (reloaded with it) and its client CA, if any.
struct TlsHandshake(Arc<ServerTls>);

impl StreamHandshake for TlsHandshake {
    type Stream = tokio_rustls::server::TlsStream<Prefixed<TcpStream>>;

    async fn handshake(&self, tcp: TcpStream) -> std::io::Result<Self::Stream> {
        self.0.accept_fresh(tcp).await
    }
}

/// A started endpoint: where it listens, and the flag a node whose state
/// can no longer be saved raises (then `/health` answers 503).
pub struct Started {
    pub addr: SocketAddr,
    pub storage: StorageHealth,
}

/// Binds and starts the endpoint if `addr` is given, over TLS when the
/// client port has TLS.
pub async fn start<N: LockNode>(
    addr: Option<SocketAddr>,
    server: &Server<N>,
    config: &ServerConfig,
    members: Option<Arc<dyn MembershipAdmin>>,
) -> Result<Option<Started>, String> {
    let Some(addr) = addr else {
        return Ok(None);
    };
    let endpoint = HttpEndpoint::bind(addr).await.map_err(|e| e.to_string())?;
    let bound = endpoint
        .local_addr()
        .map_err(|e| format!("the HTTP listener has no address: {e}"))?;
    server.advertise_http(bound);
    let self_addr = config
        .advertise
        .clone()
        .unwrap_or_else(|| server.local_addr().to_string());
    let mut ctx = HttpContext::new(server.locks().clone(), self_addr, config.auth.clone());
    ctx.members = members;
    let storage = ctx.storage.clone();
    match &config.tls {
        Some(tls) => endpoint
            .with_handshake(TlsHandshake(tls.clone()))
            .spawn(server.tasks(), ctx),
        None => endpoint.spawn(server.tasks(), ctx),
    }
    Ok(Some(Started {
        addr: bound,
        storage,
    }))
}

/// After `listening <addr>`: a second stdout line, for scripts that gave
/// port 0.
pub fn announce(started: &Option<Started>) {
    if let Some(started) = started {
        crate::print_line(&format!("http listening {}", started.addr));
        tracing::info!(addr = %started.addr, "HTTP endpoint serving");
    }
}

/// Tells `/health` the node's state can no longer be saved.
pub fn storage_failed(started: &Option<Started>, error: &impl std::fmt::Display) {
    if let Some(started) = started {
        started.storage.failed(error.to_string());
    }
}
