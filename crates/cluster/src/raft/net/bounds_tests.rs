//! The sanity bounds, one by one, and the rate limit on their log lines.

use baton_core::{Key, SnapshotLock};
use openraft::impls::leader_id_adv::LeaderId;
use openraft::BasicNode;

use super::*;
use crate::raft::test_host::membership;
use crate::raft::types::{Entry, Proposal, Tagged};

type Payload = EntryPayload<Proposal, u64, BasicNode>;

/// The wall clock the tests' node reads, ms since 1970.
const WALL_MS: u64 = 1_800_000_000_000;

fn peers() -> Vec<String> {
    vec!["a:1".into(), "b:1".into(), "c:1".into()]
}

fn vote(term: u64, node_id: u64) -> Vote {
    Vote {
        leader_id: LeaderId { term, node_id },
        committed: true,
    }
}

fn log_id(term: u64, index: u64) -> LogId {
    LogId {
        leader_id: LeaderId { term, node_id: 0 },
        index,
    }
}

fn vote_request(term: u64) -> VoteRequest<TypeConfig> {
    VoteRequest {
        vote: vote(term, 1),
        last_log_id: Some(log_id(term.min(5), 10)),
        leadership_transfer: false,
    }
}

fn entry(term: u64, index: u64, payload: Payload) -> Entry {
    Entry {
        log_id: log_id(term, index),
        payload,
    }
}

fn proposal(commands: Vec<Command>) -> Payload {
    EntryPayload::Normal(Proposal {
        origin: 1,
        commands: commands
            .into_iter()
            .map(|command| Tagged { tag: 1, command })
            .collect(),
    })
}

fn append(entries: Vec<Entry>) -> AppendEntriesRequest<TypeConfig> {
    AppendEntriesRequest {
        vote: vote(5, 0),
        prev_log_id: Some(log_id(4, 9)),
        entries,
        leader_commit: Some(log_id(4, 9)),
    }
}

#[test]
fn a_term_far_beyond_this_nodes_is_refused_whatever_the_message() {
    let at = |term| Bounds {
        term,
        wall_ms: WALL_MS,
    };
    // The attack: a vote near 2^64, at every node's term.
    for current in [0, 7, 1 << 40] {
        assert!(matches!(
            at(current).check_vote(&vote_request(u64::MAX - 1)),
            Err(Implausible::Term { .. })
        ));
    }
    assert_eq!(at(7).check_vote(&vote_request(8)), Ok(()));
    assert_eq!(at(7).check_vote(&vote_request(7 + MAX_TERM_LEAP)), Ok(()));
    assert!(at(7).check_vote(&vote_request(8 + MAX_TERM_LEAP)).is_err());
    // A fresh (or wiped) node still lets a long-lived cluster back in.
    assert_eq!(at(0).check_vote(&vote_request(1_000_000)), Ok(()));
    // Never at or over the ceiling, however high this node is.
    assert!(at(TERM_CEILING - 1)
        .check_vote(&vote_request(TERM_CEILING))
        .is_err());
    let mut far = append(Vec::new());
    far.vote = vote(u64::MAX, 0);
    assert!(at(5).check_append(&far).is_err());
    let head = SnapshotMeta::default();
    assert!(at(5)
        .check_snapshot_head(&vote(u64::MAX, 0), &head)
        .is_err());
    assert_eq!(at(5).check_snapshot_head(&vote(6, 0), &head), Ok(()));
    let transfer = TransferLeaderRequest::new(vote(u64::MAX, 0), 1, None);
    assert!(at(5).check_transfer(&transfer).is_err());
    let transfer = TransferLeaderRequest::new(vote(5, 0), 1, None);
    assert_eq!(at(5).check_transfer(&transfer), Ok(()));
}

#[test]
fn node_ids_no_node_can_have_and_log_ids_past_the_leader_are_refused() {
    let bounds = Bounds {
        term: 5,
        wall_ms: WALL_MS,
    };
    let mut rpc = vote_request(6);
    rpc.vote = vote(6, 64);
    assert_eq!(bounds.check_vote(&rpc), Err(Implausible::Node(64)));
    rpc.vote = vote(6, u64::MAX);
    assert_eq!(bounds.check_vote(&rpc), Err(Implausible::Node(u64::MAX)));
    rpc.vote = vote(6, crate::raft::members::joined_id("d:1"));
    assert_eq!(bounds.check_vote(&rpc), Ok(()));
    let mut rpc = vote_request(6);
    rpc.last_log_id = Some(log_id(7, 1));
    assert!(matches!(
        bounds.check_vote(&rpc),
        Err(Implausible::LaterThanLeader { term: 7, leader: 6 })
    ));
    let mut rpc = vote_request(6);
    rpc.last_log_id = Some(log_id(6, INDEX_CEILING));
    assert_eq!(
        bounds.check_vote(&rpc),
        Err(Implausible::Index(INDEX_CEILING))
    );
    let transfer = TransferLeaderRequest::new(vote(5, 0), 99, None);
    assert_eq!(bounds.check_transfer(&transfer), Err(Implausible::Node(99)));
}

#[test]
fn appends_carry_what_a_leader_sends_and_nothing_more() {
    let peers = peers();
    let bounds = Bounds {
        term: 5,
        wall_ms: WALL_MS,
    };
    let key = Key::new(b"k").expect("key");
    let grant = || Command::Grant {
        key: key.clone(),
        lease_ms: 1_000,
    };
    let ok = append(vec![
        entry(5, 10, EntryPayload::Blank),
        entry(5, 11, proposal(vec![grant(); MAX_BATCH])),
        entry(5, 12, EntryPayload::Membership(membership(&peers))),
    ]);
    assert_eq!(bounds.check_append(&ok), Ok(()));
    let heartbeat = append(Vec::new());
    assert_eq!(bounds.check_append(&heartbeat), Ok(()));

    let too_many = append(
        (0..=MAX_PAYLOAD_ENTRIES)
            .map(|i| entry(5, 10 + i, EntryPayload::Blank))
            .collect(),
    );
    assert!(matches!(
        bounds.check_append(&too_many),
        Err(Implausible::TooManyEntries(_))
    ));
    let fat = append(vec![entry(5, 10, proposal(vec![grant(); MAX_BATCH + 1]))]);
    assert_eq!(
        bounds.check_append(&fat),
        Err(Implausible::TooManyCommands(MAX_BATCH + 1))
    );
    let gap = append(vec![entry(5, 11, EntryPayload::Blank)]);
    assert!(matches!(
        bounds.check_append(&gap),
        Err(Implausible::NotConsecutive { .. })
    ));
    let later = append(vec![entry(6, 10, EntryPayload::Blank)]);
    assert!(matches!(
        bounds.check_append(&later),
        Err(Implausible::LaterThanLeader { .. })
    ));
    // The poison: a token floor of 2^64 - 1.
    let poison = append(vec![entry(
        5,
        10,
        proposal(vec![Command::RaiseTokenFloor { floor: u64::MAX }]),
    )]);
    assert!(matches!(
        bounds.check_append(&poison),
        Err(Implausible::Token { .. })
    ));
    // A leader's wall-clock floor, its clock up to an hour ahead of ours.
    let floor = |floor| {
        append(vec![entry(
            5,
            10,
            proposal(vec![Command::RaiseTokenFloor { floor }]),
        )])
    };
    assert_eq!(bounds.check_append(&floor(100)), Ok(()));
    let ahead = max_floor_at(WALL_MS);
    assert_eq!(ahead, (WALL_MS + 3_600_000) << 20);
    assert_eq!(bounds.check_append(&floor(ahead)), Ok(()));
    assert!(matches!(
        bounds.check_append(&floor(ahead + 1)),
        Err(Implausible::Token { .. })
    ));
    // A joined node's id under an address that does not give it.
    let forged_id = crate::raft::members::joined_id("c:1");
    let forged = openraft::Membership::new(
        vec![[0, forged_id].into_iter().collect()],
        [
            (0, BasicNode { addr: "a:1".into() }),
            (
                forged_id,
                BasicNode {
                    addr: "evil:1".into(),
                },
            ),
        ]
        .into_iter()
        .collect::<std::collections::BTreeMap<_, _>>(),
    )
    .expect("membership");
    let foreign = append(vec![entry(5, 10, EntryPayload::Membership(forged))]);
    assert!(matches!(
        bounds.check_append(&foreign),
        Err(Implausible::Membership(_))
    ));
}

#[test]
fn a_snapshot_never_carries_a_token_its_log_cannot_have_granted() {
    let meta = |index: Option<u64>| SnapshotMeta {
        last_log_id: index.map(|i| log_id(3, i)),
        last_membership: StoredMembership::default(),
    };
    let table = |last_token, lock_token| TableSnapshot {
        last_token,
        locks: vec![SnapshotLock::plain(
            Key::new(b"k").expect("key"),
            lock_token,
            10,
        )],
    };
    // Above the highest floor a leader can have proposed by our clock,
    // at most MAX_BATCH grants an entry.
    let floor = max_floor_at(WALL_MS);
    let check = |index, table: &TableSnapshot| check_table(&meta(index), table, WALL_MS);
    assert_eq!(check(Some(49), &table(50, 50)), Ok(()));
    assert_eq!(check(Some(0), &table(floor + MAX_BATCH as u64, 1)), Ok(()));
    assert!(check(Some(0), &table(floor + MAX_BATCH as u64 + 1, 1)).is_err());
    assert_eq!(check(Some(9), &table(floor + 3, floor + 3)), Ok(()));
    assert!(check(Some(10), &table(u64::MAX, 5)).is_err());
    assert!(
        check(Some(10), &table(5, u64::MAX)).is_err(),
        "a lock's token counts too"
    );
    assert!(check(None, &table(floor + 1, 1)).is_err());
    assert_eq!(max_token_at(Some(u64::MAX)), u64::MAX, "saturates");
}

#[test]
fn replies_far_beyond_the_request_or_past_what_was_sent_are_refused() {
    assert_eq!(check_reply_term(5, 9), Ok(()));
    assert!(check_reply_term(5, u64::MAX).is_err());
    let higher = AppendEntriesResponse::HigherVote(vote(u64::MAX, 1));
    assert!(check_append_reply(5, Some(10), &higher).is_err());
    let matched = |index| AppendEntriesResponse::PartialSuccess(Some(log_id(5, index)));
    assert_eq!(check_append_reply(5, Some(10), &matched(10)), Ok(()));
    assert_eq!(
        check_append_reply(5, Some(10), &matched(11)),
        Err(Implausible::Reply)
    );
    assert_eq!(
        check_append_reply(5, Some(10), &AppendEntriesResponse::Conflict),
        Ok(())
    );
    let reply = VoteResponse {
        vote: vote(u64::MAX, 1),
        vote_granted: false,
        last_log_id: None,
    };
    assert!(check_vote_reply(5, &reply).is_err());
}

#[tokio::test(start_paused = true)]
async fn refusals_are_logged_once_per_peer_per_interval() {
    let complaints = Complaints::default();
    let why = Implausible::Node(9);
    assert!(complaints.refused(1, "n1:1", "vote", &why));
    for _ in 0..1_000 {
        assert!(!complaints.refused(1, "n1:1", "vote", &why));
    }
    assert!(
        complaints.refused(2, "n2:1", "vote", &why),
        "another peer logs"
    );
    tokio::time::advance(COMPLAINT_INTERVAL).await;
    assert!(complaints.refused(1, "n1:1", "vote", &why));
    assert!(!complaints.refused(1, "n1:1", "vote", &why));
}
