//! The Raft engine's invariants, checked after every input in debug
//! builds; simulations call [`RaftEngine::validate`] between steps.

use std::collections::HashMap;

use baton_core::{invariant, Broken, Key, Token};

use super::apply::MAX_UNCLAIMED;
use super::leadership::MAX_ORPHAN_GROUPS;
use super::{Pending, RaftEngine, Standing};

fn ensure(holds: bool, what: impl FnOnce() -> String) -> Result<(), Broken> {
    invariant::ensure(holds, what)
}

impl<H> RaftEngine<H> {
    /// Checks the table; that the renewal counts are the pending renewals
    /// (never zero, so they never underflow); that a leader's hand-overs
    /// and expiries on their way and its outbox are pending requests; and,
    /// while it serves, the rules (a free key has no live waiters).
    pub fn validate(&self) -> Result<(), Broken> {
        self.table.validate()?;
        let mut renewals: HashMap<(&Key, Token), u32> = HashMap::new();
        for pending in self.pending.values() {
            if let Pending::Renew { key, token, .. } = pending {
                *renewals.entry((key, *token)).or_default() += 1;
            }
        }
        let counted: HashMap<(&Key, Token), u32> = self
            .renewing
            .iter()
            .map(|((key, token), n)| ((key, *token), *n))
            .collect();
        ensure(renewals == counted, || {
            format!("renewals counted {counted:?}, pending {renewals:?}")
        })?;
        self.validate_deadlines()?;
        ensure(self.unclaimed.len() <= MAX_UNCLAIMED, || {
            format!("{} unclaimed grants kept", self.unclaimed.len())
        })?;
        ensure(self.unclaimed.is_empty() || !self.serving(), || {
            "unclaimed grants kept by the serving leader".to_string()
        })?;
        let Standing::Leader(leading) = &self.standing else {
            let expiring = self
                .pending
                .values()
                .any(|p| matches!(p, Pending::Expire { .. }));
            return ensure(!expiring, || "an expiry pending off the lead".to_string());
        };
        for tagged in &leading.outbox {
            let floor = leading.floor_tag == Some(tagged.tag);
            ensure(floor || self.pending.contains_key(&tagged.tag), || {
                format!("tag {} to propose, not pending", tagged.tag)
            })?;
        }
        for (key, token) in &leading.expiring {
            let pending = self.pending.values().any(
                |p| matches!(p, Pending::Expire { key: k, token: t } if k == key && t == token),
            );
            ensure(pending, || format!("expiry of {key:?} {token} not pending"))?;
        }
        let granting = self.pending.iter().filter_map(|(tag, p)| match p {
            Pending::Grant(w) if *tag >= leading.first_tag => Some(&w.key),
            _ => None,
        });
        let granting: Vec<&Key> = granting.collect();
        ensure(granting.len() == leading.rules.granting_count(), || {
            format!(
                "{} grants pending, rules have {}",
                granting.len(),
                leading.rules.granting_count()
            )
        })?;
        for key in granting {
            ensure(leading.rules.is_granting(key), || {
                format!("grant of {key:?} pending, not granting")
            })?;
        }
        if self.serving() {
            leading.rules.validate(&self.table)?;
        }
        Ok(())
    }

    /// The debug build's check after an input (in full while small: the
    /// table too, on a follower as on the leader, else a follower's every
    /// input would cost a walk of its whole table).
    pub(super) fn debug_validate(&self) {
        let small = self.table.small()
            && self.leading().is_none_or(|l| l.rules.small(&self.table))
            && self.pending.len() <= invariant::FULL_CHECK_UP_TO;
        invariant::debug_check(small, || self.validate());
    }

    /// The answer deadlines run in order over proposed tags; the orphan
    /// groups are few, their bounds rising and proposed.
    fn validate_deadlines(&self) -> Result<(), Broken> {
        ensure(self.orphans.len() <= MAX_ORPHAN_GROUPS, || {
            format!("{} orphan groups", self.orphans.len())
        })?;
        let mut earliest = 0;
        for &(deadline, tag) in &self.answer_by {
            ensure(earliest <= deadline && tag < self.next_tag, || {
                format!("answer deadline {deadline} of tag {tag} out of order")
            })?;
            earliest = deadline;
        }
        let mut below = 0;
        for &(_, bound) in &self.orphans {
            ensure(below <= bound && bound <= self.next_tag, || {
                format!(
                    "orphans below {bound} after {below}, next tag {}",
                    self.next_tag
                )
            })?;
            below = bound;
        }
        Ok(())
    }
}
