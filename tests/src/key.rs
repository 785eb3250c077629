//! The cluster key the harness gives every cluster node it starts.
//!
//! `batond --mode priority|raft` refuses to start without
//! `--cluster-key-file`, and every node of one cluster must hold the same
//! key. So this test process makes one random key, once, and
//! [`add_cluster_key`] writes it (mode 0600) into a node's own directory
//! and appends the flag to the node's arguments, unless the caller gave
//! a key file itself (a test of wrong keys does).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The flag batond reads its key files from.
pub const KEY_FLAG: &str = "--cluster-key-file";

/// The file name the key gets inside a node's directory.
const KEY_FILE_NAME: &str = "cluster.key";

/// This test process's cluster key: 64 hex digits, as `baton keygen`
/// prints, the same for every node the process starts.
pub fn cluster_key_text() -> &'static str {
    static KEY: OnceLock<String> = OnceLock::new();
    KEY.get_or_init(|| random_key_text().unwrap_or_else(|e| panic!("no randomness for a key: {e}")))
}

/// A fresh random key, 64 hex digits (another cluster's key, say).
pub fn random_key_text() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Writes `text` and a newline to `path`, readable by its owner only.
pub fn write_key_file(path: &Path, text: &str) {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let written = options
        .open(path)
        .and_then(|mut file| writeln!(file, "{text}"));
    if let Err(e) = written {
        panic!("cannot write the key file {}: {e}", path.display());
    }
}

/// Whether `args` start a cluster node (`--mode priority` or `--mode
/// raft`, in either spelling) without naming a key file.
pub fn needs_cluster_key(args: &[String]) -> bool {
    let cluster = args.iter().enumerate().any(|(i, arg)| {
        let mode = match arg.strip_prefix("--mode=") {
            Some(mode) => Some(mode),
            None if arg == "--mode" => args.get(i + 1).map(String::as_str),
            None => None,
        };
        matches!(mode, Some("priority" | "raft"))
    });
    let keyed = args
        .iter()
        .any(|arg| arg == KEY_FLAG || arg.starts_with("--cluster-key-file="));
    cluster && !keyed
}

/// If `args` start a cluster node without a key file, writes this
/// process's key into `dir` and appends `--cluster-key-file` for it.
/// Returns the key file's path when it added one.
pub fn add_cluster_key(args: &mut Vec<String>, dir: &Path) -> Option<PathBuf> {
    if !needs_cluster_key(args) {
        return None;
    }
    let path = dir.join(KEY_FILE_NAME);
    write_key_file(&path, cluster_key_text());
    args.push(KEY_FLAG.to_owned());
    args.push(path.display().to_string());
    Some(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|a| (*a).to_owned()).collect()
    }

    #[test]
    fn cluster_modes_need_a_key_unless_one_is_given() {
        assert!(needs_cluster_key(&strings(&["--mode", "priority"])));
        assert!(needs_cluster_key(&strings(&[
            "--peers",
            "a",
            "--mode=raft"
        ])));
        assert!(!needs_cluster_key(&strings(&["--mode", "single"])));
        assert!(!needs_cluster_key(&strings(&["--data-dir", "raft"])));
        assert!(!needs_cluster_key(&strings(&[])));
        assert!(!needs_cluster_key(&strings(&[
            "--mode", "raft", KEY_FLAG, "k"
        ])));
        assert!(!needs_cluster_key(&strings(&[
            "--cluster-key-file=k",
            "--mode",
            "priority"
        ])));
    }

    #[test]
    fn the_key_file_is_private_and_shared_by_the_process() {
        let a = tempfile::tempdir().expect("temp dir");
        let b = tempfile::tempdir().expect("temp dir");
        let mut args = strings(&["--mode", "raft"]);
        let path = add_cluster_key(&mut args, a.path()).expect("added");
        assert_eq!(args[2], KEY_FLAG);
        assert!(
            add_cluster_key(&mut args, a.path()).is_none(),
            "added twice"
        );
        let other =
            add_cluster_key(&mut strings(&["--mode", "priority"]), b.path()).expect("added");
        let text = std::fs::read_to_string(&path).expect("read");
        assert_eq!(text, format!("{}\n", cluster_key_text()));
        assert_eq!(std::fs::read_to_string(other).expect("read"), text);
        assert_eq!(text.trim().len(), 64);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }
}
