//! `batond`'s TLS and timeout flags, and the SIGHUP that reloads the TLS
//! certificate, key and client CA.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use baton_server::{ServerTls, TlsPaths};

/// TLS on the client port, and the connection timeouts.
#[derive(Debug, clap::Args)]
pub struct TlsFlags {
    /// Serve clients over TLS only, with this certificate chain (PEM, leaf
    /// first). Needs --tls-key. SIGHUP reloads it.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// With TLS: clients must present a certificate signed by this CA (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_client_ca: Option<PathBuf>,
    /// Close a connection whose request line has been unfinished this long
    /// (its first line: since it connected); 0 never does.
    #[arg(long = "line-timeout", value_name = "DURATION", default_value = "10", value_parser = crate::parse_seconds)]
    line_timeout_ms: u64,
    /// Close a connection with nothing pending (no queued acquire, no
    /// answer due) that sent nothing this long. Off by default.
    #[arg(long = "idle-timeout", value_name = "DURATION", value_parser = crate::parse_seconds)]
    idle_timeout_ms: Option<u64>,
}

impl TlsFlags {
    /// The node's TLS, loaded (an error names the file), if asked for.
    pub fn load(&self) -> Result<Option<Arc<ServerTls>>, String> {
        let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) else {
            return Ok(None);
        };
        let paths = TlsPaths {
            cert: cert.clone(),
            key: key.clone(),
            client_ca: self.tls_client_ca.clone(),
        };
        ServerTls::load(paths)
            .map(|tls| Some(Arc::new(tls)))
            .map_err(|e| format!("TLS: {e}"))
    }

    pub fn line_timeout(&self) -> Option<Duration> {
        (self.line_timeout_ms > 0).then(|| Duration::from_millis(self.line_timeout_ms))
    }

    /// `None` when off; 0 is refused by [`TlsFlags::check`].
    pub fn idle_timeout(&self) -> Option<Duration> {
        self.idle_timeout_ms.map(Duration::from_millis)
    }

    pub fn check(&self) -> Result<(), String> {
        if self.idle_timeout_ms == Some(0) {
            return Err(
                "--idle-timeout must be above 0 (leave it out to keep idle connections)".into(),
            );
        }
        Ok(())
    }
}
