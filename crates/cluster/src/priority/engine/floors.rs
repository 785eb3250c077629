//! Token floors: where an active's next grant starts. Always in this
//! node's own blocks (`token_floor`), above every token it heard of, and
//! keeping up with the wall clock.

use baton_core::{Millis, Token};

use super::super::token_floor::BLOCK;
use super::{wall_floor, PriorityNode, TOKEN_MARGIN};

impl<H> PriorityNode<H> {
    /// The wall-clock floor, in this node's own blocks.
    pub(super) fn own_wall_floor(&self, now: Millis) -> Token {
        self.blocks.wall_floor(wall_floor(self.wall(now)))
    }

    /// A floor above every token a node that knew of `known` may have
    /// granted unrecorded (the margin), and above the wall clock's at
    /// `now`: a restart floor, in this node's own blocks.
    pub(super) fn floor_above_known(&self, known: Token, now: Millis) -> Token {
        self.blocks
            .floor_at_or_above(known.saturating_add(TOKEN_MARGIN))
            .max(self.own_wall_floor(now))
    }

    /// Raises the floor to `wanted` or the first token above it that this
    /// node may grant.
    pub(super) fn raise_floor(&mut self, wanted: Token) {
        let last = self.service.table().last_token();
        let floor = self.blocks.floor_at_or_above(wanted.max(last));
        if floor > last {
            self.service.raise_token_floor(floor);
        }
    }

    /// Before a call that can grant: tokens keep up with the wall clock
    /// (within a block), and what is left of this node's block must cover
    /// every grant the call can make (one per waiter, plus one), or the
    /// floor moves to this node's next block.
    ///
    /// Keeping up with the clock bounds how long tokens granted elsewhere
    /// can stay above ours when we never hear of them (the other side of a
    /// split that died before the heal): at most the margins that side
    /// stacked above its clock floor, a few hundred ms of clock.
    pub(super) fn make_room(&mut self, now: Millis) {
        let clock = self.own_wall_floor(now);
        if clock > self.service.table().last_token().saturating_add(BLOCK) {
            self.raise_floor(clock);
        }
        let grants = self.service.waiter_count() as u64 + 1;
        if let Some(floor) = self
            .blocks
            .floor_for(self.service.table().last_token(), grants)
        {
            self.service.raise_token_floor(floor);
        }
    }
}
