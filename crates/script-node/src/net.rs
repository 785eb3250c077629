//! The scripted nodes' sockets: a listener task per node and a task per
//! connection that reads lines and writes what the player says. They decide
//! nothing: every accept, line and close goes to the player as an [`Event`].

use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;

/// A line longer than this (without its LF) is not kept: the client broke
/// the protocol's 1024-byte limit by far.
const MAX_KEPT_LINE: usize = 16 * 1024;
/// What a TLS node says to a client that speaks plain text, as batond does.
const TLS_REQUIRED: &[u8] = b"E ? ? TLS required: this node serves clients over TLS only\n";
/// What a plaintext node says to a client that starts a TLS handshake, as
/// batond does.
const NO_TLS: &[u8] = b"E ? ? this node does not speak TLS: connect without TLS\n";
/// The first byte of a TLS record carrying a handshake.
const TLS_HANDSHAKE: u8 = 0x16;

/// Something that happened on a node's sockets or on the adapter's pipe.
#[derive(Debug)]
pub enum Event {
    Accepted {
        node: usize,
        stream: TcpStream,
    },
    Line {
        conn: usize,
        line: Vec<u8>,
        at: Instant,
    },
    /// The client closed the connection (or it failed).
    Closed {
        conn: usize,
        at: Instant,
    },
    /// The TLS handshake failed or the client spoke plain text to TLS.
    TlsFailed {
        conn: usize,
        why: String,
    },
    Adapter(String),
    AdapterGone,
}

/// What the player asks of one connection.
#[derive(Debug)]
pub enum Command {
    Write(Vec<u8>),
    Close,
}

/// Accepts connections on `listener` for node `node` until aborted.
pub async fn listen(node: usize, listener: TcpListener, events: mpsc::UnboundedSender<Event>) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                if events.send(Event::Accepted { node, stream }).is_err() {
                    return;
                }
            }
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(10)).await,
        }
    }
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// Serves one accepted connection as connection `conn`.
pub async fn serve(
    conn: usize,
    stream: TcpStream,
    tls: Option<TlsAcceptor>,
    events: mpsc::UnboundedSender<Event>,
    commands: mpsc::UnboundedReceiver<Command>,
) {
    let tls_node = tls.is_some();
    let io: Box<dyn Io> = match tls {
        None => Box::new(stream),
        Some(acceptor) => match secure(stream, acceptor).await {
            Ok(secured) => secured,
            Err(why) => {
                let _ = events.send(Event::TlsFailed { conn, why });
                let _ = events.send(Event::Closed {
                    conn,
                    at: Instant::now(),
                });
                return;
            }
        },
    };
    exchange(conn, io, tls_node, &events, commands).await;
    let _ = events.send(Event::Closed {
        conn,
        at: Instant::now(),
    });
}

/// The TLS side of a connection, or why there is none (a plaintext client
/// is told first, as batond tells it).
async fn secure(mut stream: TcpStream, acceptor: TlsAcceptor) -> Result<Box<dyn Io>, String> {
    let mut first = [0u8; 1];
    let peeked = stream.peek(&mut first).await.map_err(|e| e.to_string())?;
    if peeked == 0 {
        return Err("closed before speaking".into());
    }
    if first[0] != TLS_HANDSHAKE {
        let _ = stream.write_all(TLS_REQUIRED).await;
        return Err("the client spoke plain text to a TLS node".into());
    }
    match acceptor.accept(stream).await {
        Ok(secured) => Ok(Box::new(secured)),
        Err(e) => Err(format!("TLS handshake: {e}")),
    }
}

/// Reads lines and writes commands until either side closes. On a
/// plaintext node, a client that starts with a TLS handshake is told, as
/// batond tells it, and the connection closed.
async fn exchange(
    conn: usize,
    io: Box<dyn Io>,
    tls_node: bool,
    events: &mpsc::UnboundedSender<Event>,
    mut commands: mpsc::UnboundedReceiver<Command>,
) {
    let (mut reader, mut writer) = tokio::io::split(io);
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 4096];
    let mut first = !tls_node;
    loop {
        tokio::select! {
            read = reader.read(&mut chunk) => {
                let n = match read {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                if std::mem::take(&mut first) && chunk[0] == TLS_HANDSHAKE {
                    let _ = writer.write_all(NO_TLS).await;
                    let _ = writer.shutdown().await;
                    let why = "the client spoke TLS to a plaintext node".into();
                    let _ = events.send(Event::TlsFailed { conn, why });
                    return;
                }
                buf.extend_from_slice(&chunk[..n]);
                split_lines(conn, &mut buf, events);
            }
            command = commands.recv() => match command {
                Some(Command::Write(bytes)) => {
                    if writer.write_all(&bytes).await.is_err() {
                        return;
                    }
                }
                Some(Command::Close) | None => {
                    let _ = writer.shutdown().await;
                    return;
                }
            },
        }
    }
}

/// Sends every complete line in `buf` as an event; an endless line is sent
/// cut at [`MAX_KEPT_LINE`] bytes, its length still showing it too long.
fn split_lines(conn: usize, buf: &mut Vec<u8>, events: &mpsc::UnboundedSender<Event>) {
    while let Some(end) = buf.iter().position(|&b| b == b'\n') {
        let mut line: Vec<u8> = buf.drain(..=end).collect();
        line.pop();
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        let _ = events.send(Event::Line {
            conn,
            line,
            at: Instant::now(),
        });
    }
    if buf.len() > MAX_KEPT_LINE {
        let line = std::mem::take(buf);
        let _ = events.send(Event::Line {
            conn,
            line,
            at: Instant::now(),
        });
    }
}

/// The TLS material of a run: a CA (its PEM file is `$ca` in scenarios)
/// and a node certificate for 127.0.0.1 it signed.
pub struct TlsMaterial {
    pub acceptor: TlsAcceptor,
    pub ca_file: std::path::PathBuf,
}

impl std::fmt::Debug for TlsMaterial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsMaterial")
            .field("ca_file", &self.ca_file)
            .finish_non_exhaustive()
    }
}

impl TlsMaterial {
    /// Makes the certificates and writes the CA into `dir`.
    pub fn make(dir: &std::path::Path) -> Result<TlsMaterial, String> {
        use rcgen::{
            BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose,
        };
        let fail = |what: &str, e: &dyn std::fmt::Display| format!("{what}: {e}");
        let ca_key = KeyPair::generate().map_err(|e| fail("CA key", &e))?;
        let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(|e| fail("CA", &e))?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        // Distinct names: a leaf named like its issuer looks self-signed.
        ca.distinguished_name
            .push(DnType::CommonName, "baton script-node CA");
        ca.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca.self_signed(&ca_key).map_err(|e| fail("CA cert", &e))?;
        let issuer = Issuer::new(ca, ca_key);
        let key = KeyPair::generate().map_err(|e| fail("node key", &e))?;
        let mut params =
            CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
                .map_err(|e| fail("node", &e))?;
        params
            .distinguished_name
            .push(DnType::CommonName, "baton script-node");
        let cert = params
            .signed_by(&key, &issuer)
            .map_err(|e| fail("node cert", &e))?;
        let ca_file = dir.join("script-node-ca.pem");
        std::fs::write(&ca_file, ca_cert.pem()).map_err(|e| fail("writing the CA", &e))?;
        let der = rustls_pki_types::PrivatePkcs8KeyDer::from(key.serialize_der());
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| fail("TLS versions", &e))?
            .with_no_client_auth()
            .with_single_cert(vec![cert.der().clone()], der.into())
            .map_err(|e| fail("TLS config", &e))?;
        Ok(TlsMaterial {
            acceptor: TlsAcceptor::from(Arc::new(config)),
            ca_file,
        })
    }
}
