//! Black-box load tests: bursts of pipelined requests in single writes, many
//! connections at once, and many clients contending for one key.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use baton_tests::{answers, grant_token, status_u64, Batond, LineClient};

/// Reads `n` answers and counts them by the (op, key) they answer.
async fn collect(c: &mut LineClient, n: usize) -> (HashMap<(String, String), usize>, Vec<String>) {
    let mut by_request = HashMap::new();
    let mut lines = Vec::with_capacity(n);
    for _ in 0..n {
        let line = c.recv().await;
        *by_request.entry(answers(&line)).or_insert(0) += 1;
        lines.push(line);
    }
    (by_request, lines)
}

fn pair(op: &str, key: &str) -> (String, String) {
    (op.to_owned(), key.to_owned())
}

#[tokio::test]
async fn a_burst_of_pipelined_requests_in_one_write_is_fully_answered() {
    let node = Batond::start(&[]);
    let mut c = node.connect().await;
    c.set_timeout(Duration::from_secs(15));
    let (grants, statuses, stale, bad) = (600, 150, 100, 150);
    let mut burst = String::new();
    for i in 0..grants {
        burst.push_str(&format!("A burst/{i} 0 60\n"));
        if i < statuses {
            burst.push_str("S\n");
        }
        if i < stale {
            burst.push_str(&format!("R stale/{i} 7\n"));
        }
        if i < bad {
            burst.push_str(&format!("A bad/{i} 0 0\n"));
        }
    }
    c.send_raw(burst.as_bytes()).await;
    let total = grants + statuses + stale + bad;
    let (by_request, lines) = collect(&mut c, total).await;
    c.expect_silence(Duration::from_millis(200)).await;

    let mut tokens = HashMap::new();
    for line in &lines {
        if let Some(key) = line.strip_prefix("A ").and_then(|r| r.split(' ').next()) {
            tokens.insert(key.to_owned(), grant_token(line, key));
        } else if line.starts_with("R ") || line.starts_with("T ") {
            panic!("unexpected answer in the burst: {line:?}");
        } else if line.starts_with("N ") {
            assert!(line.starts_with("N R stale/"), "{line:?}");
        } else if line.starts_with("E ") {
            assert!(line.starts_with("E A bad/"), "{line:?}");
        }
    }
    for i in 0..grants {
        assert_eq!(by_request.get(&pair("A", &format!("burst/{i}"))), Some(&1));
    }
    for i in 0..stale {
        assert_eq!(by_request.get(&pair("R", &format!("stale/{i}"))), Some(&1));
    }
    for i in 0..bad {
        assert_eq!(by_request.get(&pair("A", &format!("bad/{i}"))), Some(&1));
    }
    assert_eq!(by_request.get(&pair("S", "")), Some(&statuses));
    let mut distinct: Vec<u64> = tokens.values().copied().collect();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), grants, "tokens must be unique");

    // Second burst: release everything in one write.
    let mut burst = String::new();
    for (key, t) in &tokens {
        burst.push_str(&format!("R {key} {t}\n"));
    }
    c.send_raw(burst.as_bytes()).await;
    let (by_request, _) = collect(&mut c, grants).await;
    for key in tokens.keys() {
        assert_eq!(
            by_request.get(&pair("R", key)),
            Some(&1),
            "release of {key}"
        );
    }
    let s = c.status().await;
    assert_eq!(status_u64(&s, "locks"), 0, "{s:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_connections_bursting_at_once_get_unique_tokens() {
    const CONNS: usize = 16;
    const PER: usize = 200;
    let node = Batond::start(&[]);
    let addr = node.addr();
    let mut tasks = Vec::new();
    for conn in 0..CONNS {
        tasks.push(tokio::spawn(async move {
            let mut c = LineClient::connect(addr).await;
            c.set_timeout(Duration::from_secs(20));
            let mut burst = String::new();
            for i in 0..PER {
                burst.push_str(&format!("A c{conn}/{i} 0 60\n"));
            }
            c.send_raw(burst.as_bytes()).await;
            let mut tokens = Vec::with_capacity(PER);
            for _ in 0..PER {
                let line = c.recv().await;
                let key = line.split(' ').nth(1).unwrap_or_default().to_owned();
                assert!(key.starts_with(&format!("c{conn}/")), "{line:?}");
                tokens.push(grant_token(&line, &key));
            }
            tokens
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        match task.await {
            Ok(tokens) => all.extend(tokens),
            Err(e) => panic!("a burst task failed: {e}"),
        }
    }
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), CONNS * PER, "every grant needs its own token");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contending_clients_never_overlap_and_tokens_increase() {
    const CLIENTS: usize = 32;
    const ROUNDS: usize = 3;
    let node = Batond::start(&[]);
    let addr = node.addr();
    // (token, entered, left) of every holding, from the holders' own clocks.
    let log: Arc<Mutex<Vec<(u64, Instant, Instant)>>> = Arc::default();
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        let log = Arc::clone(&log);
        tasks.push(tokio::spawn(async move {
            let mut c = LineClient::connect(addr).await;
            c.set_timeout(Duration::from_secs(30));
            for _ in 0..ROUNDS {
                let t = grant_token(&c.request("A hot 0 30").await, "hot");
                let entered = Instant::now();
                tokio::time::sleep(Duration::from_millis(2)).await;
                let left = Instant::now();
                if let Ok(mut log) = log.lock() {
                    log.push((t, entered, left));
                }
                assert_eq!(c.request(&format!("R hot {t}")).await, "R hot");
            }
        }));
    }
    let all = async {
        for task in tasks {
            if let Err(e) = task.await {
                panic!("a contending client failed: {e}");
            }
        }
    };
    if tokio::time::timeout(Duration::from_secs(40), all)
        .await
        .is_err()
    {
        panic!("{CLIENTS} clients x {ROUNDS} rounds did not finish within 40 s");
    }
    let mut log = match log.lock() {
        Ok(log) => log.clone(),
        Err(_) => panic!("a client panicked while holding the log"),
    };
    assert_eq!(log.len(), CLIENTS * ROUNDS);
    log.sort_by_key(|(_, entered, _)| *entered);
    for pair in log.windows(2) {
        let (t1, _, left1) = pair[0];
        let (t2, entered2, _) = pair[1];
        assert!(
            t2 > t1,
            "holder entering later has token {t2}, not above {t1}"
        );
        assert!(
            left1 <= entered2,
            "holders {t1} and {t2} overlapped by {:?}",
            left1 - entered2
        );
    }
}
