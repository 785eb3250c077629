//! The cluster key: the shared secret every node of a cluster holds, read
//! from `--cluster-key-file`, from which the peer handshake's pre-shared
//! key is derived.
//!
//! A node may hold more than one key while the cluster's key is being
//! rotated: it dials with the first and accepts any (see docs/cluster.md).

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

use hkdf::Hkdf;
use sha2::Sha256;

/// Shortest key, in bytes of text after trimming surrounding whitespace.
pub const MIN_KEY_BYTES: usize = 32;
/// Longest key file read: a key is a line of text, not a document.
pub const MAX_KEY_FILE_BYTES: u64 = 4096;
/// Most keys a node accepts at once (two during a rotation is the need).
pub const MAX_KEYS: usize = 4;

/// Labels the derivation, so the same text used as a key elsewhere does
/// not give the same pre-shared key.
const KDF_INFO: &[u8] = b"baton cluster key -> noise psk, v1";

/// Why the cluster key could not be read.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("cannot read the cluster key file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "the cluster key file {path} is larger than {MAX_KEY_FILE_BYTES} bytes; it should hold one key (make one with `baton keygen`)"
    )]
    TooLarge { path: PathBuf },
    #[error(
        "the cluster key in {path} is {len} bytes; it needs at least {MIN_KEY_BYTES} (make one with `baton keygen`)"
    )]
    TooShort { path: PathBuf, len: usize },
    #[error("the cluster key file {path} is not UTF-8 text (make one with `baton keygen`)")]
    NotText { path: PathBuf },
    #[error("at most {MAX_KEYS} cluster key files, got {0}")]
    TooMany(usize),
    #[error("no cluster key file given")]
    None,
}

/// One cluster key, as the 32-byte pre-shared key of the handshake.
#[derive(Clone, PartialEq, Eq)]
pub struct ClusterKey {
    psk: [u8; 32],
}

impl fmt::Debug for ClusterKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the key itself: a debug print ends up in logs.
        f.write_str("ClusterKey(..)")
    }
}

impl ClusterKey {
    /// The key from its text; `None` if shorter than [`MIN_KEY_BYTES`]
    /// once trimmed.
    pub fn from_text(text: &str) -> Option<ClusterKey> {
        let text = text.trim();
        if text.len() < MIN_KEY_BYTES {
            return None;
        }
        let mut psk = [0u8; 32];
        // HKDF-SHA256 turns text of any length into a uniform 32-byte key.
        // Its only failure is asking for more than 255 hash lengths.
        let expanded = Hkdf::<Sha256>::new(None, text.as_bytes()).expand(KDF_INFO, &mut psk);
        debug_assert!(expanded.is_ok());
        Some(ClusterKey { psk })
    }

    /// Reads a key file.
    pub fn load(path: &Path) -> Result<ClusterKey, KeyError> {
        let read_error = |source| KeyError::Read {
            path: path.to_path_buf(),
            source,
        };
        let file = std::fs::File::open(path).map_err(read_error)?;
        baton_server::secret_file::warn_if_readable_by_others("the cluster key file", path, &file);
        let mut bytes = Vec::new();
        file.take(MAX_KEY_FILE_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(read_error)?;
        if bytes.len() as u64 > MAX_KEY_FILE_BYTES {
            return Err(KeyError::TooLarge {
                path: path.to_path_buf(),
            });
        }
        let text = String::from_utf8(bytes).map_err(|_| KeyError::NotText {
            path: path.to_path_buf(),
        })?;
        ClusterKey::from_text(&text).ok_or_else(|| KeyError::TooShort {
            path: path.to_path_buf(),
            len: text.trim().len(),
        })
    }

    pub(crate) fn psk(&self) -> &[u8; 32] {
        &self.psk
    }
}

/// The keys a node holds: it dials with the first and accepts any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterKeys {
    keys: Vec<ClusterKey>,
}

impl ClusterKeys {
    /// Reads the key files, the one to dial with first.
    pub fn load(paths: &[PathBuf]) -> Result<ClusterKeys, KeyError> {
        if paths.len() > MAX_KEYS {
            return Err(KeyError::TooMany(paths.len()));
        }
        let keys = paths
            .iter()
            .map(|path| ClusterKey::load(path))
            .collect::<Result<Vec<_>, _>>()?;
        ClusterKeys::new(keys)
    }

    /// The given keys, the one to dial with first.
    pub fn new(keys: Vec<ClusterKey>) -> Result<ClusterKeys, KeyError> {
        match keys.len() {
            0 => Err(KeyError::None),
            n if n > MAX_KEYS => Err(KeyError::TooMany(n)),
            _ => Ok(ClusterKeys { keys }),
        }
    }

    /// One key from its text, for tests and simulations.
    pub fn from_text(text: &str) -> Option<ClusterKeys> {
        ClusterKey::from_text(text).map(|key| ClusterKeys { keys: vec![key] })
    }

    /// The key this node dials with.
    pub fn primary(&self) -> &ClusterKey {
        // `new` refuses an empty list.
        &self.keys[0]
    }

    /// Every key this node accepts, the primary first.
    pub fn accepted(&self) -> &[ClusterKey] {
        &self.keys
    }
}

/// A fresh random key, as 64 hex digits (what `baton keygen` prints).
pub fn generate_key_text() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_keys_are_refused_after_trimming() {
        assert!(ClusterKey::from_text(&"a".repeat(31)).is_none());
        assert!(ClusterKey::from_text(&format!("  {}\n\n", "a".repeat(31))).is_none());
        assert!(ClusterKey::from_text(&"a".repeat(32)).is_some());
    }

    #[test]
    fn surrounding_whitespace_does_not_change_the_key() {
        let text = "0123456789abcdef0123456789abcdef";
        assert_eq!(
            ClusterKey::from_text(text),
            ClusterKey::from_text(&format!("\n {text}\r\n"))
        );
        assert_ne!(
            ClusterKey::from_text(text),
            ClusterKey::from_text(&format!("{text}0"))
        );
    }

    #[test]
    fn generated_keys_are_64_hex_digits_and_differ() {
        let a = generate_key_text().expect("random");
        let b = generate_key_text().expect("random");
        assert_eq!(a.len(), 64);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
        assert!(ClusterKey::from_text(&a).is_some());
    }

    #[test]
    fn key_files_are_checked() {
        let dir = tempfile::tempdir().expect("tempdir");
        let good = dir.path().join("good");
        std::fs::write(&good, format!("{}\n", "k".repeat(40))).expect("write");
        let short = dir.path().join("short");
        std::fs::write(&short, "tooshort\n").expect("write");
        let big = dir.path().join("big");
        std::fs::write(&big, "k".repeat(5000)).expect("write");
        assert!(ClusterKeys::load(std::slice::from_ref(&good)).is_ok());
        let error = ClusterKeys::load(&[short]).expect_err("short");
        assert!(error.to_string().contains("baton keygen"), "{error}");
        assert!(matches!(
            ClusterKeys::load(&[big]),
            Err(KeyError::TooLarge { .. })
        ));
        let missing = ClusterKeys::load(&[dir.path().join("none")]).expect_err("missing");
        assert!(missing.to_string().contains("none"), "{missing}");
        assert!(matches!(ClusterKeys::load(&[]), Err(KeyError::None)));
        let five = vec![good; 5];
        assert!(matches!(
            ClusterKeys::load(&five),
            Err(KeyError::TooMany(5))
        ));
    }

    #[test]
    fn debug_never_shows_the_key() {
        let keys = ClusterKeys::from_text(&"s".repeat(40)).expect("key");
        assert!(!format!("{keys:?}").contains("sss"));
    }
}
