//! `baton keygen`: a fresh cluster key for `batond --cluster-key-file`.
//!
//! The key is 32 bytes from the operating system's random source, printed
//! as 64 hex digits and a newline: text a key file can hold as it is, and
//! the same form batond's own `generate_key_text` gives. Nothing here
//! talks to a node.

use std::io::Write;
use std::process::ExitCode;

use crate::exit::Exit;

/// Bytes of randomness in one key: 256 bits, and 64 hex digits, twice
/// the 32 bytes of text batond asks of a key at least.
const KEY_BYTES: usize = 32;

/// Why no key could be printed.
#[derive(Debug, thiserror::Error)]
pub enum KeygenError {
    #[error("cannot get randomness from the operating system: {0}")]
    Random(getrandom::Error),
    #[error("cannot write the key: {0}")]
    Write(#[from] std::io::Error),
}

/// A fresh key as 64 lowercase hex digits.
pub fn key_text() -> Result<String, KeygenError> {
    let mut bytes = [0u8; KEY_BYTES];
    getrandom::fill(&mut bytes).map_err(KeygenError::Random)?;
    let text: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    debug_assert_eq!(text.len(), 2 * KEY_BYTES);
    Ok(text)
}

/// Prints a fresh key and a newline on stdout.
pub fn keygen() -> ExitCode {
    let printed = key_text().and_then(|text| {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{text}")?;
        out.flush()?;
        Ok(())
    });
    match printed {
        Ok(()) => Exit::Ok.code(),
        Err(err) => {
            eprintln!("baton: keygen: {err}");
            Exit::Failure.code()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_64_lowercase_hex_digits() {
        let key = key_text().expect("random");
        assert_eq!(key.len(), 64, "{key}");
        assert!(
            key.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')),
            "{key}"
        );
    }

    #[test]
    fn keys_differ() {
        let keys: std::collections::HashSet<String> =
            (0..16).map(|_| key_text().expect("random")).collect();
        assert_eq!(keys.len(), 16);
    }
}
