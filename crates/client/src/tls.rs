//! TLS to the nodes: the CA their certificates must be signed by, an
//! optional client certificate, the handshake, and the one clear error a
//! mismatch gives (a TLS client of a plaintext node, a plaintext client of
//! a TLS node, a certificate that does not verify).
//!
//! rustls with the `ring` provider (no OpenSSL), TLS 1.2 and 1.3. The name
//! checked against the node's certificate is the host part of the address
//! it is reached at; IP addresses work (the certificate must list them).

use std::io;
use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use crate::error::{Error, Result};

/// What a client trusts and shows when it speaks TLS; give it to
/// [`ClientBuilder::tls`](crate::ClientBuilder::tls).
///
/// ```no_run
/// let tls = baton_client::TlsConfig::from_ca_file("/etc/baton/ca.pem")?
///     .identity_files("/etc/baton/client.pem", "/etc/baton/client.key")?;
/// let builder = baton_client::Client::builder().servers(["node-1.example:7411"]).tls(tls);
/// # let _ = builder;
/// # Ok::<(), baton_client::Error>(())
/// ```
#[derive(Clone)]
pub struct TlsConfig {
    roots: Arc<rustls::RootCertStore>,
    identity: Option<(Vec<CertificateDer<'static>>, Arc<PrivateKeyDer<'static>>)>,
}

impl std::fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsConfig")
            .field("roots", &self.roots.len())
            .field("client_certificate", &self.identity.is_some())
            .finish()
    }
}

fn setup(what: impl std::fmt::Display, why: impl std::fmt::Display) -> Error {
    Error::TlsConfig {
        why: format!("{what}: {why}"),
    }
}

impl TlsConfig {
    /// Trusts the CA certificates of a PEM file.
    ///
    /// ```no_run
    /// let tls = baton_client::TlsConfig::from_ca_file("/etc/baton/ca.pem")?;
    /// # let _ = tls;
    /// # Ok::<(), baton_client::Error>(())
    /// ```
    pub fn from_ca_file(path: impl AsRef<Path>) -> Result<TlsConfig> {
        let path = path.as_ref();
        let pem = std::fs::read(path).map_err(|e| setup(path.display(), e))?;
        TlsConfig::ca_certs(&pem, &path.display().to_string())
    }

    /// Trusts the CA certificates of PEM text.
    ///
    /// ```
    /// // Not PEM: a setup error naming what is wrong.
    /// assert!(baton_client::TlsConfig::from_ca_pem(b"not pem").is_err());
    /// ```
    pub fn from_ca_pem(pem: &[u8]) -> Result<TlsConfig> {
        TlsConfig::ca_certs(pem, "the CA PEM")
    }

    fn ca_certs(pem: &[u8], name: &str) -> Result<TlsConfig> {
        let mut roots = rustls::RootCertStore::empty();
        for cert in certs(pem, name)? {
            roots.add(cert).map_err(|e| setup(name, e))?;
        }
        Ok(TlsConfig {
            roots: Arc::new(roots),
            identity: None,
        })
    }

    /// Shows this client certificate (chain, PEM) and key (PEM) to nodes
    /// that ask for one, from files.
    ///
    /// ```no_run
    /// let tls = baton_client::TlsConfig::from_ca_file("ca.pem")?
    ///     .identity_files("client.pem", "client.key")?;
    /// # let _ = tls;
    /// # Ok::<(), baton_client::Error>(())
    /// ```
    pub fn identity_files(
        self,
        cert: impl AsRef<Path>,
        key: impl AsRef<Path>,
    ) -> Result<TlsConfig> {
        let (cert, key) = (cert.as_ref(), key.as_ref());
        let cert_pem = std::fs::read(cert).map_err(|e| setup(cert.display(), e))?;
        let key_pem = std::fs::read(key).map_err(|e| setup(key.display(), e))?;
        self.identity(
            &cert_pem,
            &key_pem,
            &cert.display().to_string(),
            &key.display().to_string(),
        )
    }

    /// Shows this client certificate and key, as PEM text.
    ///
    /// ```no_run
    /// let ca = std::fs::read("ca.pem").unwrap();
    /// let (cert, key) = (std::fs::read("client.pem").unwrap(), std::fs::read("client.key").unwrap());
    /// let tls = baton_client::TlsConfig::from_ca_pem(&ca)?.identity_pem(&cert, &key)?;
    /// # let _ = tls;
    /// # Ok::<(), baton_client::Error>(())
    /// ```
    pub fn identity_pem(self, cert_pem: &[u8], key_pem: &[u8]) -> Result<TlsConfig> {
        self.identity(
            cert_pem,
            key_pem,
            "the client certificate PEM",
            "the client key PEM",
        )
    }

    fn identity(
        mut self,
        cert_pem: &[u8],
        key_pem: &[u8],
        cert: &str,
        key: &str,
    ) -> Result<TlsConfig> {
        let chain = certs(cert_pem, cert)?;
        let private = baton_tls::key(key_pem).map_err(|e| setup(key, e))?;
        self.identity = Some((chain, Arc::new(private)));
        // Checked now, so a mismatched pair fails here rather than per connection.
        self.client_config()?;
        Ok(self)
    }

    /// The rustls configuration this makes, for another protocol to the
    /// same nodes (the `baton` CLI's HTTP admin requests, say): the same
    /// CA, client certificate and protocol versions as the client's
    /// connections.
    ///
    /// ```no_run
    /// let tls = baton_client::TlsConfig::from_ca_file("/etc/baton/ca.pem")?;
    /// let rustls_config = tls.rustls_client_config()?;
    /// # let _ = rustls_config;
    /// # Ok::<(), baton_client::Error>(())
    /// ```
    pub fn rustls_client_config(&self) -> Result<Arc<rustls::ClientConfig>> {
        self.client_config()
    }

    /// Why a TLS handshake made with [`TlsConfig::rustls_client_config`]
    /// failed, in the words of [`Error::Tls`]: one sentence, naming both
    /// the name connected by and the certificate's names when they differ.
    ///
    /// ```
    /// let refused = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
    /// let why = baton_client::TlsConfig::handshake_failure(&refused);
    /// assert_eq!(why, "the node closed the connection during the TLS handshake");
    /// ```
    pub fn handshake_failure(error: &io::Error) -> String {
        describe(error)
    }

    /// The rustls configuration every connection of a client shares.
    pub(crate) fn client_config(&self) -> Result<Arc<rustls::ClientConfig>> {
        let builder = rustls::ClientConfig::builder_with_provider(baton_tls::provider())
            .with_protocol_versions(baton_tls::VERSIONS)
            .map_err(|e| setup("TLS", e))?
            .with_root_certificates(self.roots.clone());
        let config = match &self.identity {
            None => builder.with_no_client_auth(),
            Some((chain, key)) => builder
                .with_client_auth_cert(chain.clone(), key.clone_key())
                .map_err(|e| setup("the client certificate and key", identity_failure(&e)))?,
        };
        Ok(Arc::new(config))
    }
}

/// Why a client certificate was refused, in words: an X.509 v1
/// certificate (what `openssl x509 -req` makes without extensions) is the
/// usual cause, which rustls reports only as webpki's error name.
fn identity_failure(error: &rustls::Error) -> String {
    match error {
        rustls::Error::InvalidCertificate(rustls::CertificateError::Other(other))
            if other.to_string() == "UnsupportedCertVersion" =>
        {
            "the certificate is X.509 v1 and only v3 is accepted: make it with extensions \
             (openssl x509 -req ... -extfile, as deploy/tls-certs.sh does)"
                .into()
        }
        other => other.to_string(),
    }
}

fn certs(pem: &[u8], name: &str) -> Result<Vec<CertificateDer<'static>>> {
    baton_tls::certs(pem).map_err(|e| setup(name, e))
}

/// A connection to a node, with or without TLS.
pub(crate) enum Connected {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

/// Why a connection could not be made.
#[derive(Debug)]
pub(crate) enum ConnectError {
    Io(io::Error),
    /// The TLS side failed: the words for [`Error::Tls`].
    Tls(String),
}

/// Connects to `addr`, through a TLS handshake when `tls` is given.
pub(crate) async fn connect(
    addr: &str,
    tls: Option<&Arc<rustls::ClientConfig>>,
) -> std::result::Result<Connected, ConnectError> {
    let stream = TcpStream::connect(addr).await.map_err(ConnectError::Io)?;
    // Requests are small and latency-bound; Nagle would only delay them.
    let _ = stream.set_nodelay(true);
    let Some(config) = tls else {
        return Ok(Connected::Plain(stream));
    };
    let name = server_name(addr).map_err(ConnectError::Tls)?;
    tokio_rustls::TlsConnector::from(config.clone())
        .connect(name, stream)
        .await
        .map(|stream| Connected::Tls(Box::new(stream)))
        .map_err(|e| ConnectError::Tls(describe(&e)))
}

/// The host part of `host:port` (`[v6]:port` too), as the name the node's
/// certificate must carry.
fn server_name(addr: &str) -> std::result::Result<ServerName<'static>, String> {
    let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(host.to_owned())
        .map_err(|_| format!("{host} is neither a DNS name nor an IP address"))
}

/// The clear words for a failed TLS exchange, or `None` when `error` is
/// not a TLS one.
pub(crate) fn tls_failure(error: &io::Error) -> Option<String> {
    let tls = error.get_ref()?.downcast_ref::<rustls::Error>()?;
    Some(match tls {
        rustls::Error::InvalidMessage(_) => {
            "the node does not speak TLS (it answered in plain text): connect without TLS".into()
        }
        rustls::Error::InvalidCertificate(why) => certificate_failure(why),
        rustls::Error::AlertReceived(rustls::AlertDescription::CertificateRequired) => {
            "the node requires a client certificate (--tls-cert/--tls-key)".into()
        }
        rustls::Error::AlertReceived(alert) => {
            format!("the node refused the TLS session ({alert:?}): is the client certificate signed by the CA the node trusts?")
        }
        other => other.to_string(),
    })
}

/// One sentence for a node certificate that does not verify, naming what
/// was expected and what the certificate presents; rustls's own words for
/// the rarer cases.
fn certificate_failure(why: &rustls::CertificateError) -> String {
    use rustls::CertificateError as Why;
    match why {
        Why::NotValidForNameContext {
            expected,
            presented,
        } => {
            let presented = if presented.is_empty() {
                "no name in its subjectAltName".to_owned()
            } else {
                let names: Vec<&str> = presented.iter().map(|n| plain_name(n)).collect();
                names.join(", ")
            };
            format!(
                "the node's certificate is for {presented}, not for {}: connect by a name \
                 it lists, or give the node a certificate with that name in its subjectAltName",
                expected.to_str()
            )
        }
        Why::NotValidForName => {
            "the node's certificate is not for the name this client connected by".into()
        }
        Why::UnknownIssuer => {
            "the node's certificate does not verify: it is not signed by the CA given to the \
             client (--tls-ca)"
                .into()
        }
        other => format!("the node's certificate does not verify: {other}"),
    }
}

/// A certificate name as written: rustls hands them over as webpki's
/// debug form, `DnsName("node-1")` or `IpAddress(10.0.0.1)`.
fn plain_name(presented: &str) -> &str {
    let unwrap = |prefix: &str, suffix: &str| {
        presented
            .strip_prefix(prefix)
            .and_then(|rest| rest.strip_suffix(suffix))
    };
    unwrap("DnsName(\"", "\")")
        .or_else(|| unwrap("IpAddress(", ")"))
        .unwrap_or(presented)
}

fn describe(error: &io::Error) -> String {
    tls_failure(error).unwrap_or_else(|| match error.kind() {
        io::ErrorKind::UnexpectedEof | io::ErrorKind::ConnectionReset => {
            "the node closed the connection during the TLS handshake".into()
        }
        _ => format!("TLS handshake failed: {error}"),
    })
}

/// Whether an `E ? ?` line says the node wants TLS (a plaintext client of
/// a TLS node reads it before the node closes).
pub(crate) fn is_tls_required(reason: &str) -> bool {
    reason.starts_with("TLS required")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_name_is_the_host_part() {
        let name = |addr| server_name(addr).map(|n| n.to_str().into_owned());
        assert_eq!(name("127.0.0.1:7411"), Ok("127.0.0.1".into()));
        assert_eq!(name("node-1.example:7411"), Ok("node-1.example".into()));
        assert_eq!(name("[::1]:7411"), Ok("::1".into()));
        assert!(name("bad host:1").is_err());
    }

    fn words_for(why: rustls::CertificateError) -> String {
        let error = io::Error::other(rustls::Error::InvalidCertificate(why));
        tls_failure(&error).unwrap_or_default()
    }

    #[test]
    fn a_name_mismatch_is_one_sentence_naming_both_names() {
        let words = words_for(rustls::CertificateError::NotValidForNameContext {
            expected: ServerName::try_from("10.0.0.7").expect("an IP address"),
            presented: vec!["IpAddress(127.0.0.1)".into(), "DnsName(\"baton-1\")".into()],
        });
        assert!(words.contains("10.0.0.7"), "{words}");
        assert!(
            words.contains("127.0.0.1") && words.contains("baton-1"),
            "{words}"
        );
        assert!(
            !words.contains("NotValidForNameContext") && !words.contains('{'),
            "{words}"
        );
        let none = words_for(rustls::CertificateError::NotValidForNameContext {
            expected: ServerName::try_from("node-1.example").expect("a DNS name"),
            presented: Vec::new(),
        });
        assert!(
            none.contains("no name") && none.contains("node-1.example"),
            "{none}"
        );
        let issuer = words_for(rustls::CertificateError::UnknownIssuer);
        assert!(issuer.contains("not signed by the CA"), "{issuer}");
    }

    #[test]
    fn bad_pem_is_a_setup_error() {
        let error = TlsConfig::from_ca_pem(b"not pem")
            .err()
            .map(|e| e.to_string());
        assert!(error.is_some_and(|e| e.contains("no certificate")));
        let missing = TlsConfig::from_ca_file("/nonexistent/ca.pem")
            .err()
            .map(|e| e.to_string());
        assert!(missing.is_some_and(|e| e.contains("/nonexistent/ca.pem")));
    }
}
