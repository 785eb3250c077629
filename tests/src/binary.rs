//! Finds the `batond` and `baton` executables the tests run.
//!
//! Cargo does not build a foreign package's binaries for our integration tests,
//! so we look beside the test executable (`target/<profile>/deps/..`) unless
//! an environment variable points elsewhere.

use std::path::PathBuf;
use std::process::Command;

/// Path of `batond`: `$BATOND_BIN`, else `target/<profile>/batond`.
pub fn batond_bin() -> PathBuf {
    locate("batond", "BATOND_BIN")
}

/// Path of the `baton` CLI: `$BATON_BIN`, else `target/<profile>/baton`.
pub fn baton_bin() -> PathBuf {
    locate("baton", "BATON_BIN")
}

/// Path of the client-behaviour suite's scripted node:
/// `$SCRIPT_NODE_BIN`, else `target/<profile>/script-node`.
pub fn script_node_bin() -> PathBuf {
    locate("script-node", "SCRIPT_NODE_BIN")
}

fn locate(name: &str, env: &str) -> PathBuf {
    let path = match std::env::var_os(env) {
        Some(p) => PathBuf::from(p),
        None => beside_test_binary(name),
    };
    if !path.is_file() {
        panic!(
            "{name} not found at {}: build it first (`cargo build --bin {name}`) or set {env}",
            path.display()
        );
    }
    path
}

fn beside_test_binary(name: &str) -> PathBuf {
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => panic!("cannot find the test executable to locate {name}: {e}"),
    };
    // Test executables live in target/<profile>/deps; binaries one level up.
    // Unit tests of this crate live in the same place, so one rule serves both.
    let mut dir = exe.parent().map(PathBuf::from).unwrap_or_default();
    if dir.ends_with("deps") {
        dir.pop();
    }
    dir.join(format!("{name}{}", std::env::consts::EXE_SUFFIX))
}

/// Runs `cmd` to its end, panicking with its output when it fails: for the
/// set-up steps a test cannot go on without (a venv, a database's initdb).
pub fn run_or_panic(cmd: &mut Command, what: &str) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run {cmd:?}: {e}"));
    if !out.status.success() {
        panic!(
            "{what} failed ({}):\n--- stdout ---\n{}\n--- stderr ---\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
