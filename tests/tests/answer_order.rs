//! On one connection, requests of one op and key that do not wait (`R`,
//! `K`, `V`, `Q`) are answered in the order they were sent, their `N` and
//! `E` answers included (docs/protocol.md, "Pipelining and matching"): a
//! Raft leader knows at once that a token is not held, but answers that
//! after the earlier request of the key it is still committing.

use baton_tests::raft::{RaftCluster, SERIAL, SETTLE};
use baton_tests::{grant_token, LineClient};

/// The answers of `lines`, sent in one write, grouped by their op and key
/// (the answer's first field and key), each group in the order it came.
async fn answers_by_op(client: &mut LineClient, lines: &[String]) -> Vec<(String, Vec<String>)> {
    let mut burst = lines.join("\n");
    burst.push('\n');
    client.send_raw(burst.as_bytes()).await;
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for _ in lines {
        let answer = client.recv().await;
        // `N R k`, `E R k ...` and `R k` all answer `R k`.
        let fields: Vec<&str> = answer.split(' ').collect();
        let op = match fields[0] {
            "N" | "E" | "M" => fields[1],
            op => op,
        };
        match groups.iter_mut().find(|(o, _)| o == op) {
            Some((_, group)) => group.push(answer),
            None => groups.push((op.to_owned(), vec![answer])),
        }
    }
    groups.sort();
    groups
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raft_leader_answers_one_key_s_releases_renewals_values_and_queries_in_order() {
    let _serial = SERIAL.lock().await;
    let mut cluster = RaftCluster::start(3);
    let (leader, _) = cluster.wait_leader(SETTLE).await;
    let mut client = LineClient::connect(cluster.peers[leader]).await;
    let token = grant_token(&client.request("A k 0 60").await, "k");
    let other = token + 1_000_000;
    let lines = [
        format!("K k {token} 60"),
        format!("K k {other} 60"),
        format!("V k {token} x"),
        format!("V k {other} x"),
        "Q k".to_owned(),
        "Q k x".to_owned(),
        format!("R k {token}"),
        format!("R k {other}"),
        "R k 0".to_owned(),
    ];
    let groups = answers_by_op(&mut client, &lines).await;
    // Each answer starts so, in this order within its op (a `Q` answer
    // goes on with the key's fields).
    let expected = [
        ("K", vec!["K k", "N K k"]),
        ("Q", vec!["Q k token=", "E Q k too many fields"]),
        (
            "R",
            vec![
                "R k",
                "N R k",
                "E R k token must be a decimal integer greater than 0",
            ],
        ),
        ("V", vec!["V k", "N V k"]),
    ];
    let ops: Vec<&str> = groups.iter().map(|(op, _)| op.as_str()).collect();
    assert_eq!(ops, ["K", "Q", "R", "V"], "{groups:?}");
    for ((_, answers), (_, starts)) in groups.iter().zip(expected) {
        let in_order = answers.len() == starts.len()
            && answers.iter().zip(&starts).all(|(a, s)| a.starts_with(s));
        assert!(in_order, "{answers:?}, expected {starts:?}");
    }
}
