//! The CLI's TLS flags, and the client TLS configuration they make.

use std::path::PathBuf;

use baton_client::{ClientBuilder, Error, TlsConfig};

/// TLS to the nodes (their client port must be TLS too).
#[derive(Debug, clap::Args)]
pub struct TlsFlags {
    /// Speak TLS, trusting the nodes' certificates signed by this CA (PEM).
    /// The name checked is the host part of each address (IPs included).
    #[arg(long, global = true, value_name = "FILE", env = "BATON_TLS_CA")]
    pub tls_ca: Option<PathBuf>,
    /// Client certificate (PEM) for nodes that require one; needs --tls-key and --tls-ca.
    #[arg(long, global = true, value_name = "FILE", env = "BATON_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, global = true, value_name = "FILE", env = "BATON_TLS_KEY")]
    pub tls_key: Option<PathBuf>,
}

impl TlsFlags {
    /// `builder` with TLS when the flags ask for it.
    pub fn apply(&self, builder: ClientBuilder) -> Result<ClientBuilder, Error> {
        Ok(match self.config()? {
            Some(tls) => builder.tls(tls),
            None => builder,
        })
    }

    /// The TLS configuration the flags describe, if they ask for TLS.
    pub fn config(&self) -> Result<Option<TlsConfig>, Error> {
        let Some(ca) = &self.tls_ca else {
            if self.tls_cert.is_some() || self.tls_key.is_some() {
                return Err(Error::TlsConfig {
                    why: "--tls-cert and --tls-key need --tls-ca".into(),
                });
            }
            return Ok(None);
        };
        let mut tls = TlsConfig::from_ca_file(ca)?;
        match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => tls = tls.identity_files(cert, key)?,
            (None, None) => {}
            _ => {
                return Err(Error::TlsConfig {
                    why: "--tls-cert and --tls-key go together".into(),
                })
            }
        }
        Ok(Some(tls))
    }
}
