//! A peer that holds the cluster key and lies: it links to the active of a
//! real priority cluster (or the leader of a Raft one) as one of its nodes,
//! then sends what no sound node sends (terms and tokens near 2^64, tables
//! claiming them, a message length past the frame, bytes that decode to
//! nothing, votes of absurd terms). peer_auth.rs
//! covers the attacker without the key; here the handshake succeeds, and
//! the sanity bounds and the link's framing are all that stand.
//!
//! After each lie the active must still be the active, keep its held lock,
//! and grant a token above every earlier one and far below the end of the
//! token space.

use std::net::SocketAddr;
use std::time::Duration;

use baton_cluster::peer::{self, ClusterKey, PEER_HELLO};
use baton_cluster::priority::{Heartbeat, LinkHello, PeerRole, PriorityMessage, TablePart};
use baton_cluster::raft::net::rpc::{self, RequestBody, RpcRequest, RAFT_HELLO};
use baton_cluster::raft::types::{LogId, Vote};
use baton_server::token_floor;
use baton_tests::cluster::{field, Cluster};
use baton_tests::grant_token;
use baton_tests::raft::RaftCluster;
use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};

/// Longest a node may take to read a frame and answer it (a sign of life
/// or closing the link), on a loaded machine.
const READ_WITHIN: Duration = Duration::from_secs(5);

/// Largest frame the attacker reads back: the node only sends empty ones.
const MAX_FRAME: usize = 64 * 1024;

fn key() -> ClusterKey {
    ClusterKey::from_text(baton_tests::cluster_key_text()).expect("the harness key")
}

/// One frame of a priority link holding `message`: its 4-byte length and
/// its encoding, as nodes write them.
fn frame(message: &PriorityMessage) -> Bytes {
    let body = peer::encode(message).expect("encode");
    let mut framed = u32::try_from(body.len())
        .expect("small")
        .to_be_bytes()
        .to_vec();
    framed.extend_from_slice(&body);
    Bytes::from(framed)
}

/// A table claiming `last_token`, whole in one piece.
fn table(last_token: u64) -> TablePart {
    TablePart {
        table: 1,
        piece: 0,
        last: true,
        last_token,
        locks: Vec::new(),
    }
}

/// Everything the liar sends, each on a link of its own.
fn lies() -> Vec<(&'static str, Bytes)> {
    let huge = [u64::MAX, 1 << 63];
    let mut lies = Vec::new();
    for value in huge {
        let heartbeat = |role| {
            frame(&PriorityMessage::Heartbeat(Heartbeat {
                role,
                term: value,
                seq: value,
                last_token: value,
                following: None,
            }))
        };
        lies.push((
            "an active's heartbeat near 2^64",
            heartbeat(PeerRole::Active),
        ));
        lies.push((
            "a standby's heartbeat near 2^64",
            heartbeat(PeerRole::Standby),
        ));
        lies.push((
            "a table near 2^64",
            frame(&PriorityMessage::SnapshotPart {
                term: value,
                seq: 0,
                part: table(value),
            }),
        ));
        lies.push((
            "a handoff near 2^64",
            frame(&PriorityMessage::HandoffPart { part: table(value) }),
        ));
    }
    let mut past_the_frame = u32::MAX.to_be_bytes().to_vec();
    past_the_frame.extend_from_slice(b"short");
    lies.push(("a length past the frame", Bytes::from(past_the_frame)));
    lies.push(("half a length", Bytes::from_static(&[0, 0, 1])));
    let mut garbage = 5u32.to_be_bytes().to_vec();
    garbage.extend_from_slice(&[0xff; 5]);
    lies.push(("a message that decodes to nothing", Bytes::from(garbage)));
    lies
}

/// Links to `to` as node `as_node` of `peers` with the right key and sends
/// `lie`; returns once the node has read it.
async fn tell(to: SocketAddr, peers: &[SocketAddr], as_node: usize, what: &str, lie: Bytes) {
    let hello = LinkHello {
        from: as_node,
        peers: peers.iter().map(SocketAddr::to_string).collect(),
    };
    let first = peer::encode(&hello).expect("encode the hello");
    tell_raw(to, PEER_HELLO, first, what, lie).await;
}

/// Opens a link to `to` with `hello` and the right key, its first frame
/// `first`, and sends `lie`; returns once the node has read it (it answers
/// a frame, or closes the link).
async fn tell_raw(to: SocketAddr, hello: &[u8], first: Bytes, what: &str, lie: Bytes) {
    let stream = tokio::net::TcpStream::connect(to).await.expect("connect");
    let mut link = tokio::time::timeout(
        READ_WITHIN,
        peer::connect(stream, hello, &key(), first, MAX_FRAME),
    )
    .await
    .unwrap_or_else(|_| panic!("{what}: the handshake did not finish"))
    .unwrap_or_else(|e| panic!("{what}: the handshake with the right key failed: {e}"));
    if link.send(lie).await.is_err() {
        return; // closed already: read and refused
    }
    // Whatever comes back (a sign of life, an end, an error) says the
    // node read the frame; nothing at all within the bound is a hang.
    if tokio::time::timeout(READ_WITHIN, link.next())
        .await
        .is_err()
    {
        panic!("{what}: the node neither answered nor closed the link in {READ_WITHIN:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_with_the_key_that_lies_changes_no_token_and_no_role() {
    let mut cluster = Cluster::start(2, &[]);
    cluster.wait_active(0, Duration::from_secs(20)).await;
    let mut client = baton_tests::LineClient::connect(cluster.addr(0)).await;
    let held = grant_token(&client.request("A held 0 600").await, "held");
    let mut last = held;
    for (what, lie) in lies() {
        tell(cluster.addr(0), cluster.peers(), 1, what, lie).await;
        assert!(cluster.is_up(0), "{what}: the active exited");
        let status = cluster.statuses().await;
        let active = status[0]
            .as_ref()
            .unwrap_or_else(|| panic!("{what}: no status"));
        assert_eq!(field(active, "role"), "active", "{what}: {active:?}");
        let query = client.request("Q held").await;
        assert!(query.contains(&format!("token={held} ")), "{what}: {query}");
        let key = format!("after-{}", last);
        let token = grant_token(&client.request(&format!("A {key} 0 1")).await, &key);
        let bound = token_floor::credible_token_bound(token_floor::wall_clock_ms());
        assert!(token > last, "{what}: token {token} not above {last}");
        assert!(
            token < bound,
            "{what}: token {token} beyond the clock's bound {bound}"
        );
        last = token;
    }
}

/// A vote request (or a pre-vote) from node `from` for `term`, with a log
/// as long as any: what would win an election if believed.
fn vote(from: u64, term: u64, pre: bool) -> Bytes {
    let leader_id = openraft::impls::leader_id_adv::LeaderId {
        term,
        node_id: from,
    };
    let request = openraft::raft::VoteRequest {
        vote: Vote {
            leader_id,
            committed: false,
        },
        last_log_id: Some(LogId {
            leader_id,
            index: u64::MAX / 2,
        }),
        leadership_transfer: false,
    };
    let body = if pre {
        RequestBody::PreVote(request)
    } else {
        RequestBody::Vote(request)
    };
    peer::encode(&RpcRequest { id: 1, body }).expect("encode a vote")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raft_peer_with_the_key_voting_absurd_terms_changes_no_term_and_no_token() {
    let mut cluster = RaftCluster::start(3);
    let (leader, _) = cluster.wait_leader(Duration::from_secs(30)).await;
    let status = |statuses: Vec<Option<baton_tests::Status>>, what: &str| {
        statuses[leader]
            .clone()
            .unwrap_or_else(|| panic!("{what}: the leader does not answer"))
    };
    let before = status(cluster.statuses().await, "before");
    let term = field(&before, "term").to_owned();
    let mut client = baton_tests::LineClient::connect(cluster.peers[leader]).await;
    let mut last = grant_token(&client.request("A held 0 600").await, "held");
    let from = u64::try_from((leader + 1) % 3).expect("small");
    let to = u64::try_from(leader).expect("small");
    for value in [u64::MAX - 1, 1 << 63, (1 << 32) + 2] {
        for pre in [false, true] {
            let what = format!("a {}vote of term {value}", if pre { "pre-" } else { "" });
            let hello = rpc::LinkHello { from, to };
            let first = peer::encode(&hello).expect("encode the hello");
            let lie = vote(from, value, pre);
            tell_raw(cluster.peers[leader], RAFT_HELLO, first, &what, lie).await;
            let now = status(cluster.statuses().await, &what);
            assert_eq!(field(&now, "role"), "leader", "{what}: {now:?}");
            assert_eq!(field(&now, "term"), term, "{what}: {now:?}");
            let key = format!("after-{last}");
            let token = grant_token(&client.request(&format!("A {key} 0 1")).await, &key);
            let bound = token_floor::credible_token_bound(token_floor::wall_clock_ms());
            assert!(
                token > last && token < bound,
                "{what}: token {token} after {last}"
            );
            last = token;
        }
    }
}
