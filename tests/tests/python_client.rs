//! The Python client's suite (clients/python/tests, pytest) against the
//! `batond` this test kit uses and the client-behaviour suite's scripted
//! node, and `mypy --strict` on the package, so that
//! `cargo test --workspace` runs both.
//!
//! The virtual environment is made once with the system's `python3` under
//! the target directory, keyed by the hash of `requirements-test.txt`, and
//! reused by later runs (only the package itself is reinstalled, offline).
//! Its first creation installs `./clients/python` the way a user does, in
//! pip's isolated build, which checks that the package installs from a
//! fresh environment.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use baton_tests::binary::run_or_panic;
use sha2::{Digest, Sha256};

/// The repository root (this crate lives in `tests/`).
fn repo() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

/// The venv for this requirements file, made (and filled) if missing.
fn venv(package: &Path) -> PathBuf {
    let requirements = package.join("requirements-test.txt");
    let text = std::fs::read(&requirements)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", requirements.display()));
    let hash: String = Sha256::digest(&text)
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("python-venv-{hash}"));
    let python = dir.join("bin").join("python");
    let ready = dir.join(".baton-ready");
    if ready.is_file() && python.is_file() {
        run_or_panic(
            Command::new(&python)
                .args(["-m", "pip", "install", "-q", "--no-deps"])
                .args(["--no-build-isolation", "--force-reinstall", "--no-index"])
                .arg(package),
            "reinstalling ./clients/python",
        );
        return python;
    }
    let _ = std::fs::remove_dir_all(&dir);
    let system = std::env::var_os("PYTHON").unwrap_or_else(|| "python3".into());
    run_or_panic(
        Command::new(&system).args(["-m", "venv"]).arg(&dir),
        "python3 -m venv (install python3 and python3-venv)",
    );
    run_or_panic(
        Command::new(&python)
            .args(["-m", "pip", "install", "-q", "-r"])
            .arg(&requirements),
        "pip install -r requirements-test.txt",
    );
    run_or_panic(
        Command::new(&python)
            .args(["-m", "pip", "install", "-q"])
            .arg(package),
        "pip install ./clients/python in a fresh venv",
    );
    std::fs::write(&ready, &text).unwrap_or_else(|e| panic!("cannot mark the venv ready: {e}"));
    python
}

/// The package's directory and its venv's python, the venv made once per
/// run (the tests of this file run in parallel and share it).
fn package_and_python() -> (PathBuf, PathBuf) {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    let package = repo().join("clients").join("python");
    let python = PYTHON.get_or_init(|| venv(&package)).clone();
    (package, python)
}

#[test]
fn python_client_type_checks_with_mypy_strict() {
    let (package, python) = package_and_python();
    let cache = Path::new(env!("CARGO_TARGET_TMPDIR")).join("mypy-cache");
    run_or_panic(
        Command::new(&python)
            .args(["-m", "mypy", "--strict", "--cache-dir"])
            .arg(&cache)
            .arg("src/baton")
            .current_dir(&package),
        "mypy --strict src/baton",
    );
}

#[test]
fn python_client_suite_passes_against_real_nodes() {
    let (package, python) = package_and_python();
    let batond = baton_tests::binary::batond_bin();
    let out = Command::new(&python)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"])
        .current_dir(&package)
        .env("BATOND_BIN", &batond)
        .env("SCRIPT_NODE_BIN", baton_tests::binary::script_node_bin())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .unwrap_or_else(|e| panic!("cannot run pytest: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(
        out.status.success(),
        "the Python client's tests failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}
