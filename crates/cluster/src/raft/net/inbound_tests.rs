//! The serving side against a real node, over in-memory streams with the
//! real handshake: refused hellos, superseded links, the forged
//! vote, and snapshots in parts.

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use baton_core::{Key, SnapshotLock, TableSnapshot};
use futures_util::{SinkExt, StreamExt};
use openraft::impls::leader_id_adv::LeaderId;
use openraft::raft::VoteRequest;
use openraft::{BasicNode, LogId, Membership};
use tokio::io::{AsyncReadExt, DuplexStream};

use super::*;
use crate::peer::gate::LINKS_PER_PEER;
use crate::peer::{ClusterKey, SecureFramed};
use crate::raft::members::joined_id;
use crate::raft::net::snapshot_transfer::parts;
use crate::raft::test_host::{self, TestHost, TEST_KEY};
use crate::raft::types::{SnapshotMeta, StoredMembership, TypeConfig, Vote};

const WITHIN: Duration = Duration::from_secs(10);

fn peers() -> Vec<String> {
    vec!["n0:1".into(), "n1:1".into()]
}

fn key() -> ClusterKey {
    ClusterKey::from_text(TEST_KEY).expect("key")
}

struct Node {
    raft: RaftOf<TestHost>,
    host: Arc<TestHost>,
    acceptor: Arc<RaftAcceptor<TestHost>>,
    _dir: tempfile::TempDir,
}

/// Node 0 of two, the other never up: it answers, never leads.
async fn node() -> Node {
    let dir = tempfile::tempdir().expect("dir");
    let settings = test_host::settings(0, &peers(), dir.path());
    let (raft, host) = test_host::node(&settings).await;
    let acceptor = RaftAcceptor::new(raft.clone(), 0, peers(), test_host::keys());
    Node {
        raft,
        host,
        acceptor,
        _dir: dir,
    }
}

/// A connection to the node's acceptor, as its server would hand it over.
fn open(acceptor: &Arc<RaftAcceptor<TestHost>>) -> DuplexStream {
    let (client, mut server) = tokio::io::duplex(1 << 20);
    let acceptor = acceptor.clone();
    tokio::spawn(async move {
        let mut hello = vec![0; RAFT_HELLO.len()];
        if server.read_exact(&mut hello).await.is_ok() {
            acceptor.take(
                server,
                BytesMut::from(&hello[..]),
                Ipv4Addr::LOCALHOST.into(),
            );
        }
    });
    client
}

async fn dial(
    node: &Node,
    from: NodeId,
    to: NodeId,
    key: &ClusterKey,
) -> Result<SecureFramed<DuplexStream>, PeerError> {
    let hello = peer::encode(&LinkHello { from, to })?;
    peer::connect(open(&node.acceptor), RAFT_HELLO, key, hello, 64 * 1024).await
}

/// Sends a request; its reply, or `None` once the link is closed.
async fn call(
    link: &mut SecureFramed<DuplexStream>,
    id: u64,
    body: RequestBody,
) -> Option<ReplyBody> {
    let frame = peer::encode(&RpcRequest { id, body }).expect("encodes");
    link.send(frame).await.ok()?;
    closed_or_reply(link).await
}

async fn closed_or_reply(link: &mut SecureFramed<DuplexStream>) -> Option<ReplyBody> {
    match tokio::time::timeout(WITHIN, link.next()).await {
        Ok(Some(Ok(frame))) => Some(peer::decode::<RpcReply>(&frame).expect("reply").body),
        Ok(_) => None,
        Err(_) => panic!("neither a reply nor a close within {WITHIN:?}"),
    }
}

fn vote(term: u64, node_id: u64) -> Vote {
    Vote {
        leader_id: LeaderId { term, node_id },
        committed: false,
    }
}

fn current_term(raft: &RaftOf<TestHost>) -> u64 {
    raft.metrics().borrow_watched().current_term
}

/// A vote request that any node would grant: the highest term and a log
/// at least as long as anyone's.
pub(super) fn winning_vote(term: u64) -> VoteRequest<TypeConfig> {
    VoteRequest {
        vote: vote(term, 1),
        last_log_id: Some(LogId {
            leader_id: LeaderId { term, node_id: 1 },
            index: 1_000,
        }),
        leadership_transfer: false,
    }
}

#[tokio::test]
async fn a_vote_with_a_term_near_2_64_is_refused_and_elections_go_on() {
    let node = node().await;
    let mut link = dial(&node, 1, 0, &key()).await.expect("dials");
    let reply = call(&mut link, 1, RequestBody::Vote(winning_vote(u64::MAX))).await;
    assert!(
        matches!(&reply, Some(ReplyBody::Failed(why)) if why.contains("far beyond")),
        "{reply:?}"
    );
    let reply = call(&mut link, 2, RequestBody::PreVote(winning_vote(u64::MAX))).await;
    assert!(matches!(reply, Some(ReplyBody::Failed(_))), "{reply:?}");
    let before = current_term(&node.raft);
    assert!(before < 1 << 32, "term {before}");
    // The next election is what panicked openraft's core.
    node.raft.trigger().elect(false).await.expect("core alive");
    let mut metrics = node.raft.metrics();
    tokio::time::timeout(WITHIN, async {
        while metrics.borrow_watched().current_term <= before {
            metrics.changed().await.expect("the core is alive");
        }
    })
    .await
    .expect("an election ran");
    assert!(metrics.borrow_watched().running_state.is_ok());
    // The link still serves plausible requests.
    let reply = call(&mut link, 3, RequestBody::Vote(winning_vote(before + 5))).await;
    assert!(matches!(reply, Some(ReplyBody::Vote(_))), "{reply:?}");
}

#[tokio::test]
async fn hellos_for_another_node_or_from_no_node_and_wrong_keys_are_refused() {
    let node = node().await;
    // Node 0 is dialled as another node (one added but started without
    // --join), or by itself, or by ids no node has.
    for (from, to) in [
        (1, 5),
        (1, joined_id("n0:1")),
        (0, 0),
        (u64::MAX, 0),
        (64, 0),
    ] {
        let mut link = dial(&node, from, to, &key())
            .await
            .expect("the handshake itself is fine");
        // The link is refused, and the dialler told why (a reply to no
        // call), then closed: the vote is not answered.
        let reply = call(&mut link, 1, RequestBody::Vote(winning_vote(1))).await;
        let Some(ReplyBody::Failed(reason)) = reply else {
            panic!("{from} -> {to}: {reply:?}");
        };
        let wrong_id = to != 0;
        assert_eq!(reason.contains("a wrong node id"), wrong_id, "{reason}");
        assert!(!reason.contains("cluster-key-file"), "{reason}");
        let after = closed_or_reply(&mut link).await;
        assert!(after.is_none(), "{from} -> {to}: {after:?}");
    }
    let wrong = ClusterKey::from_text(&"w".repeat(40)).expect("key");
    // The node closes without answering the handshake.
    assert!(dial(&node, 1, 0, &wrong).await.is_err());
    assert_eq!(node.acceptor.gate().links_of(1), 0);
    assert_eq!(node.acceptor.gate().links_of(0), 0);
}

#[tokio::test]
async fn a_newer_link_of_a_peer_supersedes_its_oldest() {
    let node = node().await;
    let mut links = Vec::new();
    for i in 0..=LINKS_PER_PEER {
        let mut link = dial(&node, 1, 0, &key()).await.expect("dials");
        // Answered: admitted (in this order).
        let reply = call(&mut link, 1, RequestBody::Vote(winning_vote(1))).await;
        assert!(
            matches!(reply, Some(ReplyBody::Vote(_))),
            "link {i}: {reply:?}"
        );
        links.push(link);
    }
    assert_eq!(node.acceptor.gate().links_of(1), LINKS_PER_PEER);
    assert!(
        closed_or_reply(&mut links[0]).await.is_none(),
        "the oldest closed"
    );
    let reply = call(&mut links[1], 2, RequestBody::Vote(winning_vote(1))).await;
    assert!(
        matches!(reply, Some(ReplyBody::Vote(_))),
        "the others serve"
    );
}

fn membership() -> Membership<u64, BasicNode> {
    let nodes: std::collections::BTreeMap<u64, BasicNode> = peers()
        .into_iter()
        .enumerate()
        .map(|(i, addr)| (i as u64, BasicNode { addr }))
        .collect();
    Membership::new(vec![[0, 1].into_iter().collect()], nodes).expect("membership")
}

/// A snapshot of `locks` long-keyed locks and `last_token`, at log index
/// `index` of the leader of `term`.
fn snapshot(term: u64, index: u64, locks: u64, last_token: u64) -> (SnapshotHead, Vec<u8>) {
    let log_id = |index| LogId {
        leader_id: LeaderId { term, node_id: 1 },
        index,
    };
    let table = TableSnapshot {
        last_token,
        locks: (1..=locks)
            .map(|token| {
                SnapshotLock::plain(
                    Key::new(format!("{token:0>240}").as_bytes()).expect("key"),
                    token,
                    60_000,
                )
            })
            .collect(),
    };
    let head = SnapshotHead {
        vote: Vote {
            leader_id: LeaderId { term, node_id: 1 },
            committed: true,
        },
        meta: SnapshotMeta {
            last_log_id: Some(log_id(index)),
            last_membership: StoredMembership::new(Some(log_id(1)), membership()),
        },
    };
    (head, snapshot_store::encode_table(&table).expect("encodes"))
}

async fn send_snapshot(
    link: &mut SecureFramed<DuplexStream>,
    transfer: u64,
    (head, data): (SnapshotHead, Vec<u8>),
) -> Option<ReplyBody> {
    let parts = parts(transfer, head, &data);
    let count = parts.len();
    let mut last = None;
    for (i, part) in parts.into_iter().enumerate() {
        let reply = call(
            link,
            transfer * 100 + i as u64,
            RequestBody::SnapshotPart(part),
        )
        .await;
        if i + 1 < count {
            assert!(
                matches!(reply, Some(ReplyBody::PartReceived)),
                "part {i}: {reply:?}"
            );
        }
        last = reply;
    }
    last
}

#[tokio::test]
async fn a_snapshot_comes_in_parts_and_never_lowers_the_token_counter() {
    let node = node().await;
    let mut link = dial(&node, 1, 0, &key()).await.expect("dials");
    let term = current_term(&node.raft) + 1;
    // Over two parts' worth of locks.
    let big = snapshot(term, 100, 9_000, 9_000);
    assert!(big.1.len() > 2 * crate::raft::net::snapshot_transfer::SNAPSHOT_PART_BYTES);
    let reply = send_snapshot(&mut link, 1, big).await;
    assert!(matches!(reply, Some(ReplyBody::Snapshot(_))), "{reply:?}");
    assert_eq!(node.host.engine().table().last_token(), 9_000);
    assert_eq!(node.host.engine().table().len(), 9_000);

    // A token no log of 201 entries can have granted: refused, unchanged.
    let poisoned = snapshot(term, 200, 1, u64::MAX);
    let reply = send_snapshot(&mut link, 2, poisoned).await;
    assert!(
        matches!(&reply, Some(ReplyBody::Failed(why)) if why.contains("token")),
        "{reply:?}"
    );
    assert_eq!(node.host.engine().table().last_token(), 9_000);

    // The forged snapshot, newer but with the counter set back:
    // installed, the counter kept.
    let back = snapshot(term, 300, 1, 1);
    let reply = send_snapshot(&mut link, 3, back).await;
    assert!(matches!(reply, Some(ReplyBody::Snapshot(_))), "{reply:?}");
    assert_eq!(node.host.engine().table().len(), 1, "the newer table");
    assert_eq!(
        node.host.engine().table().last_token(),
        9_000,
        "never lowered"
    );

    // A snapshot from a leader of an implausible term is refused at once.
    let far = snapshot(u64::MAX - 1, 400, 1, 1);
    let reply = send_snapshot(&mut link, 4, far).await;
    assert!(matches!(reply, Some(ReplyBody::Failed(_))), "{reply:?}");
}

/// Dials the node's acceptor in memory.
struct ToNode(Arc<RaftAcceptor<TestHost>>);

impl crate::raft::net::link::Dialer for ToNode {
    fn dial(&self, _addr: &str) -> crate::raft::net::link::DialFuture {
        let stream = open(&self.0);
        Box::pin(async move { Ok(Box::new(stream) as crate::raft::net::link::BoxedStream) })
    }
}

#[tokio::test]
async fn the_leaders_network_sends_a_large_snapshot_in_parts_over_the_real_link() {
    use openraft::network::{RPCOption, RaftNetworkFactory, RaftNetworkV2};
    let node = node().await;
    let mut network =
        crate::raft::net::network::Network::new(1, key(), Arc::new(ToNode(node.acceptor.clone())));
    let mut client = network
        .new_client(
            0,
            &BasicNode {
                addr: "n0:1".into(),
            },
        )
        .await;
    let term = current_term(&node.raft) + 1;
    let (head, data) = snapshot(term, 100, 9_000, 9_000);
    assert!(data.len() > 2 * crate::raft::net::snapshot_transfer::SNAPSHOT_PART_BYTES);
    let snapshot = openraft::Snapshot {
        meta: head.meta,
        snapshot: data,
    };
    let response = client
        .full_snapshot(
            head.vote,
            snapshot,
            std::future::pending(),
            RPCOption::new(Duration::from_secs(5)),
        )
        .await
        .expect("installed");
    assert_eq!(response.vote.leader_id.term, term);
    assert_eq!(node.host.engine().table().last_token(), 9_000);
    // Heartbeat-sized calls share the link afterwards.
    let reply = client
        .vote(winning_vote(term), RPCOption::new(Duration::from_secs(5)))
        .await
        .expect("answered");
    assert!(!reply.vote_granted || reply.vote.leader_id.term == term);
}

/// Dials the node's acceptor in memory, counting the dials.
struct Counting(
    Arc<RaftAcceptor<TestHost>>,
    Arc<std::sync::atomic::AtomicUsize>,
);

impl crate::raft::net::link::Dialer for Counting {
    fn dial(&self, _addr: &str) -> crate::raft::net::link::DialFuture {
        self.1.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let stream = open(&self.0);
        Box::pin(async move { Ok(Box::new(stream) as crate::raft::net::link::BoxedStream) })
    }
}

/// A node that takes the handshake, then refuses the link (the leader
/// dials it as another node id): the leader's calls fail with its reason,
/// and it is redialled with the back-off, not at every call.
#[tokio::test]
async fn a_link_refused_as_another_node_says_why_and_is_redialled_with_back_off() {
    use crate::raft::net::link::{CallError, Link};
    let node = node().await;
    let dials = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let dialer = Arc::new(Counting(node.acceptor.clone(), dials.clone()));
    let hello = LinkHello { from: 1, to: 5 };
    let link = Link::new("n0:1".into(), hello, key(), dialer, Tasks::new());
    let first = link.call(RequestBody::Vote(winning_vote(1)), WITHIN).await;
    match first {
        Err(CallError::Refused(reason)) if reason.contains("a wrong node id") => {}
        other => panic!("{other:?}"),
    }
    // Calls every 5 ms for 0.4 s: without the back-off, a dial each.
    let until = tokio::time::Instant::now() + Duration::from_millis(400);
    let mut calls = 1;
    while tokio::time::Instant::now() < until {
        let again = link.call(RequestBody::Vote(winning_vote(1)), WITHIN).await;
        assert!(again.is_err(), "{again:?}");
        calls += 1;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let dialled = dials.load(std::sync::atomic::Ordering::Relaxed);
    assert!(dialled <= 6, "{dialled} dials for {calls} calls");
}

/// Dials the node's acceptor in memory, each dial taking `.1` first.
struct Slow(Arc<RaftAcceptor<TestHost>>, Duration);

impl crate::raft::net::link::Dialer for Slow {
    fn dial(&self, _addr: &str) -> crate::raft::net::link::DialFuture {
        let (acceptor, delay) = (self.0.clone(), self.1);
        Box::pin(async move {
            tokio::time::sleep(delay).await;
            Ok(Box::new(open(&acceptor)) as crate::raft::net::link::BoxedStream)
        })
    }
}

/// A dial slower than every call's timeout (a handshake on a loaded
/// machine) is not cut by the call that started it: it goes on, and a
/// later call uses its connection. Cut at each call, it never got through.
#[tokio::test]
async fn a_dial_slower_than_a_call_serves_a_later_call() {
    use crate::raft::net::link::Link;
    let node = node().await;
    let dialer = Arc::new(Slow(node.acceptor.clone(), Duration::from_millis(300)));
    let hello = LinkHello { from: 1, to: 0 };
    let link = Link::new("n0:1".into(), hello, key(), dialer, Tasks::new());
    let until = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let call = link.call(
            RequestBody::Vote(winning_vote(1)),
            Duration::from_millis(100),
        );
        match call.await {
            Ok(_) => break,
            Err(error) => assert!(
                tokio::time::Instant::now() < until,
                "no call got through: {error:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
