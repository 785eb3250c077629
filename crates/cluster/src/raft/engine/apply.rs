//! Committed entries, applied: the only door to the node's table. Each
//! command's outcome answers the request this node proposed it for, and a
//! key it frees goes to the next waiter (the rules' hand-over).

use baton_core::{Change, Command, Event, Key, LockRules, Millis, Outcome, Waiter};

use super::{Pending, RaftEngine, Standing};
use crate::raft::types::{NodeId, Proposal};

/// Most grants a node keeps to give back once it serves again (see
/// `RaftEngine::unclaimed`): each is one of its own requests whose entry
/// applied while it did not serve, so only a long run of step-downs with
/// grants in the log fills it.
pub const MAX_UNCLAIMED: usize = 4_096;

/// A committed log entry as the engine sees it (the state machine turns
/// openraft's entries into these).
#[derive(Debug, Clone, Copy)]
pub enum Committed<'a> {
    /// A batch of lock commands one leader proposed, applied in order.
    Proposal(&'a Proposal),
    /// The first entry of `leader`'s `term`: once its own applies, a
    /// leader's table holds every committed change; it serves once its
    /// token floor, right behind, has applied too.
    LeaderBlank { leader: NodeId, term: u64 },
    /// A change of membership: nothing for the locks.
    Membership,
}

impl<H> RaftEngine<H> {
    /// Applies one committed entry at `now`.
    pub fn handle_committed(
        &mut self,
        entry: Committed<'_>,
        now: Millis,
        events: &mut Vec<Event<H>>,
    ) {
        self.saw(now);
        match entry {
            Committed::Proposal(proposal) => {
                let mine = proposal.origin == self.origin;
                for tagged in &proposal.commands {
                    let pending = if mine {
                        self.take_pending(tagged.tag)
                    } else {
                        None
                    };
                    let current = mine && self.of_this_leadership(tagged.tag);
                    let applied = Applied { mine, current };
                    self.apply_command(&tagged.command, pending, applied, now, events);
                }
                // Expiries applied make room for the next: proposed now,
                // they keep the log busy while leases lapse in numbers.
                self.propose_expiries(now);
            }
            Committed::LeaderBlank { leader, term } => {
                if leader == self.me {
                    self.own_entry_applied = Some(term);
                }
            }
            Committed::Membership => {}
        }
        self.give_back_unclaimed();
        self.debug_validate();
    }

    fn apply_command(
        &mut self,
        command: &Command,
        pending: Option<Pending<H>>,
        applied: Applied,
        now: Millis,
        events: &mut Vec<Event<H>>,
    ) {
        let outcome = self.table.apply(command, now);
        self.expiries += u64::from(outcome == Outcome::Expired { existed: true });
        match (command, pending) {
            (Command::Grant { .. } | Command::GrantWith { .. }, Some(Pending::Grant(waiter))) => {
                self.grant_applied(waiter, outcome, applied.current, events)
            }
            (Command::Grant { key, .. } | Command::GrantWith { key, .. }, None) if applied.mine => {
                self.give_back(key, outcome)
            }
            (Command::Release { .. }, Some(Pending::Release { key, reply })) => {
                // No reply: a grant this node gave back itself.
                if let Some(handle) = reply {
                    let answer = Ok(outcome);
                    let change = Change::Release;
                    events.push(Event::Answered {
                        handle,
                        key,
                        change,
                        answer,
                    });
                }
            }
            (Command::Renew { .. }, Some(Pending::Renew { key, reply, .. })) => {
                events.push(self.renew_answered(key, reply, outcome))
            }
            // A value applied is set, whoever serves: the answer stands.
            (Command::SetValue { .. }, Some(Pending::SetValue { key, reply })) => {
                events.push(Event::Answered {
                    handle: reply,
                    key,
                    change: Change::SetValue,
                    answer: Ok(outcome),
                })
            }
            (Command::Expire { key, token }, _) => {
                if let Standing::Leader(leading) = &mut self.standing {
                    leading.expiring.remove(&(key.clone(), *token));
                }
            }
            (_, None) => {}
            (command, Some(_)) => {
                debug_assert!(false, "{command:?} applied for a request of another kind")
            }
        }
        if matches!(
            outcome,
            Outcome::Released | Outcome::Expired { existed: true }
        ) {
            if let Command::Release { key, .. } | Command::Expire { key, .. } = command {
                self.hand_on(key, None, now, events);
            }
        }
    }

    /// The grant proposed for `waiter` applied. Only the serving leader
    /// hands a grant out: its lease counts from this apply, as the
    /// leader's expiry will. A node that applies its own old grant after
    /// losing the lead may do so long after the leader that committed it
    /// started the lease (and granted newer tokens): its client would hold
    /// the key past the leader's expiry. It is sent away instead; the
    /// grant lapses with its lease (found by the simulation).
    fn grant_applied(
        &mut self,
        waiter: Waiter<H>,
        outcome: Outcome,
        current: bool,
        events: &mut Vec<Event<H>>,
    ) {
        if !self.serving() {
            self.give_back(&waiter.key, outcome);
            return events.push(self.moved(waiter));
        }
        let Standing::Leader(leading) = &mut self.standing else {
            debug_assert!(false, "a node that serves leads");
            return events.push(self.moved(waiter));
        };
        let rules = &mut leading.rules;
        let result = if current {
            rules.grant_applied(waiter, outcome)
        } else {
            LockRules::grant_outcome(waiter, outcome)
        };
        match result {
            Ok(granted) => events.push(granted),
            // The key was taken by a grant the rules did not decide: one
            // of an earlier leadership of this node, committed in the
            // same term after it stepped down and came back. The waiter
            // waits its turn again; the key is handed on when freed.
            Err(waiter) => {
                rules.requeue(waiter);
            }
        }
    }

    /// Our own grant whose request was already answered (its client sent
    /// away with `M`): nobody holds it, so the serving leader gives it back
    /// at once, and a node that does not serve as soon as it serves again.
    /// Without the wait the key stayed taken by nobody until the lease ran
    /// out (found by the chaos test: a leader paused with a release and its
    /// hand-over in the log stepped down on resume, then regained the lead
    /// in the same term with the key still held).
    fn give_back(&mut self, key: &Key, outcome: Outcome) {
        let Outcome::Granted { token } = outcome else {
            return;
        };
        if self.unclaimed.len() >= MAX_UNCLAIMED {
            self.unclaimed.pop_front();
        }
        self.unclaimed.push_back((key.clone(), token));
        self.give_back_unclaimed();
    }

    /// On the serving leader, proposes the release of every unclaimed grant
    /// that still holds its key (one that expired or was released since is
    /// gone, and a newer grant of the key has another token).
    pub(super) fn give_back_unclaimed(&mut self) {
        if self.unclaimed.is_empty() || !self.serving() {
            return;
        }
        for (key, token) in std::mem::take(&mut self.unclaimed) {
            if self.table.grant_of(&key, token).is_some() {
                let release = Command::Release {
                    key: key.clone(),
                    token,
                };
                self.propose(release, Pending::Release { key, reply: None });
            }
        }
    }

    /// The answer to a renewal. As for a grant, a node that no longer
    /// serves does not confirm it: the new lease counts from the leader's
    /// apply, which may be long past.
    fn renew_answered(&self, key: Key, handle: H, outcome: Outcome) -> Event<H> {
        let answer = if outcome == Outcome::Renewed && !self.serving() {
            Err(self.not_serving())
        } else {
            Ok(outcome)
        };
        Event::Answered {
            handle,
            key,
            change: Change::Renew,
            answer,
        }
    }

    /// Sends a waiter to the node that serves.
    pub(super) fn moved(&self, waiter: Waiter<H>) -> Event<H> {
        Event::Moved {
            id: waiter.id,
            handle: waiter.handle,
            key: waiter.key,
            to: self.not_serving(),
        }
    }
}

/// Whose command applies: this process's, and of its current leadership.
#[derive(Debug, Clone, Copy)]
struct Applied {
    mine: bool,
    current: bool,
}
