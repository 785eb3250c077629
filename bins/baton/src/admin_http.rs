//! A small client of a node's HTTP endpoint (`batond --http-listen`), for
//! the admin commands (`baton locks`, `baton member ...`): one request per
//! connection with hyper's client connection API, over TCP, or over TLS
//! with the client crate's rustls configuration when the CLI has
//! `--tls-ca`; HTTP basic auth from the CLI's credentials. Every request
//! is bounded: a timeout over the whole exchange and a cap on the body.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE, HOST};
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use rustls_pki_types::ServerName;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

/// The largest response body read (a full `/v1/locks` page of long keys
/// fits: 10000 locks of 250-byte keys).
pub const MAX_BODY: usize = 8 * 1024 * 1024;

/// How long one request may take, connecting included, by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a request got no usable answer.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("cannot reach the HTTP endpoint {addr}: {why}")]
    Connect { addr: String, why: String },
    #[error("TLS with the HTTP endpoint {addr}: {why}")]
    Tls { addr: String, why: String },
    #[error("no answer from the HTTP endpoint {addr} within {} s", .after.as_secs())]
    Timeout { addr: String, after: Duration },
    #[error("HTTP exchange with {addr} failed: {why}")]
    Protocol { addr: String, why: String },
    #[error("the answer of {addr} is larger than {MAX_BODY} bytes")]
    TooLarge { addr: String },
}

/// An answer: its status code and body. A body that is not JSON is kept
/// as a JSON string; an empty one is `null`.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    pub status: u16,
    pub body: Value,
}

impl Reply {
    /// The `"error"` text of a JSON error body, or the body itself.
    pub fn error_text(&self) -> String {
        match &self.body {
            Value::Object(o) => match o.get("error") {
                Some(Value::String(text)) => text.clone(),
                _ => self.body.to_string(),
            },
            Value::String(text) => text.trim().to_owned(),
            Value::Null => format!("HTTP {}", self.status),
            other => other.to_string(),
        }
    }
}

/// Where and how to send requests.
#[derive(Clone)]
pub struct AdminHttp {
    /// `host:port`.
    addr: String,
    tls: Option<Arc<rustls::ClientConfig>>,
    /// The `Authorization` header's value, when credentials were given.
    basic: Option<String>,
    timeout: Duration,
}

impl std::fmt::Debug for AdminHttp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminHttp")
            .field("addr", &self.addr)
            .field("tls", &self.tls.is_some())
            .field("basic", &self.basic.is_some())
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl AdminHttp {
    /// Requests to `addr` (`host:port`), over TLS when `tls` is given, with
    /// basic auth when `credentials` are.
    pub fn new(
        addr: String,
        tls: Option<Arc<rustls::ClientConfig>>,
        credentials: Option<(&str, &[u8])>,
    ) -> AdminHttp {
        let basic = credentials.map(|(user, secret)| {
            let mut pair = user.as_bytes().to_vec();
            pair.push(b':');
            pair.extend_from_slice(secret);
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(pair)
            )
        });
        AdminHttp {
            addr,
            tls,
            basic,
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// The endpoint's address.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// `GET path` (`path` includes its query string).
    pub async fn get(&self, path: &str) -> Result<Reply, HttpError> {
        self.request(Method::GET, path, None).await
    }

    /// `POST path` with a JSON body.
    // The lead's `baton member add` sends with it.
    pub async fn post(&self, path: &str, body: &Value) -> Result<Reply, HttpError> {
        self.request(Method::POST, path, Some(body.to_string().into_bytes()))
            .await
    }

    /// `DELETE path`.
    // The lead's `baton member remove` sends with it.
    pub async fn delete(&self, path: &str) -> Result<Reply, HttpError> {
        self.request(Method::DELETE, path, None).await
    }

    async fn request(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<Reply, HttpError> {
        let exchange = self.exchange(method, path, body);
        match tokio::time::timeout(self.timeout, exchange).await {
            Ok(reply) => reply,
            Err(_) => Err(HttpError::Timeout {
                addr: self.addr.clone(),
                after: self.timeout,
            }),
        }
    }

    async fn exchange(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<Reply, HttpError> {
        let request = self.build(method, path, body)?;
        let tcp = TcpStream::connect(&self.addr)
            .await
            .map_err(|e| HttpError::Connect {
                addr: self.addr.clone(),
                why: crate::unreachable::words(&e),
            })?;
        let _ = tcp.set_nodelay(true);
        match &self.tls {
            None => self.send(tcp, request).await,
            Some(config) => {
                let tls = self.handshake(tcp, config).await?;
                self.send(tls, request).await
            }
        }
    }

    fn build(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<Request<Full<Bytes>>, HttpError> {
        let mut builder = Request::builder()
            .method(method)
            .uri(path)
            .header(HOST, &self.addr);
        if let Some(basic) = &self.basic {
            let mut value = HeaderValue::from_str(basic).map_err(|e| self.protocol(e))?;
            value.set_sensitive(true);
            builder = builder.header(AUTHORIZATION, value);
        }
        if body.is_some() {
            builder = builder.header(CONTENT_TYPE, "application/json");
        }
        builder
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .map_err(|e| self.protocol(e))
    }

    async fn handshake(
        &self,
        tcp: TcpStream,
        config: &Arc<rustls::ClientConfig>,
    ) -> Result<tokio_rustls::client::TlsStream<TcpStream>, HttpError> {
        let tls_error = |why: String| HttpError::Tls {
            addr: self.addr.clone(),
            why,
        };
        let host = self.addr.rsplit_once(':').map_or(&*self.addr, |(h, _)| h);
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let name = ServerName::try_from(host.to_owned())
            .map_err(|_| tls_error(format!("{host} is neither a DNS name nor an IP address")))?;
        tokio_rustls::TlsConnector::from(config.clone())
            .connect(name, tcp)
            .await
            .map_err(|e| tls_error(baton_client::TlsConfig::handshake_failure(&e)))
    }

    async fn send<S>(&self, stream: S, request: Request<Full<Bytes>>) -> Result<Reply, HttpError>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| self.protocol(e))?;
        // The connection task ends with the exchange (or with the timeout,
        // when the runtime drops it).
        tokio::spawn(async move {
            let _ = connection.await;
        });
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| self.protocol(e))?;
        let status = response.status().as_u16();
        let collected = Limited::new(response.into_body(), MAX_BODY)
            .collect()
            .await
            .map_err(|e| {
                if e.is::<http_body_util::LengthLimitError>() {
                    HttpError::TooLarge {
                        addr: self.addr.clone(),
                    }
                } else {
                    self.protocol(e)
                }
            })?;
        Ok(Reply {
            status,
            body: parse_body(&collected.to_bytes()),
        })
    }

    fn protocol(&self, why: impl std::fmt::Display) -> HttpError {
        HttpError::Protocol {
            addr: self.addr.clone(),
            why: why.to_string(),
        }
    }
}

fn parse_body(bytes: &[u8]) -> Value {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Value::Null;
    }
    serde_json::from_slice(bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(bytes).into_owned()))
}

/// `text` escaped for a URL's query string: everything but unreserved
/// characters as `%XX` (UTF-8 bytes).
pub fn query_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_the_query() {
        assert_eq!(query_escape("jobs/a b&c=d"), "jobs%2Fa%20b%26c%3Dd");
        assert_eq!(query_escape("é"), "%C3%A9");
        assert_eq!(query_escape("A-z_0.~"), "A-z_0.~");
    }

    #[test]
    fn bodies_are_json_text_or_null() {
        assert_eq!(parse_body(b""), Value::Null);
        assert_eq!(parse_body(b"{\"a\":1}")["a"], 1);
        assert_eq!(parse_body(b"nope"), Value::String("nope".into()));
        let reply = Reply {
            status: 400,
            body: parse_body(b"{\"error\":\"bad limit\"}"),
        };
        assert_eq!(reply.error_text(), "bad limit");
    }

    #[test]
    fn basic_auth_is_base64_of_user_colon_secret() {
        let http = AdminHttp::new("h:1".into(), None, Some(("ops", b"0ps-0nly")));
        assert_eq!(http.basic.as_deref(), Some("Basic b3BzOjBwcy0wbmx5"));
    }

    #[tokio::test]
    async fn a_refused_endpoint_is_named() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        drop(listener);
        let err = AdminHttp::new(addr.clone(), None, None)
            .get("/v1/locks")
            .await
            .expect_err("refused");
        assert_eq!(
            err.to_string(),
            format!("cannot reach the HTTP endpoint {addr}: connection refused")
        );
    }
}
