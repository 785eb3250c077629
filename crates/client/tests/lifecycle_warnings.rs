//! A program that lets its guards outlive its client, or drops a guard
//! where nothing can send its release, keeps those locks held until their
//! leases end: the client says so, once.

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};

use baton_tests::Batond;
use common::{client, secs};
use tracing_subscriber::fmt::MakeWriter;

/// What the client logged, in text.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Captured {
    type Writer = Captured;

    fn make_writer(&'a self) -> Captured {
        self.clone()
    }
}

/// Captures what is logged on this thread until the guard is dropped.
fn capture() -> (Captured, tracing::subscriber::DefaultGuard) {
    let captured = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(captured.clone())
        .with_ansi(false)
        .finish();
    let guard = tracing::subscriber::set_default(subscriber);
    (captured, guard)
}

const OUTLIVED: &str = "the last Client handle was dropped while guards still hold locks";

// A current-thread runtime: the subscriber set here sees every task.
#[tokio::test]
async fn the_last_client_handle_dropped_under_live_guards_warns_once() {
    let node = Batond::start(&[]);
    let (captured, _capturing) = capture();

    let client = client(&[node.addr()]).await;
    let first = client
        .acquire("outlive/a", secs(5), secs(30))
        .await
        .unwrap();
    let second = client
        .acquire("outlive/b", secs(5), secs(30))
        .await
        .unwrap();
    let other = client.clone();
    drop(client);
    assert!(!captured.text().contains(OUTLIVED), "a handle is left");
    drop(other);
    assert_eq!(
        captured.text().matches(OUTLIVED).count(),
        1,
        "{}",
        captured.text()
    );
    // The guards still work: they keep the connections.
    first.release().await.unwrap();
    second.release().await.unwrap();
    assert_eq!(captured.text().matches(OUTLIVED).count(), 1);

    // Nothing held when the last handle goes: no warning.
    let (quiet, _capturing_quiet) = capture();
    let client = common::client(&[node.addr()]).await;
    let guard = client
        .acquire("outlive/c", secs(5), secs(30))
        .await
        .unwrap();
    guard.release().await.unwrap();
    drop(client);
    assert!(!quiet.text().contains(OUTLIVED), "{}", quiet.text());
}
