//! Where a leader's tokens start: above the wall clock, as a single node's
//! and a priority cluster's do, decided in the log so that every node
//! computes the same tokens.
//!
//! A new leader puts `RaiseTokenFloor { floor }` first in its outbox, the
//! floor being its wall clock's when it took the lead of the term
//! (`baton_server::token_floor::wall_floor`, the single node's mapping).
//! Every node applies it as any command: `last_token = max(last_token,
//! floor)`, so tokens never fall, whatever the leader's clock says, and a
//! snapshot's last token carries it on.
//! The leader serves only once the floor has applied (or its table was
//! already above it): any grant it proposes then lies behind the floor in
//! the log, whatever order its proposals reach the log in. A floor that
//! did not make it into the log is proposed again at the next role check
//! (`handle_role` runs at every quorum tick) while the node still leads.
//! So a cluster rebuilt from empty data directories starts above every
//! token it issued before, as long as the wall clock did not go back.

use baton_core::{Command, Millis, Token};
use baton_server::token_floor::wall_floor;

use super::{Leading, RaftEngine, Standing};
use crate::raft::types::Tagged;

impl<H> Leading<H> {
    /// Whether this leadership may serve: its own first entry of the term
    /// applied (`own_entry_applied`) and the table's `last_token` at its
    /// token floor.
    pub(super) fn caught_up(&self, own_entry_applied: Option<u64>, last_token: Token) -> bool {
        own_entry_applied == Some(self.term) && self.token_floor.is_some_and(|f| last_token >= f)
    }
}

impl<H> RaftEngine<H> {
    /// The wall clock (ms since 1970) when `now` read 0: how the shell
    /// gives the engine its wall clock (0 unless set: floors near 0).
    pub fn set_wall_at_zero(&mut self, wall_ms: u64) {
        self.wall_at_zero = wall_ms;
    }

    /// The wall-clock floor at `now`.
    fn wall_token_floor(&self, now: Millis) -> Token {
        wall_floor(self.wall_at_zero.saturating_add(now))
    }

    /// On a leader whose floor is neither reached nor on its way: proposes
    /// it, first among its proposals. The floor is the wall clock's at the
    /// term's first leadership of this node; a lead regained in the same
    /// term keeps it (its grants are above it already). Nothing is
    /// proposed if the table is there already (a clock behind).
    pub(super) fn propose_token_floor(&mut self, now: Millis) {
        let wall = self.wall_token_floor(now);
        let last = self.table.last_token();
        let Standing::Leader(leading) = &mut self.standing else {
            return;
        };
        let reached = leading.token_floor.is_some_and(|floor| last >= floor);
        if reached || leading.floor_tag.is_some() {
            return;
        }
        let of_term = self.term_floor.filter(|(term, _)| *term == leading.term);
        let floor = leading
            .token_floor
            .or(of_term.map(|(_, floor)| floor))
            .unwrap_or(wall);
        leading.token_floor = Some(floor);
        self.term_floor = Some((leading.term, floor));
        if last >= floor {
            return;
        }
        let tag = self.next_tag;
        self.next_tag += 1;
        leading.floor_tag = Some(tag);
        let command = Command::RaiseTokenFloor { floor };
        leading.outbox.insert(0, Tagged { tag, command });
    }

    /// The proposals of `tags` did not make it into the log: if this
    /// leadership's floor was among them, it is proposed again at the
    /// next role check.
    pub(super) fn token_floor_failed(&mut self, tags: &[u64]) {
        if let Standing::Leader(leading) = &mut self.standing {
            if leading.floor_tag.is_some_and(|tag| tags.contains(&tag)) {
                leading.floor_tag = None;
            }
        }
    }
}
