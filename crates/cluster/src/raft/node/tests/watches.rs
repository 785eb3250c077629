//! Exact-output tests of a Raft leader's watches (`W`): which go through a
//! read round (a client that saw another state than the table's, a wait
//! run out), which a committed change answers, and `M W` on a step-down.

use baton_core::{KeyState, StateTag, WatchId};
use baton_proto::{Op, Response};
use baton_server::{Answer, LockNode, LockRequest, NodeEvent, Served};

use super::{key, leading, Fixture, STEP_DOWN};
use crate::raft::node::RaftCommand;

impl Fixture {
    fn watch(&mut self, name: &str, wait_ms: u64, seen: StateTag) -> Served<Answer> {
        self.request(LockRequest::Watch {
            key: &key(name),
            wait_ms,
            seen,
        })
    }

    /// `W` answers to pending watches, in order.
    fn watch_answers(&mut self) -> Vec<(WatchId, Response)> {
        let mut out = Vec::new();
        self.events.retain(|e| match e {
            NodeEvent::WatchAnswered { id, response, .. } => {
                out.push((*id, response.clone()));
                false
            }
            _ => true,
        });
        out
    }

    /// Acquires `name` and commits its grant.
    fn granted(&mut self, name: &str) {
        self.acquire(name);
        self.node.handle_tick(self.t0);
        let proposed = self.proposed();
        self.finish(proposed);
    }

    fn state(&self, name: &str, now: u64) -> KeyState {
        self.node.engine().query(&key(name), now)
    }
}

fn watching(served: Served<Answer>) -> WatchId {
    match served {
        Served::Done(Answer::Watching(id)) => id,
        other => panic!("not a pending watch: {other:?}"),
    }
}

#[test]
fn a_watch_whose_client_saw_another_state_is_answered_after_a_read_round() {
    let mut f = Fixture::serving_leader();
    f.granted("k");
    f.events.clear();
    assert!(matches!(f.watch("k", 1_000, StateTag::Free), Served::Later));
    assert!(f.node.has_output(), "the shell is woken for the round");
    f.node.handle_tick(f.at(1));
    assert_eq!(f.node.take_commands(), vec![RaftCommand::ConfirmLead]);
    assert_eq!(f.replies(), vec![], "nothing before the lead is confirmed");
    let at = f.at(2);
    f.node.handle_read_confirmed(true, at, 2, &mut f.events);
    let state = f.state("k", 2);
    assert_eq!(state.tag(), StateTag::Plain(1));
    assert_eq!(
        f.replies(),
        vec![Response::Watched {
            key: key("k"),
            state
        }]
    );
    // Not confirmed: `M W <key> -`.
    assert!(matches!(f.watch("k", 1_000, StateTag::Free), Served::Later));
    f.node.handle_tick(f.at(3));
    assert_eq!(f.node.take_commands(), vec![RaftCommand::ConfirmLead]);
    let at = f.at(4);
    f.node.handle_read_confirmed(false, at, 4, &mut f.events);
    let moved = Response::Moved {
        op: Op::Watch,
        key: key("k"),
        addr: None,
    };
    assert_eq!(f.replies(), vec![moved]);
}

#[test]
fn a_watch_of_the_tables_state_is_answered_when_a_change_commits_without_a_round() {
    let mut f = Fixture::serving_leader();
    let id = watching(f.watch("k", 10_000, StateTag::Free));
    assert_eq!(f.node.take_commands(), vec![]);
    f.acquire("k");
    f.node.handle_tick(f.t0);
    let proposed = f.proposed();
    assert_eq!(f.watch_answers(), vec![], "not before the grant commits");
    f.finish(proposed);
    let state = f.state("k", 0);
    assert_eq!(state.tag(), StateTag::Plain(1));
    let watched = Response::Watched {
        key: key("k"),
        state,
    };
    assert_eq!(f.watch_answers(), vec![(id, watched)]);
    assert_eq!(f.node.take_commands(), vec![], "no read round");
}

#[test]
fn a_watch_whose_wait_runs_out_is_answered_after_a_read_round() {
    let mut f = Fixture::serving_leader();
    let id = watching(f.watch("k", 50, StateTag::Free));
    assert_eq!(f.node.next_deadline(), Some(50));
    f.node.tick(49, &mut f.events);
    assert!(!f.node.has_output());
    f.node.tick(50, &mut f.events);
    assert_eq!(
        f.watch_answers(),
        vec![],
        "not before the lead is confirmed"
    );
    assert!(f.node.has_output());
    f.node.handle_tick(f.at(50));
    assert_eq!(f.node.take_commands(), vec![RaftCommand::ConfirmLead]);
    let at = f.at(51);
    f.node.handle_read_confirmed(true, at, 51, &mut f.events);
    let watched = Response::Watched {
        key: key("k"),
        state: KeyState::plain(None, 0),
    };
    assert_eq!(f.watch_answers(), vec![(id, watched)]);
}

#[test]
fn a_leader_that_steps_down_answers_its_watches_moved_and_redirects_new_ones() {
    let mut f = Fixture::serving_leader();
    let id = watching(f.watch("k", 10_000, StateTag::Free));
    let ms = STEP_DOWN.as_millis() as u64 + 1;
    f.metrics(&leading(f.t0), ms);
    let moved = Response::Moved {
        op: Op::Watch,
        key: key("k"),
        addr: None,
    };
    assert_eq!(f.watch_answers(), vec![(id, moved)]);
    assert!(matches!(
        f.watch("k", 10_000, StateTag::Free),
        Served::Redirect(None)
    ));
}
