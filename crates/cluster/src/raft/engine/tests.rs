//! Tests of the Raft lock engine: a leader and a follower engine fed the
//! same committed entries, as the log would.

use baton_core::{Acquire, AcquireOutcome, Change, Command, Event, Key, NotServing, Outcome};

use super::{Committed, RaftEngine, RaftRole};

mod exact;
mod flood;
mod kinds;
mod step_down;
mod token_floor;
mod unclaimed;

const PEERS: [&str; 3] = ["n0:1", "n1:1", "n2:1"];

fn key(s: &str) -> Key {
    Key::new(s.as_bytes()).unwrap_or_else(|e| panic!("bad test key {s}: {e}"))
}

/// Node 0's first entry of term 1.
const BLANK: Committed<'static> = Committed::LeaderBlank { leader: 0, term: 1 };

/// Where a client is sent: node `i`, or nobody known.
fn to(i: Option<usize>) -> NotServing {
    NotServing::redirect(i)
}

/// A leader (node 0, term 1) and a follower (node 1) in step.
struct Pair {
    leader: RaftEngine<&'static str>,
    follower: RaftEngine<&'static str>,
    events: Vec<Event<&'static str>>,
}

impl Pair {
    fn new() -> Pair {
        let peers: Vec<String> = PEERS.iter().map(|s| s.to_string()).collect();
        let mut pair = Pair {
            leader: RaftEngine::new(0, peers.clone(), 11),
            follower: RaftEngine::new(1, peers, 22),
            events: Vec::new(),
        };
        pair.leader
            .handle_role(RaftRole::Leader { term: 1 }, 0, &mut pair.events);
        pair.follower
            .handle_role(RaftRole::Follower { leader: Some(0) }, 0, &mut pair.events);
        assert!(
            !pair.leader.serving(),
            "serves before its first entry applies"
        );
        pair.commit(BLANK, 0);
        assert!(pair.leader.serving());
        pair
    }

    fn commit(&mut self, entry: Committed<'_>, now: u64) {
        self.leader.handle_committed(entry, now, &mut self.events);
        let mut ignored = Vec::new();
        self.follower.handle_committed(entry, now, &mut ignored);
        assert!(ignored.is_empty(), "a follower answers nobody: {ignored:?}");
    }

    /// A client's plain acquire of `k` at the leader.
    fn ask(
        &mut self,
        k: &str,
        wait_ms: u64,
        lease_ms: u64,
        now: u64,
        client: &'static str,
    ) -> Result<AcquireOutcome, NotServing> {
        let acquire = Acquire::plain(key(k), wait_ms, lease_ms);
        self.leader
            .handle_acquire(acquire, now, client, &mut self.events)
    }

    /// Commits whatever the leader proposed, as one entry.
    fn commit_proposals(&mut self, now: u64) -> usize {
        match self.leader.poll_proposal() {
            Some((proposal, _)) => {
                let n = proposal.commands.len();
                self.commit(Committed::Proposal(&proposal), now);
                n
            }
            None => 0,
        }
    }

    /// The late answers given, as (client, change, answer), taken out of
    /// the events with every other event.
    #[allow(clippy::type_complexity)]
    fn answers(&mut self) -> Vec<(&'static str, Change, Result<Outcome, NotServing>)> {
        self.events
            .drain(..)
            .filter_map(|e| match e {
                Event::Answered {
                    handle,
                    change,
                    answer,
                    ..
                } => Some((handle, change, answer)),
                _ => None,
            })
            .collect()
    }

    fn granted(&mut self) -> Vec<(&'static str, u64)> {
        let mut out = Vec::new();
        self.events.retain(|e| match e {
            Event::Granted { handle, token, .. } => {
                out.push((*handle, *token));
                false
            }
            _ => true,
        });
        out
    }
}

#[test]
fn a_grant_exists_only_once_committed_and_every_node_has_it() {
    let mut p = Pair::new();
    let out = p.ask("a", 0, 1_000, 10, "c1");
    assert!(matches!(out, Ok(AcquireOutcome::Queued { .. })));
    assert!(p.granted().is_empty());
    assert_eq!(p.leader.table().len(), 0);
    assert_eq!(p.commit_proposals(10), 1);
    assert_eq!(p.granted(), vec![("c1", 1)]);
    assert_eq!(
        p.follower.table().holder(&key("a")).map(|h| h.token),
        Some(1)
    );
    assert_eq!(p.follower.table(), p.leader.table());
}

#[test]
fn waiters_get_the_key_in_order_as_releases_commit() {
    let mut p = Pair::new();
    for client in ["c1", "c2", "c3"] {
        let _ = p.ask("a", 0, 1_000, 0, client);
    }
    // Only one grant of a key is ever on its way.
    assert_eq!(p.commit_proposals(0), 1);
    assert_eq!(p.granted(), vec![("c1", 1)]);
    assert_eq!(p.commit_proposals(0), 0);
    // The release alone (the old API, without the hand-over behind it):
    // the next grant is proposed when the release applies.
    assert_eq!(
        p.leader.propose_release_alone(&key("a"), 1, Some("c1")),
        Ok(None)
    );
    assert_eq!(p.commit_proposals(1), 1);
    assert_eq!(
        p.answers(),
        vec![("c1", Change::Release, Ok(Outcome::Released))]
    );
    assert_eq!(p.commit_proposals(1), 1);
    assert_eq!(p.granted(), vec![("c2", 2)]);
}

#[test]
fn a_release_with_a_wrong_token_is_refused_without_the_log() {
    let mut p = Pair::new();
    let _ = p.ask("a", 0, 1_000, 0, "c1");
    p.commit_proposals(0);
    assert_eq!(
        p.leader
            .handle_release(&key("a"), 7, Some("c1"), 0, &mut p.events),
        Ok(Some(Outcome::NotFound))
    );
    assert_eq!(
        p.leader
            .handle_renew(&key("b"), 1, 5, "c1", 0, &mut p.events),
        Ok(Some(Outcome::NotFound))
    );
    assert!(!p.leader.has_output());
}

#[test]
fn leases_end_only_by_a_committed_expiry_the_leader_proposes() {
    let mut p = Pair::new();
    let _ = p.ask("a", 0, 100, 0, "c1");
    p.commit_proposals(0);
    assert_eq!(p.granted(), vec![("c1", 1)]);
    let _ = p.ask("a", 0, 100, 5, "c2");
    assert_eq!(p.leader.poll_timeout(), Some(100));
    // A follower proposes nothing and arms nothing for leases.
    assert_eq!(p.follower.poll_timeout(), None);
    p.leader.handle_tick(99, &mut p.events);
    assert!(!p.leader.has_output());
    p.leader.handle_tick(100, &mut p.events);
    // Proposed once, however often the timer fires before it commits.
    p.leader.handle_tick(150, &mut p.events);
    assert_eq!(p.leader.poll_timeout(), None);
    assert_eq!(p.commit_proposals(150), 1);
    assert!(p.follower.table().holder(&key("a")).is_none());
    assert_eq!(p.commit_proposals(150), 1);
    assert_eq!(p.granted(), vec![("c2", 2)]);
}

#[test]
fn a_late_expiry_spares_a_newer_grant() {
    let mut p = Pair::new();
    let _ = p.ask("a", 0, 10, 0, "c1");
    p.commit_proposals(0);
    p.leader.handle_tick(10, &mut p.events);
    let (expiry, _) = p
        .leader
        .poll_proposal()
        .unwrap_or_else(|| panic!("no expiry"));
    p.commit(Committed::Proposal(&expiry), 10);
    let _ = p.ask("a", 0, 10, 10, "c2");
    p.commit_proposals(10);
    assert_eq!(p.granted(), vec![("c1", 1), ("c2", 2)]);
    // The same expiry applied again (a duplicate) changes nothing.
    p.commit(Committed::Proposal(&expiry), 11);
    assert_eq!(
        p.follower.table().holder(&key("a")).map(|h| h.token),
        Some(2)
    );
}

#[test]
fn followers_and_candidates_redirect() {
    let mut p = Pair::new();
    let out = p
        .follower
        .handle_acquire(Acquire::plain(key("a"), 0, 10), 0, "c1", &mut p.events);
    assert_eq!(out, Err(to(Some(0))));
    p.follower
        .handle_role(RaftRole::Candidate, 0, &mut p.events);
    let refused = p
        .follower
        .handle_release(&key("a"), 1, Some("c1"), 0, &mut p.events);
    assert_eq!(refused, Err(to(None)));
}

#[test]
fn losing_the_lead_sends_waiters_and_pending_requests_to_the_new_leader() {
    let mut p = Pair::new();
    let _ = p.ask("a", 0, 1_000, 0, "c1");
    p.commit_proposals(0);
    let _ = p.ask("a", 0, 1_000, 0, "c2");
    let _ = p.ask("b", 0, 1_000, 0, "c3");
    let release = p
        .leader
        .handle_release(&key("a"), 1, Some("c1"), 0, &mut p.events);
    assert_eq!(release, Ok(None));
    p.events.clear();
    p.leader
        .handle_role(RaftRole::Follower { leader: Some(2) }, 0, &mut p.events);
    let to = to(Some(2));
    let mut moved: Vec<_> = p
        .events
        .drain(..)
        .map(|e| match e {
            Event::Moved { handle, to, .. } => (handle, None, to),
            Event::Answered {
                handle,
                change,
                answer: Err(to),
                ..
            } => (handle, Some(change), to),
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    moved.sort_by_key(|(handle, _, _)| *handle);
    assert_eq!(
        moved,
        vec![
            ("c1", Some(Change::Release), to),
            ("c2", None, to),
            ("c3", None, to)
        ]
    );
    assert!(!p.leader.has_output());
    assert_eq!(p.leader.waiter_count(), 0);
}

#[test]
fn an_own_grant_nobody_waits_for_is_given_back() {
    let mut p = Pair::new();
    let _ = p.ask("a", 0, 1_000, 0, "c1");
    let (grant, tags) = p
        .leader
        .poll_proposal()
        .unwrap_or_else(|| panic!("no grant"));
    // The proposal failed as far as the leader knew, but the entry made it.
    p.leader
        .handle_proposal_failed(&tags, None, 0, &mut p.events);
    p.events.clear();
    p.commit(Committed::Proposal(&grant), 0);
    assert!(p.granted().is_empty());
    assert_eq!(p.commit_proposals(0), 1);
    assert!(p.follower.table().is_empty());
}

#[test]
fn waiters_time_out_on_the_leader() {
    let mut p = Pair::new();
    let _ = p.ask("a", 0, 1_000, 0, "c1");
    p.commit_proposals(0);
    let _ = p.ask("a", 50, 1_000, 0, "c2");
    assert_eq!(p.leader.poll_timeout(), Some(50));
    p.leader.handle_tick(50, &mut p.events);
    assert!(matches!(
        p.events.last(),
        Some(Event::TimedOut { handle: "c2", .. })
    ));
}

#[test]
fn a_restored_snapshot_keeps_locks_and_tokens() {
    let mut p = Pair::new();
    for k in ["a", "b"] {
        let _ = p.ask(k, 0, 1_000, 0, "c");
    }
    p.commit_proposals(0);
    let snapshot = p.leader.snapshot(100);
    let mut fresh: RaftEngine<&str> = RaftEngine::new(2, Vec::new(), 33);
    fresh.handle_snapshot(&snapshot, 5_000, &mut Vec::new());
    assert_eq!(fresh.table().last_token(), 2);
    assert_eq!(
        fresh.table().holder(&key("b")).map(|h| h.expires_at),
        Some(5_900)
    );
}

#[test]
fn requests_in_the_log_when_the_lead_is_lost_get_their_real_outcome_but_no_late_grant() {
    let mut p = Pair::new();
    let _ = p.ask("a", 0, 1_000, 0, "c1");
    p.commit_proposals(0);
    p.events.clear();
    // Handed to the log, then the lead is lost before the entry applies.
    let release = p
        .leader
        .handle_release(&key("a"), 1, Some("c1"), 5, &mut p.events);
    assert_eq!(release, Ok(None));
    let _ = p.ask("b", 0, 1_000, 5, "c2");
    let (in_the_log, _) = p
        .leader
        .poll_proposal()
        .unwrap_or_else(|| panic!("a proposal"));
    p.leader
        .handle_role(RaftRole::Follower { leader: Some(2) }, 10, &mut p.events);
    assert!(p.events.is_empty(), "answered too early: {:?}", p.events);
    // The next leader commits the entry: the release gets what happened;
    // the grant is not handed out by a node that no longer leads (its
    // lease began at the leader's apply, maybe long before), so its client
    // is sent to the leader.
    p.commit(Committed::Proposal(&in_the_log), 20);
    let mut answers: Vec<String> = p
        .events
        .drain(..)
        .map(|e| match e {
            Event::Answered { handle, answer, .. } => format!("{handle} {answer:?}"),
            Event::Moved { handle, to, .. } => format!("{handle} moved to {to:?}"),
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    answers.sort();
    assert_eq!(answers.len(), 2, "{answers:?}");
    assert_eq!(answers[0], "c1 Ok(Released)");
    assert_eq!(answers[1], format!("c2 moved to {:?}", to(Some(2))));
}

#[test]
fn requests_lost_with_the_leaders_log_tail_are_redirected_after_a_while() {
    let mut p = Pair::new();
    let _ = p.ask("a", 0, 1_000, 0, "c1");
    let _lost = p.leader.poll_proposal();
    p.leader
        .handle_role(RaftRole::Follower { leader: Some(2) }, 10, &mut p.events);
    assert!(p.events.is_empty());
    let deadline = p
        .leader
        .poll_timeout()
        .unwrap_or_else(|| panic!("a deadline"));
    p.leader.handle_tick(deadline - 1, &mut p.events);
    assert!(p.events.is_empty());
    p.leader.handle_tick(deadline, &mut p.events);
    match p.events.as_slice() {
        [Event::Moved { handle, to, .. }] => {
            assert_eq!(*handle, "c1");
            assert_eq!(*to, NotServing::redirect(Some(2)));
        }
        other => panic!("expected one redirect, got {other:?}"),
    }
}

#[test]
fn a_release_and_the_next_waiters_grant_share_one_entry() {
    let mut p = Pair::new();
    let _ = p.ask("a", 0, 1_000, 0, "c1");
    p.commit_proposals(0);
    let _ = p.ask("a", 0, 1_000, 1, "c2");
    assert_eq!(p.commit_proposals(1), 0, "c2 waits: the key is held");
    p.events.clear();
    assert_eq!(
        p.leader
            .handle_release(&key("a"), 1, Some("c1"), 2, &mut p.events),
        Ok(None)
    );
    assert_eq!(p.commit_proposals(2), 2, "release and grant in one entry");
    let mut answers: Vec<String> = p
        .events
        .drain(..)
        .map(|e| match e {
            Event::Answered { handle, answer, .. } => format!("{handle} {answer:?}"),
            Event::Granted { handle, token, .. } => format!("{handle} granted {token}"),
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    answers.sort();
    assert_eq!(answers[0], "c1 Ok(Released)");
    assert_eq!(answers[1], "c2 granted 2");
    assert_eq!(
        p.follower.table().holder(&key("a")).map(|h| h.token),
        Some(2)
    );
}

#[test]
fn a_grant_behind_a_release_that_lost_to_an_expiry_still_lands() {
    let mut p = held_until_100_with_a_waiter();
    // The lease runs out: the leader proposes the expiry first...
    p.leader.handle_tick(100, &mut p.events);
    let (expiry, _) = p
        .leader
        .poll_proposal()
        .unwrap_or_else(|| panic!("an expiry"));
    // ...and the holder's release, received just in time but handled
    // after the tick, comes right behind it with c2's grant.
    assert_eq!(
        p.leader
            .handle_release(&key("a"), 1, Some("c1"), 99, &mut p.events),
        Ok(None)
    );
    p.events.clear();
    p.commit(Committed::Proposal(&expiry), 101);
    p.commit_proposals(101);
    let granted = p.granted();
    assert_eq!(granted, vec![("c2", 2)]);
    assert_eq!(p.leader.table().holder(&key("a")).map(|h| h.token), Some(2));
}

/// A renewal sent before its lease ran out but committed after (a stalled
/// leader, a slow majority) must not be undone by an expiry proposed behind
/// it: the client was told `K` (the chaos test saw the renewal answered
/// `K`, then the release `N R`).
#[test]
fn an_expiry_waits_for_a_renewal_already_in_the_log() {
    let mut p = Pair::new();
    let _ = p.ask("a", 0, 100, 0, "c1");
    p.commit_proposals(0);
    assert_eq!(p.granted(), vec![("c1", 1)]);
    assert!(matches!(
        p.leader
            .handle_renew(&key("a"), 1, 100, "c1", 0, &mut p.events),
        Ok(None)
    ));
    let (renewal, _) = p
        .leader
        .poll_proposal()
        .unwrap_or_else(|| panic!("no renewal"));
    // The lease runs out while the renewal waits for its commit.
    p.leader.handle_tick(120, &mut p.events);
    assert!(
        !p.leader.has_output(),
        "an expiry proposed behind a renewal"
    );
    assert!(p.leader.poll_timeout().is_none_or(|d| d > 120));
    p.commit(Committed::Proposal(&renewal), 130);
    p.leader.handle_tick(200, &mut p.events);
    assert!(!p.leader.has_output());
    assert_eq!(
        p.follower.table().holder(&key("a")).map(|h| h.token),
        Some(1)
    );
    // Once the renewed lease runs out its expiry is proposed; a renewal
    // sent now finds the lease ended: refused at once, nothing proposed.
    p.leader.handle_tick(230, &mut p.events);
    assert!(p.leader.has_output());
    let _ = p.leader.poll_proposal();
    assert_eq!(
        p.leader
            .handle_renew(&key("a"), 1, 100, "c1", 230, &mut p.events),
        Ok(Some(Outcome::NotFound))
    );
    assert!(!p.leader.has_output());
}

/// A key held by c1 (token 1, lease ending at 100) with c2 waiting.
fn held_until_100_with_a_waiter() -> Pair {
    let mut p = Pair::new();
    let _ = p.ask("a", 0, 100, 0, "c1");
    p.commit_proposals(0);
    let _ = p.ask("a", 0, 50, 0, "c2");
    assert_eq!(p.granted(), vec![("c1", 1)]);
    p
}

/// The leader decided the lease lapsed: its one entry is the expiry and
/// the next waiter's grant, and every node applies the same.
fn check_lapsed_and_handed_on(p: &mut Pair, at: u64) {
    let (entry, _) = p
        .leader
        .poll_proposal()
        .unwrap_or_else(|| panic!("nothing proposed"));
    let commands: Vec<Command> = entry.commands.iter().map(|t| t.command.clone()).collect();
    let expire = Command::Expire {
        key: key("a"),
        token: 1,
    };
    let grant = Command::Grant {
        key: key("a"),
        lease_ms: 50,
    };
    assert_eq!(commands, vec![expire, grant]);
    // The follower applies it later, by its own clock: the same table.
    p.leader
        .handle_committed(Committed::Proposal(&entry), at, &mut p.events);
    let mut ignored = Vec::new();
    p.follower
        .handle_committed(Committed::Proposal(&entry), at + 40, &mut ignored);
    assert_eq!(p.granted(), vec![("c2", 2)]);
    for node in [&p.leader, &p.follower] {
        assert_eq!(node.table().holder(&key("a")).map(|h| h.token), Some(2));
        assert_eq!(node.table().len(), 1);
    }
    assert!(p.answers().is_empty(), "answered at once, not again");
}

/// A renewal that reaches the leader once the lease has ended, before the
/// tick proposed its expiry, is refused; the leader proposes the expiry
/// and the hand-over instead of a renewal a follower would apply too.
#[test]
fn a_renewal_past_the_lease_end_is_refused_and_the_key_handed_on() {
    let mut p = held_until_100_with_a_waiter();
    assert_eq!(
        p.leader
            .handle_renew(&key("a"), 1, 1_000, "c1", 100, &mut p.events),
        Ok(Some(Outcome::NotFound))
    );
    check_lapsed_and_handed_on(&mut p, 100);
}

#[test]
fn a_release_past_the_lease_end_is_refused_and_the_key_handed_on() {
    let mut p = held_until_100_with_a_waiter();
    assert_eq!(
        p.leader
            .handle_release(&key("a"), 1, Some("c1"), 101, &mut p.events),
        Ok(Some(Outcome::NotFound))
    );
    check_lapsed_and_handed_on(&mut p, 101);
    // The tick has nothing left to expire.
    p.leader.handle_tick(101, &mut p.events);
    assert!(!p.leader.has_output());
}

#[test]
fn a_value_set_past_the_lease_end_is_refused_and_the_key_handed_on() {
    let mut p = held_until_100_with_a_waiter();
    let set = p
        .leader
        .handle_set_value(&key("a"), 1, None, "c1", 150, &mut p.events);
    assert_eq!(set, Ok(Some(Outcome::NotFound)));
    check_lapsed_and_handed_on(&mut p, 150);
}

/// Just before its end the lease is renewed, and the renewal applies on
/// every node even if it commits after the old end: the leader decided.
#[test]
fn a_renewal_just_in_time_is_proposed_and_applies_after_the_end() {
    let mut p = held_until_100_with_a_waiter();
    assert_eq!(
        p.leader
            .handle_renew(&key("a"), 1, 1_000, "c1", 99, &mut p.events),
        Ok(None)
    );
    // A second request past the end waits behind that renewal: it is not
    // lapsed, since the renewal in the log was decided in time.
    assert_eq!(
        p.leader
            .handle_renew(&key("a"), 1, 1_000, "c1", 100, &mut p.events),
        Ok(None)
    );
    p.leader.handle_tick(100, &mut p.events);
    p.commit_proposals(105);
    assert_eq!(
        p.answers(),
        vec![
            ("c1", Change::Renew, Ok(Outcome::Renewed)),
            ("c1", Change::Renew, Ok(Outcome::Renewed)),
        ]
    );
    for node in [&p.leader, &p.follower] {
        assert_eq!(
            node.table().grant_of(&key("a"), 1).map(|h| h.expires_at),
            Some(1_105)
        );
    }
}
