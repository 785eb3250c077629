//! A Raft leader's reads after writes proposed before them: a confirmed
//! read waits until those writes are done, so that a connection reads its
//! own writes as on a single node.

use std::time::Duration;

use baton_core::KeyState;
use baton_proto::{Op, Response};
use baton_server::LockRequest;

use super::{key, leading, Fixture, STEP_DOWN};
use crate::raft::node::RaftCommand;

impl Fixture {
    /// `Q name`, then the round's confirmation (`confirmed` or not) at `ms`.
    fn query_confirmed(&mut self, name: &str, confirmed: bool, ms: u64) {
        let _ = self.request(LockRequest::Query { key: &key(name) });
        self.node.handle_tick(self.at(ms));
        let commands = self.node.take_commands();
        assert!(commands.contains(&RaftCommand::ConfirmLead), "{commands:?}");
        let (at, events) = (self.at(ms), &mut self.events);
        self.node.handle_read_confirmed(confirmed, at, ms, events);
    }
}

#[test]
fn a_confirmed_read_waits_for_the_writes_before_it() {
    let mut f = Fixture::serving_leader();
    f.acquire("a");
    f.node.handle_tick(f.t0);
    let entry = f.proposed();
    // The grant is in the log's hands: the read is confirmed, not answered.
    f.query_confirmed("a", true, 1);
    assert_eq!(f.replies(), vec![]);
    f.finish(entry);
    let replies = f.replies();
    let granted = f.node.engine().query(&key("a"), 0);
    assert_ne!(granted, KeyState::plain(None, 0));
    // The grant's answer goes to its acquire, then the read's shows it.
    assert_eq!(
        replies,
        vec![Response::Queried {
            key: key("a"),
            state: granted
        }]
    );
}

#[test]
fn a_read_with_no_write_before_it_waits_for_none_proposed_after_it() {
    let mut f = Fixture::serving_leader();
    let _ = f.request(LockRequest::Query { key: &key("a") });
    f.acquire("a");
    f.node.handle_tick(f.t0);
    let commands = f.node.take_commands();
    assert!(commands.contains(&RaftCommand::ConfirmLead), "{commands:?}");
    let (at, events) = (f.at(1), &mut f.events);
    f.node.handle_read_confirmed(true, at, 1, events);
    assert_eq!(
        f.replies(),
        vec![Response::Queried {
            key: key("a"),
            state: KeyState::plain(None, 0)
        }]
    );
}

#[test]
fn a_read_waiting_for_a_write_that_failed_is_answered() {
    let mut f = Fixture::serving_leader();
    f.acquire("a");
    f.node.handle_tick(f.t0);
    let (_, tags) = f.proposed();
    f.query_confirmed("a", true, 1);
    assert_eq!(f.replies(), vec![]);
    // The entry did not make it into the log: the acquire is sent to the
    // leader named, and the read no longer waits for it.
    let (at, events) = (f.at(2), &mut f.events);
    let took = Duration::from_micros(800);
    f.node
        .handle_proposal_done(&tags, took, Err(Some(1)), at, 2, events);
    let queried = Response::Queried {
        key: key("a"),
        state: KeyState::plain(None, 0),
    };
    assert!(f.replies().contains(&queried));
}

#[test]
fn a_read_waiting_for_a_write_is_sent_away_when_the_lead_ends() {
    let mut f = Fixture::serving_leader();
    f.acquire("a");
    f.node.handle_tick(f.t0);
    let _entry = f.proposed();
    f.query_confirmed("a", true, 1);
    assert_eq!(f.replies(), vec![]);
    // The majority was last heard at t0; the step-down time passes.
    let ms = STEP_DOWN.as_millis() as u64 + 1;
    f.metrics(&leading(f.t0), ms);
    let moved = Response::Moved {
        op: Op::Query,
        key: key("a"),
        addr: None,
    };
    assert_eq!(f.replies(), vec![moved]);
}
