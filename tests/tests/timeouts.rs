//! Line and idle timeouts, and the slowloris, black-box with
//! real `batond` processes: a connection dribbling one byte a second is
//! closed after `--line-timeout`, so is a silent one; complete lines stop
//! the clock; `--idle-timeout` closes connections with nothing pending; and
//! slow connections filling `--max-connections` cannot keep a real client
//! out (a newcomer evicts the oldest unfinished line).

use std::time::{Duration, Instant};

use baton_tests::{grant_token, Batond};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Reads until EOF (bounded by `within`); what was read, and when EOF came.
async fn read_to_eof(stream: &mut TcpStream, within: Duration) -> (String, Instant) {
    let mut all = Vec::new();
    let read = tokio::time::timeout(within, stream.read_to_end(&mut all)).await;
    assert!(
        read.is_ok(),
        "still open after {within:?}: {:?}",
        String::from_utf8_lossy(&all)
    );
    (String::from_utf8_lossy(&all).into_owned(), Instant::now())
}

async fn connect(node: &Batond) -> TcpStream {
    TcpStream::connect(node.addr()).await.expect("connect")
}

#[tokio::test]
async fn a_line_sent_one_byte_a_second_is_closed_after_the_line_timeout() {
    let node = Batond::start(&["--line-timeout", "2"]);
    let mut stream = connect(&node).await;
    let started = Instant::now();
    let mut read = Vec::new();
    // One byte a second, reading meanwhile, until the node closes (10 s at most).
    for byte in b"A slow/key 1 10".iter().cycle().take(10) {
        stream.write_all(&[*byte]).await.expect("write");
        let mut chunk = [0u8; 256];
        match tokio::time::timeout(Duration::from_secs(1), stream.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => read.extend_from_slice(&chunk[..n]),
            Err(_) => {}
        }
    }
    let (rest, closed) = read_to_eof(&mut stream, Duration::from_secs(3)).await;
    let text = String::from_utf8_lossy(&read).into_owned() + &rest;
    let after = closed - started;
    assert!(after >= Duration::from_secs(2), "closed after {after:?}");
    assert!(after < Duration::from_secs(5), "closed after {after:?}");
    assert_eq!(text, "E ? ? line timeout: closing the connection\n");
}

#[tokio::test]
async fn a_silent_connection_is_closed_after_the_line_timeout() {
    let node = Batond::start(&["--line-timeout", "1.5"]);
    let started = Instant::now();
    let mut stream = connect(&node).await;
    let (text, closed) = read_to_eof(&mut stream, Duration::from_secs(6)).await;
    let after = closed - started;
    assert!(
        after >= Duration::from_millis(1400),
        "closed after {after:?}"
    );
    assert_eq!(text, "E ? ? line timeout: closing the connection\n");
}

#[tokio::test]
async fn complete_lines_stop_the_line_clock() {
    let node = Batond::start(&["--line-timeout", "1"]);
    let mut client = node.connect().await;
    // Four seconds of requests, one every half second: never closed.
    for _ in 0..8 {
        let status = client.request("S").await;
        assert!(status.starts_with("S "), "{status}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // Half a line, finished within the timeout: still served.
    client.send_raw(b"A half").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    client.send_raw(b"/k 0 10\n").await;
    grant_token(&client.recv().await, "half/k");
}

#[tokio::test]
async fn the_idle_timeout_closes_only_connections_with_nothing_pending() {
    let node = Batond::start(&["--idle-timeout", "1"]);
    let mut holder = connect(&node).await;
    holder.write_all(b"A idle/k 0 30\n").await.expect("write");
    // A queued acquire keeps its connection: 3 s of waiting, then `T`.
    let mut waiter = connect(&node).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    waiter.write_all(b"A idle/k 3 30\n").await.expect("write");
    let started = Instant::now();
    let (text, closed) = read_to_eof(&mut holder, Duration::from_secs(5)).await;
    let (grant, farewell) = text.split_once('\n').expect("two lines");
    let token = grant_token(grant, "idle/k");
    assert_eq!(farewell, "E ? ? idle timeout: closing the connection\n");
    assert!(
        closed - started < Duration::from_secs(3),
        "{:?}",
        closed - started
    );
    let (text, closed) = read_to_eof(&mut waiter, Duration::from_secs(8)).await;
    assert_eq!(
        text,
        "T idle/k\nE ? ? idle timeout: closing the connection\n"
    );
    assert!(closed - started >= Duration::from_secs(3));
    // The grant outlives its connection: another releases it.
    let mut other = node.connect().await;
    assert_eq!(
        other.request(&format!("R idle/k {token}")).await,
        "R idle/k"
    );
}

#[tokio::test]
async fn without_an_idle_timeout_an_idle_connection_stays() {
    let node = Batond::start(&[]);
    let mut client = node.connect().await;
    assert!(client.request("S").await.starts_with("S "));
    client.expect_silence(Duration::from_secs(3)).await;
    assert!(client.request("S").await.starts_with("S "));
}

/// Keeps `n` connections to `node` sending one byte a second (never a
/// LF), reconnecting any that is closed, until `until`.
fn slowloris(
    addr: std::net::SocketAddr,
    n: usize,
    until: Instant,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..n)
        .map(|_| {
            tokio::spawn(async move {
                while Instant::now() < until {
                    let Ok(mut stream) = TcpStream::connect(addr).await else {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    };
                    while Instant::now() < until {
                        if stream.write_all(b"A").await.is_err() {
                            break;
                        }
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
            })
        })
        .collect()
}

#[tokio::test]
async fn a_slowloris_cannot_fill_the_connection_limit() {
    // The line timeout alone would take 60 s to free a slot.
    let node = Batond::start(&["--max-connections", "20", "--line-timeout", "60"]);
    // A well-behaved client connected before the attack keeps its place.
    let mut early = node.connect().await;
    assert!(early.request("S").await.starts_with("S "));
    let until = Instant::now() + Duration::from_secs(12);
    let attackers = slowloris(node.addr(), 19, until);
    // Let the attack fill the node and age past the eviction grace.
    tokio::time::sleep(Duration::from_secs(3)).await;
    for round in 0..3 {
        let started = Instant::now();
        let mut client = node.connect().await;
        let status = client.request("S").await;
        assert!(status.starts_with("S "), "round {round}: {status}");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(1500)).await;
    }
    assert!(
        early.request("S").await.starts_with("S "),
        "the early client was evicted"
    );
    for attacker in attackers {
        attacker.abort();
    }
}
