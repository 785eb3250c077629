//! The node's invariants, checked after every input in debug builds and by
//! the simulation after every step: a broken one is a bug in the engine,
//! never something a peer or a client can cause.

use baton_core::Token;

use super::super::messages::NodeIndex;
use super::super::token_floor::MAX_WAITERS;
use super::roles::{HandingOff, Role};
use super::PriorityNode;

/// An invariant of a priority node that does not hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Broken {
    #[error("the node knows {views} peers but is configured with {configured}")]
    PeerCount { views: usize, configured: usize },
    #[error("its role names node {index}, which is itself or not a peer")]
    BadIndex { index: NodeIndex },
    #[error("a standby that follows nobody calls its table synced")]
    SyncedWithoutActive,
    #[error("a node that does not serve has {waiters} waiters")]
    WaitersWhileNotServing { waiters: usize },
    #[error("{waiters} waiters, more than the {MAX_WAITERS} one token block allows")]
    TooManyWaiters { waiters: usize },
    #[error("a node that does not serve has commands waiting to be replicated")]
    JournalWhileNotServing,
    #[error("an active's table ends at token {last}, below its term's floor {term}")]
    BelowTerm { last: Token, term: Token },
    #[error("an active's table ends at token {last}: neither its grant nor its floor")]
    ForeignToken { last: Token },
}

impl<H> PriorityNode<H> {
    /// Checks every invariant of the node (see [`Broken`]).
    pub fn validate(&self) -> Result<(), Broken> {
        let n = self.config.peers.len();
        if self.peers.len() != n || self.config.me >= n {
            return Err(Broken::PeerCount {
                views: self.peers.len(),
                configured: n,
            });
        }
        self.validate_role()?;
        let waiters = self.service.waiter_count();
        if waiters > MAX_WAITERS {
            return Err(Broken::TooManyWaiters { waiters });
        }
        if !self.role.is_active() {
            if waiters > 0 {
                return Err(Broken::WaitersWhileNotServing { waiters });
            }
            if self.service.has_journal() {
                return Err(Broken::JournalWhileNotServing);
            }
            return Ok(());
        }
        let last = self.service.table().last_token();
        if last < self.term {
            return Err(Broken::BelowTerm {
                last,
                term: self.term,
            });
        }
        // Every grant is in this node's blocks, and every floor it takes
        // leaves its next grant there.
        let own = last == Token::MAX || self.blocks.owns(last) || self.blocks.owns(last + 1);
        if !own {
            return Err(Broken::ForeignToken { last });
        }
        Ok(())
    }

    /// The role and its state agree.
    fn validate_role(&self) -> Result<(), Broken> {
        let peer = |index: NodeIndex| {
            if index == self.config.me || index >= self.peers.len() {
                Err(Broken::BadIndex { index })
            } else {
                Ok(())
            }
        };
        match &self.role {
            Role::Active => Ok(()),
            Role::HandingOff(HandingOff { to, .. }) => peer(*to),
            Role::Standby(standby) => {
                if let Some(following) = standby.following {
                    peer(following)?;
                } else if standby.synced {
                    return Err(Broken::SyncedWithoutActive);
                }
                standby.handed_off_to.map_or(Ok(()), peer)
            }
        }
    }

    /// [`Self::validate`] after an input, in debug builds.
    pub(super) fn checked(&self) {
        if cfg!(debug_assertions) {
            if let Err(broken) = self.validate() {
                panic!("priority node {}: {broken}", self.config.me);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test

    use baton_core::{Acquire, Key, Millis};

    use super::super::roles::{HandingOff, Role, Standby};
    use super::super::{PriorityConfig, PriorityNode};
    use super::Broken;

    fn node(me: usize) -> PriorityNode<u64> {
        let config = PriorityConfig {
            me,
            peers: vec!["127.0.0.1:7400".into(), "127.0.0.1:7401".into()],
            heartbeat_ms: 10,
            failure_timeout_ms: 50,
            wall_at_zero: 0,
        };
        PriorityNode::new(config, 0)
    }

    /// A lone node 0, ticked until it serves.
    fn active() -> PriorityNode<u64> {
        let mut node = node(0);
        for now in (0..=50).step_by(10) {
            node.handle_tick(now as Millis);
        }
        assert!(node.role.is_active());
        node
    }

    #[test]
    fn a_sound_node_passes_in_every_role() {
        assert_eq!(node(1).validate(), Ok(()));
        let mut node = active();
        assert_eq!(node.validate(), Ok(()));
        let key = Key::try_from("a").unwrap();
        assert!(node
            .handle_acquire(Acquire::plain(key.clone(), 0, 100), 51, 1)
            .is_ok());
        assert!(node
            .handle_acquire(Acquire::plain(key, 100, 100), 51, 2)
            .is_ok());
        assert_eq!(node.validate(), Ok(()));
    }

    #[test]
    fn a_role_that_names_itself_or_no_peer_is_caught() {
        let mut node = node(0);
        node.role = Role::HandingOff(HandingOff { to: 0, started: 0 });
        assert_eq!(node.validate(), Err(Broken::BadIndex { index: 0 }));
        node.role = Role::Standby(Standby::following(Some(2), 0));
        assert_eq!(node.validate(), Err(Broken::BadIndex { index: 2 }));
        let mut synced = Standby::following(None, 0);
        synced.synced = true;
        node.role = Role::Standby(synced);
        assert_eq!(node.validate(), Err(Broken::SyncedWithoutActive));
    }

    #[test]
    fn a_standby_with_waiters_or_unsent_commands_is_caught() {
        let mut node = active();
        let key = Key::try_from("a").unwrap();
        assert!(node
            .handle_acquire(Acquire::plain(key.clone(), 0, 100), 51, 1)
            .is_ok());
        node.role = Role::Standby(Standby::following(None, 51));
        assert_eq!(node.validate(), Err(Broken::JournalWhileNotServing));
        node.role = Role::Active;
        assert!(node
            .handle_acquire(Acquire::plain(key, 100, 100), 51, 2)
            .is_ok());
        node.role = Role::Standby(Standby::following(None, 51));
        assert_eq!(
            node.validate(),
            Err(Broken::WaitersWhileNotServing { waiters: 1 })
        );
    }

    #[test]
    fn an_active_below_its_term_or_outside_its_blocks_is_caught() {
        let mut node = active();
        let term = node.term;
        node.term = term + 1;
        assert_eq!(
            node.validate(),
            Err(Broken::BelowTerm {
                last: term,
                term: term + 1
            })
        );
        node.term = term;
        // The start of node 1's next block: a floor node 0 never takes.
        let foreign = (term / (1 << 24) + 1) * (1 << 24) + 5;
        node.service.raise_token_floor(foreign);
        assert_eq!(node.validate(), Err(Broken::ForeignToken { last: foreign }));
    }
}
