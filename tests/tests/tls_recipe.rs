//! TLS made the way the operators' guide says, black-box: certificates
//! from the openssl recipe (deploy/tls-certs.sh) served by real `batond`
//! processes to the CLI and the Rust client, and the one-sentence errors a
//! certificate that does not fit (other names, an X.509 v1 client
//! certificate) gets. Certificates made in the test are in tls.rs.

mod tls_support;

use baton_tests::Batond;
use std::time::Duration;

use tls_support::{cli, client};

/// Runs `deploy/tls-certs.sh DIR NAMES...` as the README shows it; the
/// directory it wrote.
fn openssl_recipe(parent: &std::path::Path, dir: &str, names: &[&str]) -> std::path::PathBuf {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/tls-certs.sh");
    let out = std::process::Command::new("sh")
        .arg(script)
        .arg(parent.join(dir))
        .args(names)
        .output()
        .expect("run deploy/tls-certs.sh (needs sh and openssl)");
    assert!(
        out.status.success(),
        "deploy/tls-certs.sh failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    parent.join(dir)
}

fn path_text(dir: &std::path::Path, file: &str) -> String {
    dir.join(file).display().to_string()
}

/// A node serving the recipe's node certificate from `pki`, with `extra`.
fn recipe_node(pki: &std::path::Path, extra: &[&str]) -> Batond {
    let (cert, key) = (path_text(pki, "node.pem"), path_text(pki, "node.key"));
    let mut flags = vec!["--tls-cert", &cert, "--tls-key", &key];
    flags.extend_from_slice(extra);
    Batond::start(&flags)
}

#[tokio::test]
async fn the_openssl_recipe_serves_batond_the_cli_and_the_rust_client() {
    let parent = tempfile::tempdir().expect("temp dir");
    let pki = openssl_recipe(parent.path(), "pki", &["127.0.0.1", "localhost"]);
    let file = |name: &str| path_text(&pki, name);
    for key in ["ca.key", "node.key", "client.key"] {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(pki.join(key))
            .expect(key)
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0, "{key} is readable by others: {mode:o}");
    }
    let http = baton_tests::free_addr().to_string();
    let node = recipe_node(
        &pki,
        &["--tls-client-ca", &file("ca.pem"), "--http-listen", &http],
    );
    let addr = node.addr().to_string();
    let out = cli(&[
        "--servers",
        &addr,
        "--tls-ca",
        &file("ca.pem"),
        "--tls-cert",
        &file("client.pem"),
        "--tls-key",
        &file("client.key"),
        "acquire",
        "recipe/cli",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tls = baton_client::TlsConfig::from_ca_file(pki.join("ca.pem"))
        .and_then(|tls| tls.identity_files(pki.join("client.pem"), pki.join("client.key")))
        .expect("the recipe's files load");
    let client = client(node.addr(), Some(tls)).await.expect("TLS client");
    let guard = client
        .acquire(
            "recipe/rust",
            Duration::from_secs(5),
            Duration::from_secs(30),
        )
        .await
        .expect("granted over TLS with a client certificate");
    guard.release().await.expect("released");
    // Without the client certificate the node refuses, and says so.
    let out = cli(&["--servers", &addr, "--tls-ca", &file("ca.pem"), "status"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("requires a client certificate"), "{err}");

    // The HTTP endpoint speaks HTTPS with the same files, as the README's
    // curl asks it: with the client certificate, and only with it.
    let with_cert = https_health(&pki, &http, true);
    assert!(with_cert.contains("\"status\":\"serving\""), "{with_cert}");
    let without = https_health(&pki, &http, false);
    assert!(!without.contains("\"status\""), "{without}");
}

/// `GET /health` over TLS through `openssl s_client` trusting the recipe's
/// CA, with the recipe's client certificate or without one: what came back.
fn https_health(pki: &std::path::Path, http: &str, client_cert: bool) -> String {
    use std::io::Write;
    let mut command = std::process::Command::new("openssl");
    command
        .args(["s_client", "-quiet", "-connect", http, "-CAfile", "ca.pem"])
        .current_dir(pki)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    if client_cert {
        command.args(["-cert", "client.pem", "-key", "client.key"]);
    }
    let mut child = command.spawn().expect("openssl s_client");
    let request = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    if let Some(mut stdin) = child.stdin.take() {
        // A refused handshake may close the pipe first: what comes back says so.
        let _ = stdin.write_all(request);
    }
    // The node closes after its answer (or the refused handshake), which
    // ends s_client; one that hangs is killed, failing the test's check.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while child.try_wait().expect("s_client's status").is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("s_client's output");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test]
async fn a_certificate_for_other_names_is_one_sentence_naming_both() {
    let parent = tempfile::tempdir().expect("temp dir");
    let pki = openssl_recipe(parent.path(), "pki", &["baton-1.example"]);
    let file = |name: &str| path_text(&pki, name);
    let http = baton_tests::free_addr().to_string();
    let node = recipe_node(&pki, &["--http-listen", &http]);
    let addr = node.addr().to_string();
    let out = cli(&[
        "--servers",
        &addr,
        "--tls-ca",
        &file("ca.pem"),
        "acquire",
        "k",
        "--wait",
        "1",
    ]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("certificate is for baton-1.example, not for 127.0.0.1"),
        "{err}"
    );
    assert!(
        !err.contains("NotValidForName") && !err.contains('{'),
        "{err}"
    );

    // The same sentence from `baton status`, beside a node that refuses
    // connections (no client can be built then: each node is asked on
    // its own for its reason), and from the HTTP endpoint's client.
    let down = baton_tests::free_addr().to_string();
    let servers = format!("{addr},{down}");
    let ca = file("ca.pem");
    for json in [false, true] {
        let mut args = vec!["--servers", &servers, "--tls-ca", &ca, "status"];
        if json {
            args.push("--json");
        }
        let out = cli(&args);
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(out.status.code(), Some(4), "{said}");
        assert!(
            said.contains("certificate is for baton-1.example, not for 127.0.0.1")
                && said.contains(&format!("cannot reach {down}: connection refused")),
            "{said}"
        );
    }
    let out = cli(&[
        "--servers",
        &addr,
        "--tls-ca",
        &ca,
        "locks",
        "--http",
        &http,
    ]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("certificate is for baton-1.example, not for 127.0.0.1") && !err.contains('('),
        "{err}"
    );

    // `baton status` names why a node could not be asked, not only
    // `unreachable`: here a TLS node asked without TLS, beside a plain one.
    let plain = Batond::start(&[]);
    let servers = format!("{},{addr}", plain.addr());
    let out = cli(&["--servers", &servers, "status"]);
    let table = String::from_utf8_lossy(&out.stdout).into_owned();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{table}{err}");
    let row = table
        .lines()
        .find(|l| l.starts_with(&addr))
        .unwrap_or_default();
    assert!(row.split_whitespace().nth(1) == Some("error"), "{table}");
    assert!(
        err.contains(&format!("TLS with {addr}")) && err.contains("TLS only"),
        "{err}"
    );
}

#[test]
fn a_v1_client_certificate_is_named_as_such() {
    let parent = tempfile::tempdir().expect("temp dir");
    let pki = openssl_recipe(parent.path(), "pki", &["127.0.0.1"]);
    // What `openssl x509 -req` makes without -extfile: a v1 certificate.
    let run = |args: &[&str]| {
        let out = std::process::Command::new("openssl")
            .args(args)
            .current_dir(&pki)
            .output()
            .expect("openssl");
        assert!(out.status.success(), "openssl {args:?}: {out:?}");
    };
    run(&[
        "genpkey",
        "-algorithm",
        "EC",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-out",
        "v1.key",
    ]);
    run(&[
        "req", "-new", "-key", "v1.key", "-subj", "/CN=v1", "-out", "v1.csr",
    ]);
    run(&[
        "x509",
        "-req",
        "-in",
        "v1.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-set_serial",
        "7",
        "-days",
        "30",
        "-out",
        "v1.pem",
    ]);
    let refused = baton_client::TlsConfig::from_ca_file(pki.join("ca.pem"))
        .and_then(|tls| tls.identity_files(pki.join("v1.pem"), pki.join("v1.key")))
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        refused.contains("X.509 v1") && refused.contains("only v3"),
        "{refused}"
    );
    assert!(!refused.contains("OtherError"), "{refused}");

    // A client that presents it anyway (openssl's own, Python's ssl): the
    // node's log says why in one sentence, not rustls's debug text.
    let ca = path_text(&pki, "ca.pem");
    let node = recipe_node(&pki, &["--tls-client-ca", &ca]);
    let presented = std::process::Command::new("openssl")
        .args(["s_client", "-connect", &node.addr().to_string()])
        .args(["-cert", "v1.pem", "-key", "v1.key", "-CAfile", "ca.pem"])
        .current_dir(&pki)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("openssl s_client");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let line = loop {
        let log = node.log_tail(1_000);
        if let Some(line) = log
            .lines()
            .find(|l| l.contains("refused a client certificate"))
        {
            break line.to_string();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no refusal logged: {presented:?}\n{log}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(
        line.contains("X.509 v1") && line.contains("only v3"),
        "{line}"
    );
    assert!(!line.contains("UnsupportedCertVersion"), "{line}");
}
