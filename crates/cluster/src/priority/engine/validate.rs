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
