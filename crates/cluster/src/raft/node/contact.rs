//! When a follower last heard its leader, for `/health`: openraft touches
//! a follower's vote at every append (or heartbeat) it takes from the
//! leader, but reports no such time in its metrics, and a follower cut off
//! from its majority keeps naming its old leader (pre-vote fails, so it
//! never becomes a candidate). The node asks the core for that time every
//! [`CHECK_EVERY`] ([`RaftCommand::AskLeaderContact`]) and keeps it here.
//!
//! [`RaftCommand::AskLeaderContact`]: super::RaftCommand::AskLeaderContact

use std::time::Duration;

/// How often the node asks the core.
pub const CHECK_EVERY: Duration = Duration::from_millis(100);

/// What the lock node keeps: when the leader was last heard (on the
/// server's clock), and after how long that is stale.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LeaderContact {
    pub heard_at: Option<baton_core::Millis>,
    pub stale_after_ms: u64,
}

impl LeaderContact {
    /// Why a follower is not healthy at `now`, if it is not.
    pub fn issue(&self, now: baton_core::Millis) -> Option<String> {
        match self.heard_at {
            None => Some("this follower has not heard from its leader yet".to_string()),
            Some(at) if now.saturating_sub(at) > self.stale_after_ms => Some(format!(
                "this follower has not heard from its leader for {} ms",
                now.saturating_sub(at)
            )),
            Some(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_follower_is_unhealthy_until_it_hears_and_after_it_stops_hearing() {
        let mut c = LeaderContact {
            heard_at: None,
            stale_after_ms: 600,
        };
        assert!(c.issue(10).is_some());
        c.heard_at = Some(1_000);
        assert_eq!(c.issue(1_600), None);
        assert!(c.issue(1_601).is_some_and(|why| why.contains("601 ms")));
    }
}
