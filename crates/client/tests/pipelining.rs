//! Many concurrent tasks sharing one client: every request is pipelined on
//! the same two connections, and exclusion still holds per key.

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test

mod common;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use baton_tests::Batond;
use common::{client, secs};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_concurrent_tasks_on_one_client() {
    let node = Batond::start(&[]);
    let client = client(&[node.addr()]).await;
    let holding: Arc<Mutex<HashSet<String>>> = Arc::default();
    let tokens: Arc<Mutex<Vec<u64>>> = Arc::default();
    let mut tasks = Vec::new();
    for i in 0..1000 {
        let (client, holding, tokens) = (client.clone(), holding.clone(), tokens.clone());
        tasks.push(tokio::spawn(async move {
            // 50 keys, 20 contenders each: most acquires queue on the node
            // while the rest of the pipeline keeps flowing.
            let key = format!("pipe/{}", i % 50);
            let guard = client.acquire(&key, secs(60), secs(30)).await.unwrap();
            assert!(
                holding.lock().unwrap().insert(key.clone()),
                "two holders of {key} at once"
            );
            tokens.lock().unwrap().push(guard.token());
            tokio::task::yield_now().await;
            holding.lock().unwrap().remove(&key);
            guard.release().await.unwrap();
        }));
    }
    let all = futures_util::future::join_all(tasks);
    for done in tokio::time::timeout(secs(60), all).await.unwrap() {
        done.unwrap();
    }
    let tokens = tokens.lock().unwrap();
    assert_eq!(tokens.len(), 1000);
    assert_eq!(
        tokens.iter().collect::<HashSet<_>>().len(),
        1000,
        "every grant has its own token"
    );
}

#[tokio::test]
async fn responses_out_of_order_reach_their_callers() {
    let node = Batond::start(&[]);
    let client = client(&[node.addr()]).await;
    let held = client.acquire("ooo/busy", secs(5), secs(30)).await.unwrap();
    // This acquire waits on the node; the ones after it must not wait for it.
    let waiting = {
        let client = client.clone();
        tokio::spawn(async move { client.acquire("ooo/busy", secs(20), secs(30)).await })
    };
    for i in 0..20 {
        let guard = tokio::time::timeout(
            secs(5),
            client.acquire(format!("ooo/{i}"), secs(5), secs(30)),
        )
        .await
        .unwrap()
        .unwrap();
        guard.release().await.unwrap();
    }
    assert!(!waiting.is_finished());
    let first = held.token();
    held.release().await.unwrap();
    let next = tokio::time::timeout(secs(10), waiting)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(next.token() > first);
}
