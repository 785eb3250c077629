//! Exact-output tests of the Raft node: inputs in, the commands it leaves
//! for the shell and the answers it gives, compared whole.

use std::time::Duration;

use baton_core::{AcquireOptions, Key, KeyState};
use baton_proto::{Op, Response};
use baton_server::{Answer, Incoming, LockNode, LockRequest, Mailbox, NodeEvent, Served};
use openraft::impls::leader_id_adv::LeaderId;
use openraft::{EntryPayload, Instant as _, ServerState, TokioInstant};

use super::group_commit::MAX_HOLD;
use super::lock_node::RaftLockNode;
use super::observe::{Metrics, PeerProgress, ServerMetrics};
use super::{NodeTimes, RaftCommand};
use crate::raft::engine::RaftEngine;
use crate::raft::test_host::membership;
use crate::raft::types::{Entry, LogId, Proposal};

const STEP_DOWN: Duration = Duration::from_millis(300);
const STUCK: Duration = Duration::from_millis(1_000);

fn peers() -> Vec<String> {
    ["n0:1", "n1:1", "n2:1"].map(String::from).to_vec()
}

fn key(s: &str) -> Key {
    Key::new(s.as_bytes()).unwrap_or_else(|e| panic!("bad test key {s}: {e}"))
}

fn log_id(index: u64) -> LogId {
    LogId::new(
        LeaderId {
            term: 1,
            node_id: 0,
        },
        index,
    )
}

/// Node 0's metrics as leader of term 1, a majority heard at `acked`.
fn leading(acked: TokioInstant) -> Metrics {
    let mut m = Metrics::new_initial(0);
    m.state = ServerState::Leader;
    m.current_term = 1;
    m.vote.leader_id = LeaderId {
        term: 1,
        node_id: 0,
    };
    m.vote.committed = true;
    m.current_leader = Some(0);
    m.membership_config = std::sync::Arc::new(openraft::StoredMembership::new(
        Some(log_id(1)),
        membership(&peers()),
    ));
    m.last_quorum_acked = Some(acked.into());
    m
}

/// The server metrics that go with `m`.
pub(super) fn server_of(m: &Metrics) -> ServerMetrics {
    ServerMetrics {
        id: m.id,
        vote: m.vote,
        state: m.state,
        current_leader: m.current_leader,
        membership_config: m.membership_config.clone(),
        committed_membership_config: m.committed_membership_config.clone(),
    }
}

/// A node, its clock (server milliseconds and openraft's instant), and
/// the answers it gave.
struct Fixture {
    node: RaftLockNode,
    t0: TokioInstant,
    events: Vec<NodeEvent>,
    next_index: u64,
}

impl Fixture {
    /// Node 0, leading term 1 and serving: its first entry is in the log
    /// (its wall clock at 0, its token floor is below the table's).
    fn serving_leader() -> Fixture {
        let times = NodeTimes {
            step_down_after: STEP_DOWN,
            stuck_after: STUCK,
            check_every: Duration::from_millis(50),
            contact_stale_after: Duration::from_millis(600),
            silent_after: Duration::from_millis(1_000),
        };
        let mut f = Fixture {
            node: RaftLockNode::new(RaftEngine::new(0, peers(), 7), times),
            t0: TokioInstant::now(),
            events: Vec::new(),
            next_index: 2,
        };
        f.metrics(&leading(f.t0), 0);
        assert_eq!(f.node.take_commands(), vec![]);
        f.commit(EntryPayload::Blank);
        f.node.handle_tick(f.t0);
        assert_eq!(f.node.take_commands(), vec![]);
        assert!(f.node.engine().serving());
        f.events.clear();
        f
    }

    fn at(&self, ms: u64) -> TokioInstant {
        self.t0 + Duration::from_millis(ms)
    }

    fn metrics(&mut self, full: &Metrics, ms: u64) {
        let at = self.at(ms);
        self.node
            .handle_metrics(&server_of(full), full, at, ms, &mut self.events);
    }

    fn commit(&mut self, payload: EntryPayload<Proposal, u64, openraft::BasicNode>) {
        let entry = Entry {
            log_id: log_id(self.next_index),
            payload,
        };
        self.next_index += 1;
        self.node
            .handle_committed(&[entry], self.t0, 0, &mut self.events);
    }

    /// The one command left, a proposal: its entry and tags.
    fn proposed(&mut self) -> (Proposal, Vec<u64>) {
        match self.node.take_commands().as_slice() {
            [RaftCommand::Propose { proposal, tags }] => (proposal.clone(), tags.clone()),
            other => panic!("not one proposal: {other:?}"),
        }
    }

    /// Commits a proposal and tells the node its write is done.
    fn finish(&mut self, (proposal, tags): (Proposal, Vec<u64>)) {
        self.commit(EntryPayload::Normal(proposal));
        let (at, events) = (self.t0, &mut self.events);
        self.node
            .handle_proposal_done(&tags, Duration::from_micros(800), Ok(()), at, 0, events);
    }

    /// A client acquires `name` for 10 s, not waiting.
    fn acquire(&mut self, name: &str) {
        let _ = self.request(LockRequest::Acquire(baton_server::AcquireRef {
            key: &key(name),
            wait_ms: 0,
            lease_ms: 10_000,
            options: &AcquireOptions::default(),
        }));
    }

    fn request(&mut self, request: LockRequest<'_>) -> Served<Answer> {
        self.node.handle(
            Incoming {
                request,
                now: 0,
                reply_to: &Mailbox::closed(),
            },
            &mut self.events,
        )
    }

    /// The responses the node sent as late replies, in order.
    fn replies(&mut self) -> Vec<Response> {
        let mut out = Vec::new();
        self.events.retain(|e| match e {
            NodeEvent::Reply { response, .. } => {
                out.push(response.clone());
                false
            }
            _ => true,
        });
        out
    }
}

#[test]
fn a_read_waits_for_one_confirmation_per_round() {
    let mut f = Fixture::serving_leader();
    let (a, b) = (key("a"), key("b"));
    assert!(matches!(
        f.request(LockRequest::Query { key: &a }),
        Served::Later
    ));
    assert!(f.node.has_output(), "the shell is woken for the round");
    f.node.handle_tick(f.at(1));
    assert_eq!(f.node.take_commands(), vec![RaftCommand::ConfirmLead]);
    // A query that comes during the round waits for the next.
    let _ = f.request(LockRequest::Query { key: &b });
    f.node.handle_tick(f.at(2));
    assert_eq!(f.node.take_commands(), vec![]);
    let at = f.at(3);
    f.node.handle_read_confirmed(true, at, 3, &mut f.events);
    assert_eq!(
        f.replies(),
        vec![Response::Queried {
            key: a,
            state: KeyState::plain(None, 0)
        }]
    );
    assert_eq!(f.node.take_commands(), vec![RaftCommand::ConfirmLead]);
    // Not confirmed (a leader cut off): `M` to nobody known.
    let at = f.at(4);
    f.node.handle_read_confirmed(false, at, 4, &mut f.events);
    assert_eq!(
        f.replies(),
        vec![Response::Moved {
            op: Op::Query,
            key: b,
            addr: None
        }]
    );
    assert_eq!(f.node.take_commands(), vec![]);
}

#[test]
fn a_leader_that_loses_its_quorum_steps_down_and_sends_queries_away() {
    let mut f = Fixture::serving_leader();
    let _ = f.request(LockRequest::Query { key: &key("q") });
    // The majority was last heard at t0; the step-down time passes.
    let ms = STEP_DOWN.as_millis() as u64 + 1;
    f.metrics(&leading(f.t0), ms);
    assert_eq!(f.node.take_commands(), vec![]);
    assert_eq!(
        f.replies(),
        vec![Response::Moved {
            op: Op::Query,
            key: key("q"),
            addr: None
        }]
    );
    assert_eq!(f.node.status().role, baton_proto::Role::Candidate);
    // A majority answers again: it serves again, nothing to run.
    let back = f.at(ms + 10);
    f.metrics(&leading(back), ms + 10);
    assert_eq!(f.node.take_commands(), vec![]);
    assert_eq!(f.node.status().role, baton_proto::Role::Leader);
}

#[test]
fn a_stuck_follower_has_the_lead_handed_to_the_best_other() {
    let mut f = Fixture::serving_leader();
    let mut m = leading(f.t0);
    m.last_log_index = Some(42);
    let matched = |index: u64| Some(log_id(index));
    m.replication = Some(
        [(0, matched(42)), (1, matched(41)), (2, matched(39))]
            .into_iter()
            .collect(),
    );
    let heard = |f: &Fixture, ms: u64| {
        let at = f.at(ms);
        Some(
            [(1, Some(at.into())), (2, Some(at.into()))]
                .into_iter()
                .collect(),
        )
    };
    m.heartbeat = heard(&f, 0);
    f.metrics(&m, 0);
    assert_eq!(f.node.take_commands(), vec![]);
    // Both answer; node 1 moves, node 2 does not for longer than allowed.
    m.replication = Some(
        [(0, matched(42)), (1, matched(42)), (2, matched(39))]
            .into_iter()
            .collect(),
    );
    let ms = STUCK.as_millis() as u64 + 1;
    m.heartbeat = heard(&f, ms);
    m.last_quorum_acked = Some(f.at(ms).into());
    f.metrics(&m, ms);
    assert_eq!(
        f.node.take_commands(),
        vec![RaftCommand::TransferLead {
            to: 1,
            stuck: PeerProgress {
                node: 2,
                matched: Some(39),
                lag: 3
            }
        }]
    );
    // Once per period.
    f.metrics(&m, ms + 10);
    assert_eq!(f.node.take_commands(), vec![]);
}

#[test]
fn a_proposal_is_held_until_the_answered_clients_are_back() {
    let mut f = Fixture::serving_leader();
    // Three clients are granted by one entry.
    for name in ["a", "b", "c"] {
        f.acquire(name);
    }
    f.node.handle_tick(f.t0);
    let entry = f.proposed();
    f.finish(entry);
    assert_eq!(f.node.take_commands(), vec![]);
    // The first comes back: held for the other two, at most the cap
    // (half the 800 us an entry took).
    f.acquire("d");
    f.node.handle_tick(f.t0);
    assert_eq!(
        f.node.take_commands(),
        vec![RaftCommand::HoldProposal {
            at_most: Duration::from_micros(400).min(MAX_HOLD)
        }]
    );
    f.acquire("e");
    assert_eq!(f.node.take_commands(), vec![]);
    // The last one back: its own command rides in the entry proposed.
    f.acquire("f");
    let (proposal, _) = f.proposed();
    assert_eq!(proposal.commands.len(), 3);
    // The bound the shell timed ends nothing more.
    f.node.handle_hold_over();
    assert_eq!(f.node.take_commands(), vec![]);
}

#[test]
fn a_hold_ends_at_its_bound_when_clients_stay_away() {
    let mut f = Fixture::serving_leader();
    for name in ["a", "b"] {
        f.acquire(name);
    }
    f.node.handle_tick(f.t0);
    let entry = f.proposed();
    f.finish(entry);
    f.acquire("c");
    f.node.handle_tick(f.t0);
    assert!(matches!(
        f.node.take_commands().as_slice(),
        [RaftCommand::HoldProposal { .. }]
    ));
    f.node.handle_hold_over();
    let (proposal, _) = f.proposed();
    assert_eq!(proposal.commands.len(), 1);
}

#[test]
fn leader_contact_is_asked_for_every_period_one_ask_at_a_time() {
    let mut f = Fixture::serving_leader();
    let period = super::contact::CHECK_EVERY.as_millis() as u64;
    // The fixture's first tick set the first ask a period after t0.
    f.node.handle_tick(f.at(period - 1));
    assert_eq!(f.node.take_commands(), vec![]);
    f.node.handle_tick(f.at(period));
    assert_eq!(f.node.take_commands(), vec![RaftCommand::AskLeaderContact]);
    // Unanswered: no second ask.
    f.node.handle_tick(f.at(3 * period));
    assert_eq!(f.node.take_commands(), vec![]);
    f.node
        .handle_leader_heard(Some(Duration::from_millis(5)), 3 * period);
    f.node.handle_tick(f.at(3 * period));
    assert_eq!(f.node.take_commands(), vec![RaftCommand::AskLeaderContact]);
    assert!(f.node.poll_timeout() <= Some(f.at(3 * period + 50)));
}

/// A leader told by a member that a later committed membership leaves it
/// out serves no more: `removed` in `S`, a health issue, an acquire sent
/// away; added back (its log's membership later than that), it leads.
#[test]
fn a_node_told_it_was_removed_says_so_and_serves_no_more() {
    use baton_proto::Role;
    let mut f = Fixture::serving_leader();
    f.node.handle_removal_notice(Some(log_id(9)));
    f.metrics(&leading(f.at(10)), 10);
    assert_eq!(f.node.status().role, Role::Removed);
    assert!(f
        .node
        .health_issue(10)
        .is_some_and(|i| i.contains("removed")));
    let k = key("k");
    let acquire = LockRequest::Acquire(baton_server::AcquireRef {
        key: &k,
        wait_ms: 0,
        lease_ms: 1_000,
        options: &AcquireOptions::default(),
    });
    assert!(matches!(f.request(acquire), Served::Redirect(_)));
    let me = f.node.members(10).into_iter().find(|m| m.is_self);
    assert_eq!(me.map(|m| m.state), Some("removed"));
    let mut back = leading(f.at(20));
    back.membership_config = std::sync::Arc::new(openraft::StoredMembership::new(
        Some(log_id(12)),
        membership(&peers()),
    ));
    f.metrics(&back, 20);
    assert_ne!(f.node.status().role, Role::Removed);
    assert_eq!(f.node.health_issue(20), None);
}

mod own_writes;
mod watches;
