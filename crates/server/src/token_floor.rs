//! Where a node's tokens start after a restart: above the wall clock, and
//! above what its data directory says it issued. The same argument as the
//! priority cluster's (docs/cluster.md, "Why tokens keep rising"), for a
//! single node, which is one node in slot 0.

use std::time::{SystemTime, UNIX_EPOCH};

use baton_core::Token;

/// Added to the last token a node knows of when it starts serving: more
/// grants than a node can make unrecorded (between two writes of its data
/// directory, or between its last replicated command and its death in a
/// priority cluster). 2^26 is 67 million grants, a minute of a node
/// granting flat out; it is also only 64 ms of the wall-clock floor, so
/// floors stacked by quick failovers or restarts stay close to the clock
/// and a node that knows nothing soon starts above them again.
pub const TOKEN_MARGIN: Token = 1 << 26;

/// Tokens start above `wall_ms << 20`: that rises by about a million a
/// millisecond, faster than any node grants, so a node that remembers
/// nothing still starts above every token it issued before it stopped,
/// as long as the wall clock did not go back.
pub fn wall_floor(wall_ms: u64) -> Token {
    wall_ms.saturating_mul(1 << 20)
}

/// How far past this node's wall clock a token it is told about (by a
/// peer, or by its own data directory) may lie before it is taken for
/// damage rather than history. Sound nodes stay far below it: restarts and
/// failovers stack at most [`TOKEN_MARGIN`] (64 ms of clock) each above the
/// clock floor; far above it lies 2^64, where no token is left to grant.
/// docs/cluster.md ("Why the priority bound is never reached") has the
/// arithmetic.
pub const CLOCK_ALLOWANCE_MS: u64 = 60 * 60 * 1_000;

/// The highest token a node may believe was issued, at wall time
/// `wall_ms`: the clock floor [`CLOCK_ALLOWANCE_MS`] ahead.
pub fn credible_token_bound(wall_ms: u64) -> Token {
    wall_floor(wall_ms.saturating_add(CLOCK_ALLOWANCE_MS))
}

/// No sound node issues a token this high: the clock floor reaches it in
/// the year 2248, and restarts and failovers add only margins of 64 ms of
/// clock. A saved token at or above it is damage, not history; below it, a
/// saved token above the clock is history (the clock was set back) and the
/// next tokens go above it.
pub const TOKEN_CEILING: Token = 1 << 63;

/// Milliseconds since 1970 by the wall clock (0 if it reads before 1970).
pub fn wall_clock_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The floor of a node starting at wall time `wall_ms` whose data
/// directory recorded `saved` as its last token (`None`: no data
/// directory, or a fresh one).
pub fn restart_floor(wall_ms: u64, saved: Option<Token>) -> Token {
    let remembered = saved.map_or(0, |t| t.saturating_add(TOKEN_MARGIN));
    wall_floor(wall_ms).max(remembered)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_is_the_clock_or_the_saved_token_plus_the_margin() {
        let wall = 1_800_000_000_000;
        assert_eq!(restart_floor(wall, None), wall << 20);
        assert_eq!(restart_floor(wall, Some(5)), wall << 20);
        // Margins stacked by quick restarts can put the saved token above
        // the clock: the floor stays above it.
        let ahead = (wall << 20) + 3 * TOKEN_MARGIN;
        assert_eq!(restart_floor(wall, Some(ahead)), ahead + TOKEN_MARGIN);
        assert_eq!(restart_floor(u64::MAX, Some(u64::MAX)), u64::MAX);
    }

    #[test]
    fn the_credible_bound_leaves_room_for_stacked_restarts_not_for_the_end_of_the_space() {
        let wall = 1_800_000_000_000u64;
        let stacked = restart_floor(wall, Some((wall << 20) + 10_000 * TOKEN_MARGIN));
        assert!(stacked < credible_token_bound(wall));
        assert!(credible_token_bound(wall) < u64::MAX / 8);
        assert!(credible_token_bound(wall) < TOKEN_CEILING / 4);
    }

    #[test]
    fn the_clock_floor_outruns_any_grant_rate() {
        // A node that started at t0 and granted a million tokens a second
        // for an hour is still below the floor of a restart 1 ms later.
        let t0 = 1_800_000_000_000u64;
        let issued = wall_floor(t0) + 3_600 * 1_000_000;
        assert!(wall_floor(t0 + 3_600_000 + 1) > issued);
    }
}
