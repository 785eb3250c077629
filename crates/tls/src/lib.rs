//! The TLS material both ends of the client port read, in one place: the
//! `ring` crypto provider (built once per process) and the protocol
//! versions (TLS 1.3 and 1.2), and certificates and private keys parsed
//! from PEM. rustls, no OpenSSL. The node (`baton_server::tls`) reads
//! files and names them in its errors; the client (`baton_client`) takes
//! files or PEM text.

use std::sync::{Arc, OnceLock};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// The protocol versions both ends speak, newest first.
pub const VERSIONS: &[&rustls::SupportedProtocolVersion] =
    &[&rustls::version::TLS13, &rustls::version::TLS12];

/// The `ring` provider every configuration is built with.
pub fn provider() -> Arc<CryptoProvider> {
    static PROVIDER: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    PROVIDER
        .get_or_init(|| Arc::new(rustls::crypto::ring::default_provider()))
        .clone()
}

/// Why PEM text gave nothing usable.
#[derive(Debug, thiserror::Error)]
pub enum PemError {
    /// Not PEM, or a section that does not decode.
    #[error(transparent)]
    Invalid(pem::Error),
    /// PEM, with no item of the kind asked for.
    #[error("no {0} in it")]
    Empty(&'static str),
}

/// Every certificate of PEM text, in order; none at all is an error.
pub fn certs(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, PemError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(PemError::Invalid)?;
    if certs.is_empty() {
        return Err(PemError::Empty("certificate"));
    }
    Ok(certs)
}

/// The private key of PEM text (PKCS#8, PKCS#1 or SEC1).
pub fn key(pem: &[u8]) -> Result<PrivateKeyDer<'static>, PemError> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|e| match e {
        pem::Error::NoItemsFound => PemError::Empty("private key"),
        other => PemError::Invalid(other),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_without_pem_items_is_named_empty_and_broken_pem_invalid() {
        assert!(matches!(
            certs(b"not pem"),
            Err(PemError::Empty("certificate"))
        ));
        assert!(matches!(key(b""), Err(PemError::Empty("private key"))));
        let broken = b"-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----\n";
        assert!(matches!(certs(broken), Err(PemError::Invalid(_))));
    }

    #[test]
    fn the_provider_is_built_once() {
        assert!(Arc::ptr_eq(&provider(), &provider()));
    }
}
