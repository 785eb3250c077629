//! Protocol 1.2's grants through the log: permits of a semaphore and
//! shared grants handed on several in one entry, values set by a
//! committed `SetValue`, each applied the same on leader and follower.

use baton_core::{
    Acquire, AcquireOptions, AcquireOutcome, Change, Command, HolderValue, Outcome, Refusal,
};

use super::{key, Pair};

fn value(s: &str) -> HolderValue {
    HolderValue::try_from(s).unwrap_or_else(|e| panic!("bad test value {s}: {e:?}"))
}

impl Pair {
    fn acquire(&mut self, client: &'static str, options: AcquireOptions) -> AcquireOutcome {
        let acquire = Acquire::new(key("k"), 0, 1_000, options);
        let out = self
            .leader
            .handle_acquire(acquire, 0, client, &mut self.events);
        out.unwrap_or_else(|e| panic!("the leader does not serve: {e:?}"))
    }

    /// The commands the leader proposes next, as one entry, committed.
    fn commit_next(&mut self) -> Vec<Command> {
        let Some((proposal, _)) = self.leader.poll_proposal() else {
            return Vec::new();
        };
        self.commit(super::Committed::Proposal(&proposal), 1);
        assert_eq!(self.follower.table(), self.leader.table());
        proposal
            .commands
            .iter()
            .map(|t| t.command.clone())
            .collect()
    }

    fn release(&mut self, client: &'static str, token: u64) {
        let out = self
            .leader
            .handle_release(&key("k"), token, Some(client), 1, &mut self.events);
        assert_eq!(out, Ok(None));
    }
}

fn grant_with(options: AcquireOptions) -> Command {
    Command::GrantWith {
        key: key("k"),
        lease_ms: 1_000,
        options,
    }
}

fn release(token: u64) -> Command {
    Command::Release {
        key: key("k"),
        token,
    }
}

#[test]
fn a_semaphore_grants_its_free_permits_in_one_entry_and_hands_one_on_per_release() {
    let mut p = Pair::new();
    for client in ["c1", "c2", "c3"] {
        assert!(matches!(
            p.acquire(client, AcquireOptions::semaphore(2)),
            AcquireOutcome::Queued { .. }
        ));
    }
    assert_eq!(
        p.commit_next(),
        vec![grant_with(AcquireOptions::semaphore(2)); 2]
    );
    assert_eq!(p.granted(), vec![("c1", 1), ("c2", 2)]);
    assert_eq!(p.leader.table().grants(&key("k")).map(|g| g.len()), Some(2));
    // Another count of permits is refused while the key is held.
    assert!(matches!(
        p.acquire("c4", AcquireOptions::semaphore(3)),
        AcquireOutcome::Refused(Refusal::Permits(2))
    ));
    p.release("c1", 1);
    assert_eq!(
        p.commit_next(),
        vec![release(1), grant_with(AcquireOptions::semaphore(2))]
    );
    assert_eq!(p.granted(), vec![("c3", 3)]);
    assert_eq!(p.leader.table().grants(&key("k")).map(|g| g.len()), Some(2));
}

#[test]
fn shared_waiters_at_the_head_pass_together_behind_a_release_and_a_writer_waits() {
    let mut p = Pair::new();
    assert!(matches!(
        p.acquire("w1", AcquireOptions::default()),
        AcquireOutcome::Queued { .. }
    ));
    assert_eq!(p.commit_next().len(), 1);
    assert_eq!(p.granted(), vec![("w1", 1)]);
    for (client, options) in [
        ("r1", AcquireOptions::shared()),
        ("r2", AcquireOptions::shared()),
        ("w2", AcquireOptions::default()),
        ("r3", AcquireOptions::shared()),
    ] {
        assert!(matches!(
            p.acquire(client, options),
            AcquireOutcome::Queued { .. }
        ));
    }
    assert_eq!(p.commit_next(), Vec::new(), "nothing passes while w1 holds");
    p.release("w1", 1);
    assert_eq!(
        p.commit_next(),
        vec![
            release(1),
            grant_with(AcquireOptions::shared()),
            grant_with(AcquireOptions::shared())
        ]
    );
    assert_eq!(p.granted(), vec![("r1", 2), ("r2", 3)]);
    // r3 came behind the writer: it does not overtake it.
    p.release("r1", 2);
    assert_eq!(p.commit_next(), vec![release(2)]);
    p.release("r2", 3);
    let plain = Command::Grant {
        key: key("k"),
        lease_ms: 1_000,
    };
    assert_eq!(p.commit_next(), vec![release(3), plain]);
    assert_eq!(p.granted(), vec![("w2", 4)]);
}

#[test]
fn a_value_rides_in_the_grant_and_a_set_value_answers_once_committed() {
    let mut p = Pair::new();
    let with_value = AcquireOptions {
        value: Some(value("10.0.0.1:80")),
        ..AcquireOptions::default()
    };
    assert!(matches!(
        p.acquire("c1", with_value),
        AcquireOutcome::Queued { .. }
    ));
    p.commit_next();
    assert_eq!(p.granted(), vec![("c1", 1)]);
    assert_eq!(p.follower.table().value(1), Some(&value("10.0.0.1:80")));
    let set = p
        .leader
        .handle_set_value(&key("k"), 1, Some(value("b")), "c1", 2, &mut p.events);
    assert_eq!(set, Ok(None), "answered once committed");
    assert!(p.leader.table().value(1) == Some(&value("10.0.0.1:80")));
    p.commit_next();
    assert_eq!(p.follower.table().value(1), Some(&value("b")));
    assert_eq!(
        p.answers(),
        vec![("c1", Change::SetValue, Ok(Outcome::ValueSet))]
    );
    // A token that holds nothing is answered at once and proposes nothing.
    let stale = p
        .leader
        .handle_set_value(&key("k"), 9, None, "c1", 2, &mut p.events);
    assert_eq!(stale, Ok(Some(Outcome::NotFound)));
    assert!(p.leader.poll_proposal().is_none());
}

/// A permit whose lease ended expires though another permit of the key
/// has a renewal in the log (an expiry waits for renewals of its own
/// grant only), and a renewal of the lapsed permit is refused.
#[test]
fn a_lapsed_permit_expires_while_another_permit_of_the_key_renews() {
    let mut p = Pair::new();
    p.acquire("c1", AcquireOptions::semaphore(2));
    p.acquire("c2", AcquireOptions::semaphore(2));
    p.commit_next();
    assert_eq!(p.granted(), vec![("c1", 1), ("c2", 2)]);
    // Both leases end at 1001. c2 renews in time; the renewal waits in
    // the log for its commit.
    let renew = p
        .leader
        .handle_renew(&key("k"), 2, 1_000, "c2", 1_000, &mut p.events);
    assert_eq!(renew, Ok(None));
    let (renewal, _) = p
        .leader
        .poll_proposal()
        .unwrap_or_else(|| panic!("no renewal"));
    p.leader.handle_tick(1_001, &mut p.events);
    let expiry = p.commit_next();
    let expire = Command::Expire {
        key: key("k"),
        token: 1,
    };
    assert_eq!(expiry, vec![expire]);
    let late = p
        .leader
        .handle_renew(&key("k"), 1, 1_000, "c1", 1_001, &mut p.events);
    assert_eq!(late, Ok(Some(Outcome::NotFound)));
    p.commit(super::Committed::Proposal(&renewal), 1_002);
    assert_eq!(
        p.answers(),
        vec![("c2", Change::Renew, Ok(Outcome::Renewed))]
    );
    for node in [&p.leader, &p.follower] {
        let ends: Vec<(u64, u64)> = node.table().grants(&key("k")).map_or(Vec::new(), |g| {
            g.holders()
                .iter()
                .map(|h| (h.token, h.expires_at))
                .collect()
        });
        assert_eq!(ends, vec![(2, 2_002)]);
    }
}
