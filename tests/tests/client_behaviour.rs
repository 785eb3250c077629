//! The Rust client through the client-behaviour suite: every scenario in
//! tests/client-behaviour/ is played by the scripted node (crates/script-node)
//! while this adapter drives a `baton_client::Client` as the node tells it
//! (the adapter protocol is in tests/client-behaviour/README.md).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use baton_client::{Client, Error, Guard, TlsConfig};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;
use tokio::sync::{mpsc, oneshot};

/// Scenarios played at once: they pace themselves with generous bounds, so
/// a few side by side stay well within them on two cores.
const AT_ONCE: usize = 3;
/// A scenario's whole run, past which the adapter gives up on the node.
const SCENARIO_LIMIT: Duration = Duration::from_secs(180);
/// How often `lost` looks at the guard.
const LOST_POLL: Duration = Duration::from_millis(10);

fn scenario_files() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("client-behaviour");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "scn"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no scenarios in {}", dir.display());
    files
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_client_passes_every_client_behaviour_scenario() {
    let node = baton_tests::binary::script_node_bin();
    let only = std::env::var("BATON_SCENARIO")
        .ok()
        .filter(|o| !o.is_empty());
    let files: Vec<PathBuf> = scenario_files()
        .into_iter()
        .filter(|f| {
            only.as_ref()
                .is_none_or(|o| f.file_stem().is_some_and(|s| s == o.as_str()))
        })
        .collect();
    assert!(!files.is_empty(), "no scenario named {only:?}");
    let gate = Arc::new(tokio::sync::Semaphore::new(AT_ONCE));
    let runs = files.into_iter().map(|file| {
        let node = node.clone();
        let gate = Arc::clone(&gate);
        tokio::spawn(async move {
            let _turn = gate.acquire_owned().await;
            let verdict = play(&node, &file).await;
            (file, verdict)
        })
    });
    let mut failures = Vec::new();
    for run in futures_util::future::join_all(runs).await {
        let (file, (verdict, transcript)) = run.expect("scenario task");
        let name = file.file_stem().map(|s| s.to_string_lossy().into_owned());
        let name = name.unwrap_or_default();
        println!("{name}: {verdict}");
        if verdict != "verdict pass" {
            failures.push(format!("== {name}: {verdict}\n{transcript}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Plays one scenario: the node's verdict line and its transcript.
async fn play(node: &Path, file: &Path) -> (String, String) {
    let mut child = Command::new(node)
        .arg(file)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", node.display()));
    let mut stderr = child.stderr.take().expect("stderr");
    let transcript = tokio::spawn(async move {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text).await;
        text
    });
    let stdout = child.stdout.take().expect("stdout");
    let stdin = child.stdin.take().expect("stdin");
    let verdict = tokio::time::timeout(SCENARIO_LIMIT, drive(stdout, stdin))
        .await
        .unwrap_or_else(|_| "verdict fail the adapter gave up waiting for the node".into());
    let _ = child.kill().await;
    let transcript = transcript.await.unwrap_or_default();
    (verdict, transcript)
}

/// What the actions of one scenario share: the client and the locks.
#[derive(Default)]
struct Adapter {
    client: Mutex<Option<Client>>,
    locks: Mutex<HashMap<String, Guard>>,
}

/// Reads the node's orders and runs them until its verdict.
async fn drive(
    stdout: tokio::process::ChildStdout,
    mut stdin: tokio::process::ChildStdin,
) -> String {
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<String>();
    tokio::spawn(async move {
        while let Some(line) = done_rx.recv().await {
            if stdin
                .write_all(format!("{line}\n").as_bytes())
                .await
                .is_err()
            {
                return;
            }
        }
    });
    let adapter = Arc::new(Adapter::default());
    let mut cancels: HashMap<String, oneshot::Sender<()>> = HashMap::new();
    // Ended with the scenario, so that its client and its polls go too.
    let mut actions = tokio::task::JoinSet::new();
    let mut lines = BufReader::new(stdout).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let (verb, rest) = line.split_once(' ').unwrap_or((&line, ""));
        match verb {
            "verdict" => return line,
            "do" => {
                let (id, action) = rest.split_once(' ').unwrap_or((rest, ""));
                let (cancel, cancelled) = oneshot::channel();
                cancels.insert(id.to_owned(), cancel);
                let (id, action) = (id.to_owned(), action.to_owned());
                let (adapter, done) = (Arc::clone(&adapter), done_tx.clone());
                actions.spawn(async move {
                    let outcome = tokio::select! {
                        outcome = act(&adapter, &id, &action) => outcome,
                        _ = cancelled => "cancelled".to_owned(),
                    };
                    let _ = done.send(format!("done {id} {outcome}"));
                });
            }
            "cancel" => {
                if let Some(cancel) = cancels.remove(rest) {
                    let _ = cancel.send(());
                }
            }
            _ => return format!("verdict fail the node said something unknown: {line}"),
        }
    }
    "verdict fail the node ended without a verdict".into()
}

/// `name=value` arguments of an action.
fn args(text: &str) -> HashMap<&str, &str> {
    text.split(' ').filter_map(|w| w.split_once('=')).collect()
}

fn seconds(text: Option<&&str>) -> Duration {
    Duration::from_secs_f64(text.and_then(|t| t.parse().ok()).unwrap_or(0.0))
}

fn millis(text: &str) -> Duration {
    Duration::from_millis(text.parse().unwrap_or(0))
}

/// Runs one action; its outcome as the adapter protocol words it.
async fn act(adapter: &Adapter, id: &str, action: &str) -> String {
    let (name, rest) = action.split_once(' ').unwrap_or((action, ""));
    let args = args(rest);
    let key = args.get("key").copied().unwrap_or_default();
    let client = || {
        adapter
            .client
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    };
    if name == "connect" {
        return connect(adapter, &args).await;
    }
    let Some(client) = client() else {
        return "unexpected no client: connect first".into();
    };
    let result = match name {
        "acquire" | "try-acquire" => {
            let lease = seconds(args.get("lease"));
            let got = if name == "acquire" {
                client.acquire(key, seconds(args.get("wait")), lease).await
            } else {
                client.try_acquire(key, lease).await
            };
            got.map(|guard| {
                let token = guard.token();
                adapter.guards().insert(id.to_owned(), guard);
                format!("granted {token}")
            })
        }
        "release" => {
            let guard = args.get("lock").and_then(|l| adapter.guards().remove(*l));
            match guard {
                Some(guard) => guard.release().await.map(|()| "ok".into()),
                None => client
                    .release(key, token(&args))
                    .await
                    .map(|()| "ok".into()),
            }
        }
        "renew" => {
            let lease = seconds(args.get("lease"));
            let held = args
                .get("lock")
                .and_then(|l| adapter.guards().get(*l).map(Guard::token));
            let (key, token) = match (held, args.get("lock")) {
                (Some(token), Some(lock)) => (adapter.key_of(lock), token),
                _ => (key.to_owned(), token(&args)),
            };
            client.renew(key, token, lease).await.map(|()| "ok".into())
        }
        "keep-alive" => {
            let lock = args.get("lock").copied().unwrap_or_default();
            match adapter.guards().get_mut(lock) {
                Some(guard) => guard.keep_alive(),
                None => return "unexpected no such lock".into(),
            }
            Ok("ok".into())
        }
        "lost" => return lost(adapter, args.get("lock").copied().unwrap_or_default()).await,
        "query" => client.inspect(key).await.map(|state| match state.grant {
            Some(grant) => format!("held token={} waiters={}", grant.token, state.waiters),
            None => format!("free waiters={}", state.waiters),
        }),
        "status" => Ok(status(&client).await),
        "close" => client.close().await.map(|()| "ok".into()),
        other => return format!("unsupported {other}"),
    };
    result.unwrap_or_else(|e| kind(&e).to_owned())
}

impl Adapter {
    fn guards(&self) -> std::sync::MutexGuard<'_, HashMap<String, Guard>> {
        self.locks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn key_of(&self, lock: &str) -> String {
        self.guards()
            .get(lock)
            .map(|g| String::from_utf8_lossy(g.key().as_bytes()).into_owned())
            .unwrap_or_default()
    }
}

fn token(args: &HashMap<&str, &str>) -> u64 {
    args.get("token").and_then(|t| t.parse().ok()).unwrap_or(0)
}

async fn connect(adapter: &Adapter, args: &HashMap<&str, &str>) -> String {
    let servers = args.get("servers").copied().unwrap_or_default();
    let mut builder = Client::builder().servers(servers.split(','));
    if let (Some(user), Some(secret)) = (args.get("user"), args.get("secret")) {
        builder = builder.credentials(user, secret);
    }
    if let Some(after) = args.get("unresponsive-after") {
        builder = builder.unresponsive_after(millis(after));
    }
    if let Some(ca) = args.get("tls-ca") {
        match TlsConfig::from_ca_file(ca) {
            Ok(tls) => builder = builder.tls(tls),
            Err(e) => return kind(&e).to_owned(),
        }
    }
    match builder.build().await {
        Ok(client) => {
            *adapter
                .client
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = Some(client);
            "connected".into()
        }
        Err(e) => kind(&e).to_owned(),
    }
}

/// Waits until the lock's lost signal fires.
async fn lost(adapter: &Adapter, lock: &str) -> String {
    loop {
        match adapter.guards().get(lock).map(Guard::is_lost) {
            None => return "unexpected no such lock".into(),
            Some(true) => return "lost".into(),
            Some(false) => {}
        }
        tokio::time::sleep(LOST_POLL).await;
    }
}

async fn status(client: &Client) -> String {
    let words: Vec<String> = client
        .status_all()
        .await
        .into_iter()
        .map(|node| match node.status {
            Ok(_) => "up".to_owned(),
            Err(e) => kind(&e).to_owned(),
        })
        .collect();
    format!("status {}", words.join(" "))
}

/// The suite's name for an error (docs/clients.md, "Errors").
fn kind(error: &Error) -> &'static str {
    match error {
        Error::TimedOut { .. } => "timed-out",
        Error::NoServer => "no-server",
        Error::NotServing => "not-serving",
        Error::Unanswered { .. } => "unanswered",
        Error::Rejected { .. } => "rejected",
        Error::LeaseLost { .. } => "lease-lost",
        Error::NotHeld { .. } => "not-held",
        Error::InvalidKey(_)
        | Error::InvalidDuration { .. }
        | Error::InvalidAddress { .. }
        | Error::InvalidCredentials { .. }
        | Error::NoAddress => "invalid",
        Error::Closed => "closed",
        Error::Tls { .. } | Error::TlsConfig { .. } => "tls",
        Error::AuthenticationFailed => "auth-failed",
        Error::AuthenticationNotEnabled => "auth-not-enabled",
        Error::AuthenticationRequired => "auth-required",
        Error::PermissionDenied { .. } => "permission-denied",
        Error::Unexpected(_) => "unexpected",
        _ => "unknown",
    }
}
