//! What the TLS tests share: certificates made in the test with rcgen (two
//! CAs, node and client certificates for each), a raw TLS line client, and
//! the Rust client and the CLI set up for TLS.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Arc;
use std::time::Duration;

use baton_client::{Client, TlsConfig};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tempfile::TempDir;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

/// One CA with a node certificate (for 127.0.0.1 and localhost) and a
/// client certificate, as PEM files in `dir`, named `<name>-...pem`.
pub struct Authority {
    pub ca: PathBuf,
    pub node_cert: PathBuf,
    pub node_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

/// Two unrelated CAs in one temporary directory.
pub struct Pki {
    pub dir: TempDir,
    pub main: Authority,
    pub other: Authority,
}

impl Pki {
    pub fn new() -> Pki {
        let dir = tempfile::tempdir().expect("temp dir");
        let main = Authority::make(dir.path(), "main");
        let other = Authority::make(dir.path(), "other");
        Pki { dir, main, other }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

impl Authority {
    fn make(dir: &Path, name: &str) -> Authority {
        let ca_key = KeyPair::generate().expect("CA key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, format!("baton test CA {name}"));
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = params.self_signed(&ca_key).expect("CA cert");
        let issuer = Issuer::new(params, ca_key);
        let leaf = |sans: Vec<String>, usage: ExtendedKeyUsagePurpose, cn: &str| {
            let key = KeyPair::generate().expect("leaf key");
            let mut params = CertificateParams::new(sans).expect("leaf params");
            params.distinguished_name.push(DnType::CommonName, cn);
            params.extended_key_usages = vec![usage];
            let cert = params.signed_by(&key, &issuer).expect("leaf cert");
            (cert.pem(), key.serialize_pem())
        };
        let (node_pem, node_key) = leaf(
            vec!["127.0.0.1".into(), "localhost".into()],
            ExtendedKeyUsagePurpose::ServerAuth,
            "baton node",
        );
        let (client_pem, client_key) = leaf(
            Vec::new(),
            ExtendedKeyUsagePurpose::ClientAuth,
            "baton client",
        );
        let file = |what: &str| dir.join(format!("{name}-{what}.pem"));
        let authority = Authority {
            ca: file("ca"),
            node_cert: file("node"),
            node_key: file("node-key"),
            client_cert: file("client"),
            client_key: file("client-key"),
        };
        write(&authority.ca, &ca_cert.pem());
        write(&authority.node_cert, &node_pem);
        write(&authority.node_key, &node_key);
        write(&authority.client_cert, &client_pem);
        write(&authority.client_key, &client_key);
        authority
    }

    /// `batond` flags serving this authority's node certificate.
    pub fn node_flags(&self) -> Vec<String> {
        vec![
            "--tls-cert".into(),
            self.node_cert.display().to_string(),
            "--tls-key".into(),
            self.node_key.display().to_string(),
        ]
    }

    /// A client configuration trusting this CA.
    pub fn client_tls(&self) -> TlsConfig {
        TlsConfig::from_ca_file(&self.ca).expect("CA file")
    }

    /// As [`Authority::client_tls`], showing `identity`'s client certificate.
    pub fn client_tls_as(&self, identity: &Authority) -> TlsConfig {
        self.client_tls()
            .identity_files(&identity.client_cert, &identity.client_key)
            .expect("client certificate")
    }
}

/// Flags as `&str`, for `Batond::start`.
pub fn strs(flags: &[String]) -> Vec<&str> {
    flags.iter().map(String::as_str).collect()
}

/// A Rust client of `addr`, built with `tls` (or plain with `None`), with
/// short timeouts so a failure shows quickly.
pub async fn client(
    addr: SocketAddr,
    tls: Option<TlsConfig>,
) -> Result<Client, baton_client::Error> {
    let mut builder = Client::builder()
        .servers([addr.to_string()])
        .connect_timeout(Duration::from_secs(2));
    if let Some(tls) = tls {
        builder = builder.tls(tls);
    }
    builder.build().await
}

/// Runs the CLI with `args` (bounded to 20 s).
pub fn cli(args: &[&str]) -> Output {
    let mut child = std::process::Command::new(baton_tests::baton_bin())
        .args(args)
        .env_remove("BATON_SERVERS")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn baton");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while child.try_wait().expect("poll baton").is_none() {
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child.wait_with_output().expect("baton output")
}

/// A raw TLS connection speaking lines, for exact bytes and pipelining.
pub struct TlsLines {
    stream: BufReader<TlsStream<TcpStream>>,
}

impl TlsLines {
    /// Connects to `addr` trusting `ca`; the handshake's error if it fails.
    pub async fn connect(addr: SocketAddr, ca: &Path) -> std::io::Result<TlsLines> {
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_file_iter(ca).expect("CA pem") {
            roots.add(cert.expect("CA cert")).expect("CA root");
        }
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
        let tcp = TcpStream::connect(addr).await?;
        let name = ServerName::try_from("127.0.0.1").expect("name");
        let connect = tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp);
        let stream = tokio::time::timeout(Duration::from_secs(5), connect)
            .await
            .map_err(|_| std::io::Error::other("TLS handshake timed out"))??;
        Ok(TlsLines {
            stream: BufReader::new(stream),
        })
    }

    pub async fn send_raw(&mut self, bytes: &[u8]) {
        let stream = self.stream.get_mut();
        stream.write_all(bytes).await.expect("TLS write");
        stream.flush().await.expect("TLS flush");
    }

    /// The next line without its LF; `None` at EOF. Panics after 5 s.
    pub async fn recv(&mut self) -> Option<String> {
        let mut line = String::new();
        let read = tokio::time::timeout(Duration::from_secs(5), self.stream.read_line(&mut line))
            .await
            .expect("no TLS line within 5 s");
        match read {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(line.trim_end_matches('\n').to_owned()),
        }
    }
}
