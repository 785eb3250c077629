//! The lock logic of one Raft node, without I/O: the lock table as the
//! committed log builds it, and on the leader the FIFO waiters and the
//! commands it proposes for them.
//!
//! Nothing changes the table but [`RaftEngine::handle_committed`]. A leader turns
//! requests into tagged commands in its outbox (the shell proposes them as
//! log entries) and answers each request when its command comes back
//! applied: a grant's token only exists once the log has assigned it.
//! Lease expiry, too, is a command the leader proposes; followers only keep
//! the time each lease ends, from their own clock, for the day they lead.

use std::collections::{HashMap, HashSet, VecDeque};

use baton_core::{
    Command, Event, Key, KeyState, LockRules, LockTable, Millis, NodeIndex, NotServing, Quota,
    TableSnapshot, Token, Waiter,
};

use super::members::Members;
use super::types::{NodeId, Proposal, Tagged};

mod apply;
mod client;
mod expiry;
mod leadership;
mod token_floor;
mod validate;

#[cfg(test)]
mod tests;

pub use apply::{Committed, MAX_UNCLAIMED};
pub use expiry::{EXPIRY_RETRY_MS, MAX_EXPIRIES_IN_FLIGHT};
pub use leadership::{ANSWER_BUDGET_MS, ORPHAN_WAIT_MS};

/// Most commands one log entry carries; more wait for the next entry.
pub const MAX_BATCH: usize = 1024;

/// The engine's event: the core's, shared by every engine (the old name).
pub type EngineEvent<H> = Event<H>;

/// What the node is in the Raft group, as far as serving goes (what the
/// shell reads from openraft and tells [`RaftEngine::handle_role`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RaftRole {
    /// Follows `leader` (or no one known yet: a learner or a fresh node).
    Follower {
        leader: Option<NodeId>,
    },
    Candidate,
    /// Leads `term`. It serves only once it has applied its own first entry
    /// of the term (from then on its table holds every committed change)
    /// and its token floor (see `token_floor`).
    Leader {
        term: u64,
    },
}

/// A request whose command is in the log's hands.
#[derive(Debug)]
enum Pending<H> {
    Grant(Waiter<H>),
    Release { key: Key, reply: Option<H> },
    Renew { key: Key, token: Token, reply: H },
    SetValue { key: Key, reply: H },
    Expire { key: Key, token: Token },
}

/// What only a leader has: its waiters and the rules' hand-overs on their
/// way, the expiries it proposed, and the commands not yet proposed. All
/// of it ends with the leadership.
#[derive(Debug)]
struct Leading<H> {
    term: u64,
    /// The first tag of this leadership: requests with lower tags are of
    /// an earlier one (orphans), whose grants these rules did not decide.
    first_tag: u64,
    rules: LockRules<H>,
    /// Expiries proposed and not yet applied.
    expiring: HashSet<(Key, Token)>,
    /// No expiry is proposed before this (the log refused one).
    expiries_resume_at: Millis,
    outbox: Vec<Tagged>,
    /// The wall-clock floor this leadership's grants start above (`None`
    /// until chosen): it serves once its table is there.
    token_floor: Option<Token>,
    /// The tag of the floor's proposal while it is on its way.
    floor_tag: Option<u64>,
}

impl<H> Leading<H> {
    fn new(term: u64, first_tag: u64, quota: Quota) -> Leading<H> {
        let mut rules = LockRules::new();
        rules.set_quota(quota);
        Leading {
            term,
            first_tag,
            rules,
            expiring: HashSet::new(),
            expiries_resume_at: 0,
            outbox: Vec::new(),
            token_floor: None,
            floor_tag: None,
        }
    }
}

/// The node's role, with what belongs to it.
#[derive(Debug)]
enum Standing<H> {
    Follower {
        leader: Option<NodeId>,
    },
    Candidate,
    /// Boxed: a follower's standing stays small.
    Leader(Box<Leading<H>>),
}

/// One node's lock engine. `H` answers a client (a connection's mailbox).
///
/// Inputs are `handle_*` and may push [`Event`]s; the output for the log
/// is [`RaftEngine::poll_proposal`].
#[derive(Debug)]
pub struct RaftEngine<H> {
    me: NodeId,
    /// The cluster's nodes and voters, as the log last said (the seeds
    /// until it says anything): where to redirect clients.
    members: Members,
    /// This node's address as the latest membership that named it said:
    /// its name in the log, also once it is removed.
    own_addr: Option<String>,
    /// This process's name in the tags of the entries it proposes.
    origin: u64,
    table: LockTable,
    standing: Standing<H>,
    /// The last term whose first entry this node applied as its leader. A
    /// fact of the log, not of the role: the entry may apply before the
    /// shell reports the lead, and a leader that steps down and regains
    /// the lead in the same term has it still.
    own_entry_applied: Option<u64>,
    next_tag: u64,
    pending: HashMap<u64, Pending<H>>,
    /// One (deadline, bound) per leadership that ended with requests in
    /// the log's hands, oldest first: until its deadline, those with a tag
    /// below its bound wait for their entry (the next leader may well
    /// commit it); then they are redirected. A group of its own each, so
    /// that a leader stepping down again does not push back the wait of
    /// the requests of its earlier lead. At most [`MAX_ORPHAN_GROUPS`].
    orphans: VecDeque<(Millis, u64)>,
    orphan_wait_ms: Millis,
    /// Every client's request in the log's hands, with when it must be
    /// answered (proposed plus [`ANSWER_BUDGET_MS`]), oldest first; those
    /// already answered are dropped from the front.
    answer_by: VecDeque<(Millis, u64)>,
    /// Grants with renewals pending, and how many: the expiry of such a
    /// grant waits for them (see `handle_tick`).
    renewing: HashMap<(Key, Token), u32>,
    /// The latest `now` an input brought (for the callers of the old
    /// `proposal_failed`, which brings none).
    latest_now: Millis,
    /// The caps each leadership's rules start with.
    quota: Quota,
    /// Committed expiries that ended a grant, applied here (for the metrics).
    expiries: u64,
    /// Grants this node proposed that applied while it did not serve, their
    /// clients sent away: nobody holds them, so they are given back as soon
    /// as it serves again rather than left to their leases. Oldest first,
    /// at most [`MAX_UNCLAIMED`]; past that the oldest lapses with its lease.
    unclaimed: VecDeque<(Key, Token)>,
    /// The wall clock (ms since 1970) when `now` read 0: a leader's token
    /// floor (see `token_floor`).
    wall_at_zero: u64,
    /// The token floor this node chose as leader of a term, with the term.
    term_floor: Option<(u64, Token)>,
}

impl<H> RaftEngine<H> {
    /// `origin` must differ between two runs of the same node; `peers`
    /// are the seeds (empty for a node that joins a running cluster).
    pub fn new(me: NodeId, peers: Vec<String>, origin: u64) -> RaftEngine<H> {
        let members = Members::seeded(&peers);
        RaftEngine {
            me,
            own_addr: members.addr_of(me).map(str::to_string),
            members,
            origin,
            table: LockTable::new(),
            standing: Standing::Follower { leader: None },
            own_entry_applied: None,
            next_tag: 1,
            pending: HashMap::new(),
            orphans: VecDeque::new(),
            orphan_wait_ms: ORPHAN_WAIT_MS,
            answer_by: VecDeque::new(),
            renewing: HashMap::new(),
            latest_now: 0,
            quota: Quota::default(),
            expiries: 0,
            unclaimed: VecDeque::new(),
            wall_at_zero: 0,
            term_floor: None,
        }
    }

    /// The caps on grants and waiters, for this leadership and the next.
    pub fn set_quota(&mut self, quota: Quota) {
        self.quota = quota;
        if let Standing::Leader(leading) = &mut self.standing {
            leading.rules.set_quota(quota);
        }
    }

    pub fn table(&self) -> &LockTable {
        &self.table
    }

    /// Grants ended by a committed expiry, as applied on this node.
    pub fn expiries(&self) -> u64 {
        self.expiries
    }

    pub fn role(&self) -> RaftRole {
        match &self.standing {
            Standing::Follower { leader } => RaftRole::Follower { leader: *leader },
            Standing::Candidate => RaftRole::Candidate,
            Standing::Leader(leading) => RaftRole::Leader { term: leading.term },
        }
    }

    pub fn me(&self) -> NodeId {
        self.me
    }

    pub fn members(&self) -> &Members {
        &self.members
    }

    /// The membership the log holds now (a committed membership entry, or
    /// one still in joint consensus), seen at `now`.
    pub fn handle_members(&mut self, members: Members, now: Millis) {
        self.saw(now);
        if let Some(addr) = members.addr_of(self.me) {
            self.own_addr = Some(addr.to_string());
        }
        let before = std::mem::replace(&mut self.members, members);
        self.log_leader_named(&before);
    }

    /// The address of node `index` (a node id) in the membership.
    pub fn addr_of(&self, index: NodeIndex) -> Option<String> {
        let id = NodeId::try_from(index).ok()?;
        self.members.addr_of(id).map(str::to_string)
    }

    pub fn waiter_count(&self) -> usize {
        self.leading().map_or(0, |l| l.rules.waiter_count())
    }

    /// Acquires queued on `key`.
    pub fn waiting_on(&self, key: &Key) -> usize {
        self.leading().map_or(0, |l| l.rules.waiting_on(key))
    }

    /// `key`'s live grant and waiters in this node's table at `now`
    /// (linearizable only once the shell confirmed the lead: see `reads`).
    pub fn query(&self, key: &Key, now: Millis) -> KeyState {
        KeyState::of(&self.table, key, self.waiting_on(key), now)
    }

    fn leading(&self) -> Option<&Leading<H>> {
        match &self.standing {
            Standing::Leader(leading) => Some(leading),
            _ => None,
        }
    }

    /// The leadership, if this node serves (leads and has caught up).
    fn serving_mut(&mut self) -> Option<&mut Leading<H>> {
        let last = self.table.last_token();
        match &mut self.standing {
            Standing::Leader(l) if l.caught_up(self.own_entry_applied, last) => Some(l),
            _ => None,
        }
    }

    /// Whether this node is the leader and has caught up: it serves.
    pub fn serving(&self) -> bool {
        let last = self.table.last_token();
        self.leading()
            .is_some_and(|l| l.caught_up(self.own_entry_applied, last))
    }

    /// Where a client should go instead of here: the leader this node
    /// follows, if known.
    pub fn not_serving(&self) -> NotServing {
        let leader = match self.standing {
            Standing::Follower { leader } => leader,
            Standing::Candidate | Standing::Leader(_) => None,
        };
        NotServing::redirect(leader.and_then(|n| usize::try_from(n).ok()))
    }

    /// The address [`RaftEngine::not_serving`] names.
    pub fn redirect_target(&self) -> Option<String> {
        self.not_serving().serving.and_then(|i| self.addr_of(i))
    }

    /// `Ok` while this node serves, else where to go.
    pub fn check_serving(&self) -> Result<(), NotServing> {
        if self.serving() {
            Ok(())
        } else {
            Err(self.not_serving())
        }
    }

    /// Notes the time an input brought.
    fn saw(&mut self, now: Millis) {
        self.latest_now = self.latest_now.max(now);
    }

    /// The tag the next proposal will carry: a read that arrives now
    /// comes after every request proposed before it (see
    /// [`RaftEngine::settled_below`]).
    pub fn next_tag(&self) -> u64 {
        self.next_tag
    }

    /// Whether no client request with a tag below `mark` is still in the
    /// log's hands (each is applied, or answered otherwise): a read taken
    /// at `mark` then sees every write sent before it. Expiries are not
    /// clients' requests and are not waited for.
    pub fn settled_below(&self, mark: u64) -> bool {
        // Tags enter `answer_by` in increasing order; answered ones are
        // dropped from its front, so the scan stops at once in practice.
        let oldest = self.answer_by.iter().map(|&(_, tag)| tag);
        let mut pending = oldest.filter(|tag| self.pending.contains_key(tag));
        pending.next().is_none_or(|tag| tag >= mark)
    }

    /// Whether `tag` was proposed by this node's current leadership.
    fn of_this_leadership(&self, tag: u64) -> bool {
        self.leading().is_some_and(|l| tag >= l.first_tag)
    }

    /// Puts `command` in the leader's outbox, its request pending.
    fn propose(&mut self, command: Command, pending: Pending<H>) {
        let Standing::Leader(leading) = &mut self.standing else {
            debug_assert!(false, "a proposal while not leading: {command:?}");
            return;
        };
        let tag = self.next_tag;
        self.next_tag += 1;
        leading.outbox.push(Tagged { tag, command });
        if let Pending::Renew { key, token, .. } = &pending {
            *self.renewing.entry((key.clone(), *token)).or_default() += 1;
        }
        if !matches!(pending, Pending::Expire { .. }) {
            let deadline = self.latest_now.saturating_add(ANSWER_BUDGET_MS);
            self.answer_by.push_back((deadline, tag));
        }
        self.pending.insert(tag, pending);
    }

    /// The pending request of `tag`, no longer pending.
    fn take_pending(&mut self, tag: u64) -> Option<Pending<H>> {
        let pending = self.pending.remove(&tag)?;
        self.forget_answered();
        if let Pending::Renew { key, token, .. } = &pending {
            let renewed = (key.clone(), *token);
            match self.renewing.get_mut(&renewed) {
                Some(count) if *count > 1 => *count -= 1,
                Some(_) => {
                    self.renewing.remove(&renewed);
                }
                None => debug_assert!(false, "a renewal of {key:?} pending but not counted"),
            }
        }
        Some(pending)
    }

    /// Proposes the grant of `key` to its oldest live waiters while the
    /// rules say the key has room for the next (behind the release of
    /// `token` if given): one waiter for a lock, as many as permits are
    /// free for a semaphore, every shared waiter at the head of the line
    /// for a shared key. They go in the outbox together, so one entry
    /// carries them. Bounded by the key's waiters.
    fn hand_on(
        &mut self,
        key: &Key,
        behind: Option<Token>,
        now: Millis,
        events: &mut Vec<Event<H>>,
    ) {
        while let Some(handover) = self.next_handover(key, behind, now, events) {
            self.propose(handover.command, Pending::Grant(handover.waiter));
        }
    }

    /// The serving leader's next hand-over of `key` (see `hand_on`).
    fn next_handover(
        &mut self,
        key: &Key,
        behind: Option<Token>,
        now: Millis,
        events: &mut Vec<Event<H>>,
    ) -> Option<baton_core::Handover<H>> {
        let serving = self.serving();
        let (Standing::Leader(leading), true) = (&mut self.standing, serving) else {
            return None;
        };
        let rules = &mut leading.rules;
        match behind {
            None => rules.hand_on(&self.table, key, now, events),
            Some(token) => rules.hand_on_behind_release(&self.table, key, token, now, events),
        }
    }

    /// Redirects orphans whose time is up, times out waiters and, on the
    /// serving leader, proposes the expiry of leases that have run out,
    /// soonest first, at most [`MAX_EXPIRIES_IN_FLIGHT`] on their way
    /// (timeouts first, as the rules say).
    pub fn handle_tick(&mut self, now: Millis, events: &mut Vec<Event<H>>) {
        self.saw(now);
        self.settle_orphans(now, events);
        self.answer_overdue(now, events);
        self.give_back_unclaimed();
        if let Standing::Leader(leading) = &mut self.standing {
            leading.rules.time_out(now, events);
        }
        self.propose_expiries(now);
        self.debug_validate();
    }

    /// When [`RaftEngine::handle_tick`] next has something to do.
    pub fn poll_timeout(&self) -> Option<Millis> {
        let orphans = [self.orphans.front(), self.answer_by.front()]
            .into_iter()
            .flatten()
            .map(|&(deadline, _)| deadline)
            .min();
        let lease = self.next_expiry();
        let ours = match self.leading() {
            Some(leading) => leading.rules.next_deadline(lease),
            None => lease,
        };
        match (ours, orphans) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    pub fn has_output(&self) -> bool {
        self.leading().is_some_and(|l| !l.outbox.is_empty())
    }

    /// The next batch of commands to propose as one log entry, with their tags.
    pub fn poll_proposal(&mut self) -> Option<(Proposal, Vec<u64>)> {
        let Standing::Leader(leading) = &mut self.standing else {
            return None;
        };
        if leading.outbox.is_empty() {
            return None;
        }
        let batch = leading.outbox.len().min(MAX_BATCH);
        // Exactly sized: the proposal lives in the log until a snapshot
        // purges it, and a Vec cut from the outbox kept the outbox's whole
        // capacity, most of a leader's memory under a pipelined flood.
        let commands: Vec<Tagged> = leading.outbox.drain(..batch).collect();
        if leading.outbox.is_empty() && leading.outbox.capacity() > 4 * MAX_BATCH {
            leading.outbox = Vec::new();
        }
        let tags = commands.iter().map(|c| c.tag).collect();
        let proposal = Proposal {
            origin: self.origin,
            commands,
        };
        Some((proposal, tags))
    }

    /// A snapshot of the table at `now`.
    pub fn snapshot(&self, now: Millis) -> TableSnapshot {
        self.table.snapshot(now)
    }

    /// Replaces the table with a snapshot's (a snapshot installed from the
    /// leader, or the stored one at start). Grants and expiries on their
    /// way may be in it already, so they are forgotten; a key the snapshot
    /// frees goes to its next waiter.
    pub fn handle_snapshot(
        &mut self,
        snapshot: &TableSnapshot,
        now: Millis,
        events: &mut Vec<Event<H>>,
    ) {
        self.saw(now);
        self.table = LockTable::restore(snapshot, now);
        let mut waited_on = Vec::new();
        if let Standing::Leader(leading) = &mut self.standing {
            leading.rules.forget_grants();
            leading.expiring.clear();
            waited_on = leading.rules.waited_on();
        }
        for key in waited_on {
            self.hand_on(&key, None, now, events);
        }
        // Its last token may bring a leader to its token floor: it serves.
        self.give_back_unclaimed();
        self.debug_validate();
    }
}
