//! The user and secret `baton` authenticates with: `--user` (or
//! `BATON_USER`) and the secret from `--secret-file PATH` or, failing
//! that, `BATON_SECRET`. Never from a flag value, which `ps` would show.

use std::io::Read;
use std::path::Path;

/// The longest secret file read; a secret is at most 250 bytes.
const MAX_SECRET_FILE: u64 = 4096;

/// The credentials to use, `None` without a user; the error is a usage
/// error's one line.
pub fn credentials(
    user: Option<&str>,
    secret_file: Option<&Path>,
) -> Result<Option<(String, Vec<u8>)>, String> {
    let secret = match secret_file {
        Some(path) => Some(read_secret_file(path)?),
        None => std::env::var_os("BATON_SECRET").map(|s| s.into_encoded_bytes()),
    };
    match (user, secret) {
        (None, None) => Ok(None),
        (Some(user), Some(secret)) => Ok(Some((user.to_owned(), secret))),
        (Some(_), None) => Err(
            "--user needs its secret in BATON_SECRET or in a file given with --secret-file PATH"
                .into(),
        ),
        (None, Some(_)) => Err(
            "a secret was given (BATON_SECRET or --secret-file) but no user: add --user NAME or set BATON_USER"
                .into(),
        ),
    }
}

/// The file's content without its final line ending.
fn read_secret_file(path: &Path) -> Result<Vec<u8>, String> {
    let fail = |e: std::io::Error| format!("cannot read the secret file {}: {e}", path.display());
    let file = std::fs::File::open(path).map_err(fail)?;
    let mut bytes = Vec::new();
    file.take(MAX_SECRET_FILE + 1)
        .read_to_end(&mut bytes)
        .map_err(fail)?;
    if bytes.len() as u64 > MAX_SECRET_FILE {
        return Err(format!(
            "the secret file {} is larger than {MAX_SECRET_FILE} bytes",
            path.display()
        ));
    }
    if bytes.last() == Some(&b'\n') {
        bytes.pop();
        if bytes.last() == Some(&b'\r') {
            bytes.pop();
        }
    }
    Ok(bytes)
}
