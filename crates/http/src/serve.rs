//! The endpoint's accept loop: each connection is a task among the node's
//! [`Tasks`] (so it stops with the node), served by hyper's HTTP/1.1 with
//! the routes of [`crate::router`]. At most [`MAX_CONNECTIONS`] at once
//! (one more is closed unanswered), headers within [`HEADER_TIMEOUT`],
//! each connection at most [`MAX_CONNECTION_AGE`] (then closed after its
//! request in progress).
//!
//! TLS: the loop runs every accepted TCP stream through a
//! [`StreamHandshake`] before HTTP; [`PlainTcp`] passes it as it is. A TLS
//! acceptor implements the same trait (its handshake bounded by
//! [`HEADER_TIMEOUT`] here) and is given with [`HttpEndpoint::with_handshake`].

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::Router;
use baton_server::Tasks;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tower::ServiceExt;

use crate::limits::{HEADER_TIMEOUT, MAX_CONNECTIONS, MAX_HEAD_BYTES};
use crate::routes::router;
use crate::view::HttpContext;

/// A connection lives at most this long (then it closes once its request
/// in progress is answered): a client cannot hold a slot for ever.
pub const MAX_CONNECTION_AGE: Duration = Duration::from_secs(300);

/// Why the endpoint could not start.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("cannot listen for HTTP on {addr}: {source}")]
    Bind { addr: SocketAddr, source: io::Error },
}

/// What turns an accepted TCP stream into the stream HTTP is read from:
/// the seam where TLS goes.
pub trait StreamHandshake: Send + Sync + 'static {
    type Stream: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    fn handshake(&self, tcp: TcpStream) -> impl Future<Output = io::Result<Self::Stream>> + Send;
}

/// Plain HTTP: the TCP stream as it is.
#[derive(Debug, Clone, Copy, Default)]
pub struct PlainTcp;

impl StreamHandshake for PlainTcp {
    type Stream = TcpStream;
    async fn handshake(&self, tcp: TcpStream) -> io::Result<TcpStream> {
        Ok(tcp)
    }
}

/// A bound endpoint, not yet serving.
#[derive(Debug)]
pub struct HttpEndpoint<H = PlainTcp> {
    listener: TcpListener,
    handshake: H,
}

impl HttpEndpoint<PlainTcp> {
    /// Binds `addr` (port 0 picks a free port) for plain HTTP.
    pub async fn bind(addr: SocketAddr) -> Result<HttpEndpoint<PlainTcp>, HttpError> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| HttpError::Bind { addr, source })?;
        Ok(HttpEndpoint {
            listener,
            handshake: PlainTcp,
        })
    }
}

impl<H: StreamHandshake> HttpEndpoint<H> {
    /// The same endpoint with another handshake (TLS).
    pub fn with_handshake<T: StreamHandshake>(self, handshake: T) -> HttpEndpoint<T> {
        HttpEndpoint {
            listener: self.listener,
            handshake,
        }
    }

    /// The address bound.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves `ctx` among `tasks` until the node stops, and keeps its
    /// log of recent changes.
    pub fn spawn(self, tasks: &Tasks, ctx: HttpContext) {
        let log =
            crate::changes::keep(ctx.node.clone(), ctx.self_addr.clone(), ctx.changes.clone());
        tasks.spawn(log);
        let app = router(ctx);
        let handshake = Arc::new(self.handshake);
        tasks.spawn(accept_loop(self.listener, handshake, app, tasks.clone()));
    }
}

async fn accept_loop<H: StreamHandshake>(
    listener: TcpListener,
    handshake: Arc<H>,
    app: Router,
    tasks: Tasks,
) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                // Out of file descriptors and the like: pause, not spin.
                tracing::warn!(%error, "HTTP accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::debug!(%peer, "HTTP connection refused: too many open");
            continue;
        };
        let (app, handshake) = (app.clone(), handshake.clone());
        tasks.spawn(async move {
            let _slot = slot;
            serve_connection(tcp, peer, &*handshake, app).await;
        });
    }
}

async fn serve_connection<H: StreamHandshake>(
    tcp: TcpStream,
    peer: SocketAddr,
    handshake: &H,
    app: Router,
) {
    let _ = tcp.set_nodelay(true);
    let stream = match tokio::time::timeout(HEADER_TIMEOUT, handshake.handshake(tcp)).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(error)) => {
            tracing::debug!(%peer, %error, "HTTP handshake failed");
            return;
        }
        Err(_) => return,
    };
    let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
        request.extensions_mut().insert(ConnectInfo(peer));
        app.clone().oneshot(request)
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .max_buf_size(MAX_HEAD_BYTES)
        .keep_alive(true);
    let connection = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(connection);
    tokio::select! {
        result = connection.as_mut() => {
            if let Err(error) = result {
                tracing::debug!(%peer, %error, "HTTP connection ended");
            }
            return;
        }
        () = tokio::time::sleep(MAX_CONNECTION_AGE) => {}
    }
    connection.as_mut().graceful_shutdown();
    let _ = tokio::time::timeout(HEADER_TIMEOUT, connection).await;
}
