//! Token floors of a priority cluster: which tokens each node may grant.
//!
//! The token space is cut into blocks of [`BLOCK`] tokens, dealt out to the
//! nodes in turn: block `k` (the tokens `t` with `(t - 1) / BLOCK == k`)
//! belongs to node `k mod n`. A node grants only tokens of its own blocks:
//! before anything that can grant, the active checks that what is left of
//! its current block covers every grant the call can make, and otherwise
//! raises its floor to the start of its next block. So two nodes can never
//! grant the same token, whatever each of them knows or believes (both
//! sides of a split, two actives after a heal); one node never grants a
//! token twice because its floor only rises. docs/cluster.md has the whole
//! argument.

use baton_core::Token;

use super::messages::NodeIndex;

/// Tokens in one block: 16 ms of the wall-clock floor, so that rounding a
/// floor up to the node's next block costs little of the wall-clock
/// argument; large against the grants one call can make (at most one per
/// queued waiter, plus one, see `MAX_WAITERS`).
pub const BLOCK: Token = 1 << 24;

/// An active queues at most this many acquires: one call (a tick, a
/// release) grants at most one token per waiter plus one, so a fresh block
/// always has room for any call.
pub const MAX_WAITERS: usize = (BLOCK / 2) as usize;

/// The blocks of one node among `nodes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenBlocks {
    me: u64,
    nodes: u64,
}

impl TokenBlocks {
    pub fn new(me: NodeIndex, nodes: usize) -> TokenBlocks {
        debug_assert!(me < nodes, "node {me} of {nodes}");
        TokenBlocks {
            me: me as u64,
            nodes: nodes.max(1) as u64,
        }
    }

    /// Whether the grant after `last` (token `last + 1`) is one of ours.
    fn owns_next(&self, last: Token) -> bool {
        (last / BLOCK) % self.nodes == self.me
    }

    /// How many grants can follow `last` inside our current block (0 when
    /// the next token is not ours).
    pub fn room(&self, last: Token) -> u64 {
        if !self.owns_next(last) {
            return 0;
        }
        // The last token of block k is (k + 1) * BLOCK.
        let end = (last / BLOCK).saturating_add(1).saturating_mul(BLOCK);
        end.saturating_sub(last)
    }

    /// The start of our first block after the one `last` lies in: a floor
    /// with a whole block of room. `Token::MAX` (no grant possible) past
    /// the end of the space.
    pub fn next_block_start(&self, last: Token) -> Token {
        let block = last / BLOCK;
        let after = block + 1;
        let ahead = (self.me + self.nodes - after % self.nodes) % self.nodes;
        after
            .checked_add(ahead)
            .and_then(|k| k.checked_mul(BLOCK))
            .unwrap_or(Token::MAX)
    }

    /// The wall-clock floor `wall` (`ms << 20`) moved into our blocks
    /// without losing its resolution: our own tokens, in order, are our
    /// "positions"; this is the token at position `wall / n + BLOCK`. It is
    /// at least `wall`, and a millisecond later it is at least `2^20 / n`
    /// positions higher, so a node that knows nothing still starts above
    /// what it granted a moment before (docs/cluster.md, part 3).
    pub fn wall_floor(&self, wall: Token) -> Token {
        let position = (wall / self.nodes).saturating_add(BLOCK);
        self.token_at(position)
    }

    /// Our token at `position` (0-based) among our own, in order, less one:
    /// a floor from which the next grant is that token.
    fn token_at(&self, position: u64) -> Token {
        let (block, offset) = (position / BLOCK, position % BLOCK);
        block
            .checked_mul(self.nodes)
            .and_then(|k| k.checked_add(self.me))
            .and_then(|k| k.checked_mul(BLOCK))
            .and_then(|start| start.checked_add(offset))
            .unwrap_or(Token::MAX)
    }

    /// The lowest floor at or above `wanted` from which our next grant is
    /// ours.
    pub fn floor_at_or_above(&self, wanted: Token) -> Token {
        if self.owns_next(wanted) {
            wanted
        } else {
            self.next_block_start(wanted)
        }
    }

    /// The floor to raise `last` to so that `grants` more grants stay in
    /// one of our blocks; `None` if `last` already leaves that room.
    pub fn floor_for(&self, last: Token, grants: u64) -> Option<Token> {
        if self.room(last) >= grants {
            return None;
        }
        let start = self.next_block_start(last);
        debug_assert!(grants <= BLOCK, "{grants} grants cannot fit in a block");
        Some(start)
    }

    /// Whether token `t` is one this node may grant.
    pub fn owns(&self, token: Token) -> bool {
        token > 0 && self.owns_next(token - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_token_has_exactly_one_owner() {
        for nodes in 1..=5 {
            let blocks: Vec<_> = (0..nodes).map(|i| TokenBlocks::new(i, nodes)).collect();
            for t in [1, 2, BLOCK - 1, BLOCK, BLOCK + 1, 7 * BLOCK, 7 * BLOCK + 1] {
                let owners = blocks.iter().filter(|b| b.owns(t)).count();
                assert_eq!(owners, 1, "token {t} among {nodes}");
            }
        }
    }

    #[test]
    fn grants_within_the_room_stay_in_own_blocks() {
        let b = TokenBlocks::new(2, 3);
        for last in [
            0,
            5,
            2 * BLOCK - 3,
            2 * BLOCK,
            3 * BLOCK - 1,
            9 * BLOCK + 17,
        ] {
            let floor = b.floor_for(last, 4).unwrap_or(last);
            assert!(floor >= last);
            for g in 1..=4 {
                assert!(b.owns(floor + g), "from {last}: floor {floor} + {g}");
            }
        }
    }

    #[test]
    fn the_next_block_is_the_nodes_own_and_above() {
        for nodes in 1..=4 {
            for me in 0..nodes {
                let b = TokenBlocks::new(me, nodes);
                for last in [0, 1, BLOCK, 5 * BLOCK + 3] {
                    let start = b.next_block_start(last);
                    assert!(start > last);
                    assert_eq!(b.room(start), BLOCK);
                    assert!(b.owns(start + 1) && b.owns(start + BLOCK));
                    assert_eq!(b.floor_at_or_above(start), start);
                }
            }
        }
    }

    #[test]
    fn the_wall_floor_is_above_the_clock_ours_and_rises_every_millisecond() {
        for nodes in 1..=5 {
            for me in 0..nodes {
                let b = TokenBlocks::new(me, nodes);
                let mut before = 0;
                for ms in [1_700_000_000_000u64, 1_700_000_000_001, 1_700_000_000_017] {
                    for wall in [ms << 20, (ms << 20) + 12_345] {
                        let floor = b.wall_floor(wall);
                        assert!(floor >= wall, "{floor} below {wall}");
                        assert!(floor > before);
                        assert!(b.room(floor) >= 1 && b.owns(floor + 1));
                        before = floor;
                    }
                }
                let a = b.wall_floor(1_700_000_000_000 << 20);
                let later = b.wall_floor(1_700_000_000_001 << 20);
                assert!(later - a >= (1 << 20) / nodes as u64);
            }
        }
    }

    #[test]
    fn the_end_of_the_space_saturates() {
        let b = TokenBlocks::new(1, 3);
        assert_eq!(b.next_block_start(Token::MAX - 1), Token::MAX);
        assert!(b.room(Token::MAX) <= 1);
    }
}
