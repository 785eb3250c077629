//! TLS on the client port: the node's certificate, key and (optionally)
//! the CA its clients' certificates must be signed by, loaded from PEM
//! files, swapped on reload, and the handshake of one connection.
//!
//! rustls with the `ring` provider (no OpenSSL); TLS 1.2 and 1.3. The
//! configuration is read once per connection, at its handshake, so a
//! reload costs the requests nothing and applies to new connections.

use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use baton_core::LogGate;

use bytes::{Buf, BytesMut};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_rustls::server::TlsStream;

/// How long a client may take over its TLS handshake.
pub(crate) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// Where the node's TLS material lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsPaths {
    /// The certificate chain, leaf first (PEM).
    pub cert: PathBuf,
    /// The private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// With it, clients must present a certificate signed by this CA (PEM).
    pub client_ca: Option<PathBuf>,
}

/// Why the TLS material could not be used; every case names the file.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {}: {why}", .path.display())]
    Read { path: PathBuf, why: String },
    #[error("{} holds no {what}", .path.display())]
    Empty { path: PathBuf, what: &'static str },
    #[error("{} and {} do not make a usable certificate and key: {why}", .cert.display(), .key.display())]
    Pair {
        cert: PathBuf,
        key: PathBuf,
        why: String,
    },
    #[error("{} is not a usable client CA: {why}", .path.display())]
    ClientCa { path: PathBuf, why: String },
}

/// A refused client certificate is logged at most once per this, with
/// how many were refused since.
const REFUSED_CERT_LOG_INTERVAL: Duration = Duration::from_secs(60);

/// The node's TLS configuration, swapped whole by [`ServerTls::reload`].
pub struct ServerTls {
    paths: TlsPaths,
    current: RwLock<Arc<rustls::ServerConfig>>,
    /// When a refused client certificate was last logged.
    refused_certs: Mutex<LogGate<Instant>>,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("paths", &self.paths)
            .finish_non_exhaustive()
    }
}

impl ServerTls {
    /// Loads the files; any problem is an error naming the file.
    pub fn load(paths: TlsPaths) -> Result<ServerTls, TlsError> {
        let config = build(&paths)?;
        Ok(ServerTls {
            paths,
            current: RwLock::new(Arc::new(config)),
            refused_certs: Mutex::new(LogGate::default()),
        })
    }

    /// Logs a failed handshake: a refused client certificate (a client
    /// set up wrong, which its operator must hear of) at warn, in one
    /// sentence, at most once per [`REFUSED_CERT_LOG_INTERVAL`]; anything
    /// else (a scanner, a client that gave up) at debug.
    pub(crate) fn log_failure(&self, error: &io::Error) {
        let Some(why) = refused_certificate(error) else {
            tracing::debug!(%error, "TLS handshake failed");
            return;
        };
        let mut gate = self
            .refused_certs
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(quiet) = gate.note(Instant::now(), REFUSED_CERT_LOG_INTERVAL) {
            tracing::warn!(
                refused_quietly = quiet,
                "refused a client certificate: {why}"
            );
        }
    }

    /// Reads the files again; on success new connections get the new
    /// material, on failure the old one stays in force.
    pub fn reload(&self) -> Result<(), TlsError> {
        let config = Arc::new(build(&self.paths)?);
        match self.current.write() {
            Ok(mut current) => *current = config,
            Err(poisoned) => *poisoned.into_inner() = config,
        }
        Ok(())
    }

    pub fn paths(&self) -> &TlsPaths {
        &self.paths
    }

    fn config(&self) -> Arc<rustls::ServerConfig> {
        match self.current.read() {
            Ok(current) => current.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Runs the handshake over a fresh `stream` (the HTTP endpoint's, which
    /// speaks TLS from its first byte when the client port does).
    pub async fn accept_fresh<S: AsyncRead + AsyncWrite + Unpin>(
        &self,
        stream: S,
    ) -> io::Result<TlsStream<Prefixed<S>>> {
        self.accept(stream, BytesMut::new()).await
    }

    /// Runs the handshake over `stream`, whose first bytes (`already_read`)
    /// were read to tell TLS from the rest, within [`HANDSHAKE_TIMEOUT`].
    pub(crate) async fn accept<S: AsyncRead + AsyncWrite + Unpin>(
        &self,
        stream: S,
        already_read: BytesMut,
    ) -> io::Result<TlsStream<Prefixed<S>>> {
        let acceptor = tokio_rustls::TlsAcceptor::from(self.config());
        let handshake = acceptor.accept(Prefixed {
            head: already_read,
            stream,
        });
        match tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake).await {
            Ok(result) => result,
            Err(_) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "TLS handshake timed out",
            )),
        }
    }
}

/// Why a handshake refused the client's certificate, in one sentence;
/// `None` if it failed for another reason. An X.509 v1 certificate (what
/// `openssl x509 -req` makes without extensions) is the usual cause, which
/// rustls names only by webpki's error name.
pub(crate) fn refused_certificate(error: &io::Error) -> Option<String> {
    let rustls_error = error.get_ref()?.downcast_ref::<rustls::Error>()?;
    let rustls::Error::InvalidCertificate(why) = rustls_error else {
        return None;
    };
    Some(match why {
        rustls::CertificateError::Other(other) if other.to_string() == "UnsupportedCertVersion" => {
            "it is X.509 v1 and only v3 is accepted: make it with extensions \
             (openssl x509 -req ... -extfile, as deploy/tls-certs.sh does)"
                .to_string()
        }
        rustls::CertificateError::UnknownIssuer | rustls::CertificateError::BadSignature => {
            "it is not signed by the CA of --tls-client-ca".to_string()
        }
        rustls::CertificateError::Expired | rustls::CertificateError::ExpiredContext { .. } => {
            "it has expired".to_string()
        }
        other => format!("{}", rustls::Error::InvalidCertificate(other.clone())),
    })
}

fn build(paths: &TlsPaths) -> Result<rustls::ServerConfig, TlsError> {
    let certs = load_certs(&paths.cert, "certificate")?;
    let key = load_key(&paths.key)?;
    let pair_error = |why: String| TlsError::Pair {
        cert: paths.cert.clone(),
        key: paths.key.clone(),
        why,
    };
    let builder = rustls::ServerConfig::builder_with_provider(baton_tls::provider())
        .with_protocol_versions(baton_tls::VERSIONS)
        .map_err(|e| pair_error(e.to_string()))?;
    let builder = match &paths.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => builder.with_client_cert_verifier(client_verifier(ca)?),
    };
    builder
        .with_single_cert(certs, key)
        .map_err(|e| pair_error(e.to_string()))
}

fn client_verifier(
    path: &Path,
) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>, TlsError> {
    let roots = root_store(path)?;
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), baton_tls::provider())
        .build()
        .map_err(|e| TlsError::ClientCa {
            path: path.to_path_buf(),
            why: e.to_string(),
        })
}

/// The certificates of a CA file, as trust anchors.
pub fn root_store(path: &Path) -> Result<rustls::RootCertStore, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in load_certs(path, "CA certificate")? {
        roots.add(cert).map_err(|e| TlsError::ClientCa {
            path: path.to_path_buf(),
            why: e.to_string(),
        })?;
    }
    Ok(roots)
}

/// Every certificate of a PEM file; none at all is an error.
pub fn load_certs(
    path: &Path,
    what: &'static str,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    baton_tls::certs(&read_pem(path)?).map_err(|e| pem_error(path, what, e))
}

/// The private key of a PEM file.
pub fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    baton_tls::key(&read_pem(path)?).map_err(|e| pem_error(path, "private key", e))
}

fn read_pem(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|e| TlsError::Read {
        path: path.to_path_buf(),
        why: rustls::pki_types::pem::Error::Io(e).to_string(),
    })
}

fn pem_error(path: &Path, what: &'static str, error: baton_tls::PemError) -> TlsError {
    let path = path.to_path_buf();
    match error {
        baton_tls::PemError::Empty(_) => TlsError::Empty { path, what },
        baton_tls::PemError::Invalid(e) => TlsError::Read {
            path,
            why: e.to_string(),
        },
    }
}

/// A stream whose first bytes were already read: they are read again
/// first, then the stream's own.
#[derive(Debug)]
pub struct Prefixed<S> {
    head: BytesMut,
    stream: S,
}

impl<S: AsyncRead + Unpin> AsyncRead for Prefixed<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if !self.head.is_empty() {
            let n = self.head.len().min(buf.remaining());
            buf.put_slice(&self.head[..n]);
            self.head.advance(n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Prefixed<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    #[tokio::test]
    async fn prefixed_reads_the_head_then_the_stream() {
        let (mut ours, theirs) = tokio::io::duplex(64);
        tokio::io::AsyncWriteExt::write_all(&mut ours, b" world")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        drop(ours);
        let mut stream = Prefixed {
            head: BytesMut::from(&b"hello"[..]),
            stream: theirs,
        };
        let mut all = String::new();
        stream
            .read_to_string(&mut all)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(all, "hello world");
    }

    #[test]
    fn a_v1_client_certificate_is_one_sentence() {
        #[derive(Debug)]
        struct Named(&'static str);
        impl std::fmt::Display for Named {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.0)
            }
        }
        impl std::error::Error for Named {}
        let v1 = rustls::Error::InvalidCertificate(rustls::CertificateError::Other(
            rustls::OtherError(Arc::new(Named("UnsupportedCertVersion"))),
        ));
        let why = refused_certificate(&io::Error::new(io::ErrorKind::InvalidData, v1))
            .unwrap_or_default();
        assert!(why.contains("X.509 v1") && why.contains("only v3"), "{why}");
        assert!(!why.contains("Other"), "{why}");
        let unknown = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        let why = refused_certificate(&io::Error::new(io::ErrorKind::InvalidData, unknown));
        assert_eq!(
            why.as_deref(),
            Some("it is not signed by the CA of --tls-client-ca")
        );
        let eof = io::Error::new(io::ErrorKind::UnexpectedEof, "gone");
        assert_eq!(refused_certificate(&eof), None);
    }

    #[test]
    fn missing_and_empty_files_are_named() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "").unwrap_or_else(|e| panic!("{e}"));
        let missing = dir.path().join("missing.pem");
        let error = ServerTls::load(TlsPaths {
            cert: missing.clone(),
            key: empty.clone(),
            client_ca: None,
        })
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert!(error.contains("missing.pem"), "{error}");
        let error = ServerTls::load(TlsPaths {
            cert: empty.clone(),
            key: empty,
            client_ca: None,
        })
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert!(error.contains("empty.pem holds no certificate"), "{error}");
    }
}
