//! The frame caps against the largest frames really built: worst-case
//! commands, entries, appends, snapshot parts and replies, encoded.

use baton_core::{Acquire, Command, Key, MAX_KEY_LEN};
use openraft::impls::leader_id_adv::LeaderId;
use openraft::raft::{AppendEntriesRequest, VoteResponse};
use openraft::{EntryPayload, LogId};

use super::*;
use crate::raft::engine::{RaftEngine, RaftRole};
use crate::raft::net::rpc::{ReplyBody, RequestBody, RpcReply, RpcRequest};
use crate::raft::net::snapshot_transfer::{SnapshotHead, SnapshotPart};
use crate::raft::test_host::membership;
use crate::raft::types::{Entry, Proposal, SnapshotMeta, StoredMembership, Tagged, Vote};

fn peers(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| format!("node-{i}.example.com:7411"))
        .collect()
}

fn widest_log_id() -> crate::raft::types::LogId {
    LogId {
        leader_id: LeaderId {
            term: u64::MAX,
            node_id: u64::MAX,
        },
        index: u64::MAX,
    }
}

fn widest_vote() -> Vote {
    Vote {
        leader_id: LeaderId {
            term: u64::MAX,
            node_id: u64::MAX,
        },
        committed: true,
    }
}

fn widest_commands() -> Vec<Command> {
    Command::widest()
}

fn len<T: serde::Serialize>(value: &T) -> usize {
    postcard::to_allocvec(value).expect("encodes").len()
}

fn widest_proposal_entry() -> Entry {
    let widest = widest_commands().into_iter().max_by_key(len);
    let renew = widest.expect("commands");
    Entry {
        log_id: widest_log_id(),
        payload: EntryPayload::Normal(Proposal {
            origin: u64::MAX,
            commands: vec![
                Tagged {
                    tag: u64::MAX,
                    command: renew,
                };
                MAX_BATCH
            ],
        }),
    }
}

#[test]
fn every_command_fits_its_bound() {
    for command in widest_commands() {
        let tagged = Tagged {
            tag: u64::MAX,
            command,
        };
        assert!(len(&tagged) <= MAX_TAGGED_BYTES, "{tagged:?}");
    }
}

#[test]
fn the_largest_append_a_leader_sends_fits_the_request_cap_with_little_to_spare() {
    let caps = FrameCaps::for_cluster();
    let entry = widest_proposal_entry();
    assert!(len(&entry) <= MAX_PROPOSAL_ENTRY_BYTES);
    let request = RpcRequest {
        id: u64::MAX,
        body: RequestBody::Append(AppendEntriesRequest {
            vote: widest_vote(),
            prev_log_id: Some(widest_log_id()),
            entries: vec![entry; MAX_PAYLOAD_ENTRIES as usize],
            leader_commit: Some(widest_log_id()),
        }),
    };
    let frame = len(&request);
    assert!(frame <= caps.request, "{frame} > {}", caps.request);
    // Near the real need: the slack is in the heads, not in the sizing.
    assert!(
        frame * 100 / caps.request >= 95,
        "{frame} of {}",
        caps.request
    );
    // A grant with a semaphore's permits and the longest value is the
    // widest command since protocol 1.2.
    assert!(caps.request < 7 * 1024 * 1024, "{}", caps.request);
}

#[test]
fn a_membership_entry_and_a_snapshot_part_fit_even_for_the_most_members() {
    let caps = FrameCaps::for_cluster();
    let longest = |i: usize| {
        let host = format!("{i}-{}", "h".repeat(MAX_ADDR_LEN));
        format!("{}:65535", &host[..MAX_ADDR_LEN - 6])
    };
    let most: Vec<String> = (0..MAX_MEMBERS).map(longest).collect();
    assert!(most.iter().all(|a| a.len() == MAX_ADDR_LEN));
    for n in [1, 3, 7] {
        let peers = peers(n);
        let entry = Entry {
            log_id: widest_log_id(),
            payload: EntryPayload::Membership(membership(&peers)),
        };
        let append = RpcRequest {
            id: u64::MAX,
            body: RequestBody::Append(AppendEntriesRequest {
                vote: widest_vote(),
                prev_log_id: Some(widest_log_id()),
                entries: vec![entry; MAX_PAYLOAD_ENTRIES as usize],
                leader_commit: Some(widest_log_id()),
            }),
        };
        assert!(len(&append) <= caps.request, "{n} peers");
        let part = RpcRequest {
            id: u64::MAX,
            body: RequestBody::SnapshotPart(SnapshotPart {
                transfer: u64::MAX,
                offset: u64::MAX,
                total: u64::MAX,
                data: vec![0xff; SNAPSHOT_PART_BYTES],
                head: Some(SnapshotHead {
                    vote: widest_vote(),
                    meta: SnapshotMeta {
                        last_log_id: Some(widest_log_id()),
                        last_membership: StoredMembership::new(
                            Some(widest_log_id()),
                            membership(&peers),
                        ),
                    },
                }),
            }),
        };
        assert!(len(&part) <= caps.request, "{n} peers");
    }
    // The widest: MAX_MEMBERS longest addresses, every one in both voter
    // sets of a joint membership, with the widest ids.
    let nodes: std::collections::BTreeMap<u64, openraft::BasicNode> = most
        .iter()
        .enumerate()
        .map(|(i, addr)| {
            (
                u64::MAX - i as u64,
                openraft::BasicNode { addr: addr.clone() },
            )
        })
        .collect();
    let ids: std::collections::BTreeSet<u64> = nodes.keys().copied().collect();
    let joint = openraft::Membership::new(vec![ids.clone(), ids], nodes).expect("membership");
    let entry = Entry {
        log_id: widest_log_id(),
        payload: EntryPayload::Membership(joint),
    };
    let encoded = len(&entry);
    assert!(
        encoded <= MAX_PROPOSAL_ENTRY_BYTES.max(64 + MAX_MEMBERSHIP_BYTES),
        "{encoded}"
    );
    assert!(
        encoded + 64 >= MAX_MEMBERSHIP_BYTES / 2,
        "sized near the need: {encoded}"
    );
}

#[test]
fn the_hello_cap_is_exactly_the_widest_valid_hello() {
    let caps = FrameCaps::for_cluster();
    let widest = LinkHello {
        from: u64::MAX,
        to: u64::MAX,
    };
    assert_eq!(len(&widest), caps.hello);
    assert!(caps.hello <= 20, "two ids: {}", caps.hello);
}

#[test]
fn replies_fit_the_reply_cap() {
    let vote = RpcReply {
        id: u64::MAX,
        body: ReplyBody::Vote(VoteResponse {
            vote: widest_vote(),
            vote_granted: true,
            last_log_id: Some(widest_log_id()),
        }),
    };
    assert!(len(&vote) <= MAX_REPLY_FRAME);
    let failed = RpcReply {
        id: u64::MAX,
        body: ReplyBody::failed(&"é".repeat(10 * MAX_FAILED_REASON)),
    };
    assert!(len(&failed) <= MAX_REPLY_FRAME);
    let ReplyBody::Failed(reason) = failed.body else {
        panic!("a failure")
    };
    assert!(reason.len() <= MAX_FAILED_REASON && reason.len() >= MAX_FAILED_REASON - 1);
}

#[test]
fn a_leader_never_puts_more_than_the_bound_in_one_entry() {
    let mut engine: RaftEngine<u32> = RaftEngine::new(0, peers(3), 7);
    let mut events = Vec::new();
    engine.handle_role(RaftRole::Leader { term: 1 }, 0, &mut events);
    let blank = Entry {
        log_id: LogId {
            leader_id: LeaderId {
                term: 1,
                node_id: 0,
            },
            index: 1,
        },
        payload: EntryPayload::Blank,
    };
    engine.handle_committed((&blank).into(), 0, &mut events);
    assert!(engine.serving());
    for i in 0..(3 * MAX_BATCH + 5) {
        let name = format!("{i:0>width$}", width = MAX_KEY_LEN);
        let key = Key::new(name.as_bytes()).expect("key");
        engine
            .handle_acquire(Acquire::plain(key, 1_000, u64::MAX / 4), 0, 0, &mut events)
            .expect("serving");
    }
    let mut proposals = 0;
    while let Some((proposal, _)) = engine.poll_proposal() {
        assert!(proposal.commands.len() <= MAX_BATCH);
        let entry = Entry {
            log_id: widest_log_id(),
            payload: EntryPayload::Normal(proposal),
        };
        assert!(len(&entry) <= MAX_PROPOSAL_ENTRY_BYTES);
        proposals += 1;
    }
    assert_eq!(proposals, 4);
}
