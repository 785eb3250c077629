//! Reading and checking the `--auth-file`: a TOML list of `[[user]]`
//! tables. Everything is validated before the users replace any others,
//! and every problem is one line that names the user and the field, never
//! a secret.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use baton_core::Key;
use serde::Deserialize;

use super::users::{sha256, Access, User, Users};

/// The largest users file read, in bytes.
pub const MAX_AUTH_FILE_BYTES: u64 = 4 << 20;
/// The most users one file may define.
pub const MAX_USERS: usize = 10_000;
/// The most prefixes one user may have (each request scans them).
pub const MAX_PREFIXES: usize = 256;

/// Why a users file was refused. Its text is one line naming the file.
#[derive(Debug, thiserror::Error)]
#[error("auth file {}: {problem}", path.display())]
pub struct AuthFileError {
    pub path: PathBuf,
    pub problem: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Document {
    #[serde(default)]
    user: Vec<Entry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    name: String,
    secret: Option<String>,
    secret_sha256: Option<String>,
    prefixes: Option<Vec<String>>,
    #[serde(default)]
    admin: bool,
}

/// Reads, parses and checks the users file at `path`.
pub(crate) fn load(path: &Path) -> Result<Users, AuthFileError> {
    let fail = |problem: String| AuthFileError {
        path: path.to_path_buf(),
        problem,
    };
    let file = std::fs::File::open(path).map_err(|e| fail(format!("cannot open: {e}")))?;
    crate::secret_file::warn_if_readable_by_others("the auth file", path, &file);
    let mut bytes = Vec::new();
    file.take(MAX_AUTH_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| fail(format!("cannot read: {e}")))?;
    if bytes.len() as u64 > MAX_AUTH_FILE_BYTES {
        return Err(fail(format!("larger than {MAX_AUTH_FILE_BYTES} bytes")));
    }
    let text = String::from_utf8(bytes).map_err(|_| fail("not UTF-8 text".into()))?;
    parse(&text).map_err(fail)
}

/// Parses and checks the text of a users file; the error is the problem.
pub(crate) fn parse(text: &str) -> Result<Users, String> {
    let document: Document = toml::from_str(text).map_err(|e| toml_problem(text, &e))?;
    if document.user.is_empty() {
        return Err("no [[user]] defined: nobody could use the node".into());
    }
    if document.user.len() > MAX_USERS {
        return Err(format!(
            "{} users, more than the {MAX_USERS} allowed",
            document.user.len()
        ));
    }
    let mut by_name = HashMap::with_capacity(document.user.len());
    for (i, entry) in document.user.into_iter().enumerate() {
        let user =
            check_user(entry).map_err(|problem| format!("[[user]] #{}: {problem}", i + 1))?;
        let name = user.name.clone();
        if by_name.insert(name.clone(), Arc::new(user)).is_some() {
            return Err(format!(
                "[[user]] #{}: user {} is defined twice",
                i + 1,
                String::from_utf8_lossy(name.as_bytes())
            ));
        }
    }
    Ok(Users::new(by_name))
}

/// One line from a TOML error: its message and where it is.
fn toml_problem(text: &str, error: &toml::de::Error) -> String {
    let message = error.message().replace(['\n', '\r'], " ");
    match error.span() {
        Some(span) => {
            let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
            format!("line {line}: {}", message.trim())
        }
        None => message.trim().to_owned(),
    }
}

fn check_user(entry: Entry) -> Result<User, String> {
    let name = Key::new(entry.name.as_bytes()).map_err(|e| {
        format!(
            "name {:?}: {}",
            entry.name,
            e.to_string().replacen("key", "a user name", 1)
        )
    })?;
    let shown = &entry.name;
    let hash = match (entry.secret, entry.secret_sha256) {
        (Some(_), Some(_)) => {
            return Err(format!(
                "user {shown}: give secret or secret_sha256, not both"
            ))
        }
        (None, None) => return Err(format!("user {shown}: needs secret or secret_sha256")),
        (Some(secret), None) => {
            baton_proto::validate_secret(secret.as_bytes())
                .map_err(|e| format!("user {shown}: {e}"))?;
            sha256(secret.as_bytes())
        }
        (None, Some(hex)) => parse_sha256(&hex).ok_or_else(|| {
            format!("user {shown}: secret_sha256 must be exactly 64 hexadecimal digits")
        })?,
    };
    let access = match (entry.admin, entry.prefixes) {
        // An empty list restricts nothing, and configuration tools write
        // one for every user: beside admin = true it means admin.
        (true, Some(prefixes)) if prefixes.is_empty() => Access::Admin,
        (true, Some(_)) => {
            return Err(format!(
                "user {shown}: admin = true already permits every key; remove prefixes or make it empty"
            ))
        }
        (true, None) => Access::Admin,
        (false, None) => {
            return Err(format!(
                "user {shown}: needs prefixes = [...] (the keys it may use) or admin = true"
            ))
        }
        (false, Some(prefixes)) => Access::Prefixes(check_prefixes(shown, prefixes)?),
    };
    Ok(User { name, hash, access })
}

fn check_prefixes(shown: &str, prefixes: Vec<String>) -> Result<Box<[Box<[u8]>]>, String> {
    if prefixes.is_empty() {
        return Err(format!(
            "user {shown}: prefixes is empty, so it could use no key (admin = true permits every key)"
        ));
    }
    if prefixes.len() > MAX_PREFIXES {
        return Err(format!(
            "user {shown}: {} prefixes, more than the {MAX_PREFIXES} allowed",
            prefixes.len()
        ));
    }
    let mut checked = Vec::with_capacity(prefixes.len());
    for prefix in prefixes {
        // A prefix is the start of a key, so it follows the key rules;
        // the empty one would permit every key and is refused.
        baton_core::validate_key(prefix.as_bytes()).map_err(|e| {
            format!(
                "user {shown}: prefix {prefix:?}: {}",
                e.to_string().replacen("key", "a prefix", 1)
            )
        })?;
        checked.push(prefix.into_bytes().into_boxed_slice());
    }
    Ok(checked.into_boxed_slice())
}

/// 64 hex digits, either case, to 32 bytes.
fn parse_sha256(hex: &str) -> Option<[u8; 32]> {
    let digits = hex.as_bytes();
    if digits.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (byte, pair) in out.iter_mut().zip(digits.chunks_exact(2)) {
        let high = char::from(pair[0]).to_digit(16)?;
        let low = char::from(pair[1]).to_digit(16)?;
        *byte = u8::try_from(high * 16 + low).ok()?;
    }
    Some(out)
}
