//! Many leases lapsing at once: the leader proposes their expiries in
//! bounded batches, as earlier ones apply, with clients' commands never
//! queued behind more than that bound, until every lease is gone and each
//! freed key has gone to its waiter in order.

use std::collections::VecDeque;

use baton_core::{Command, Event};

use super::{key, Pair};
use crate::raft::engine::{Committed, MAX_BATCH, MAX_EXPIRIES_IN_FLIGHT};
use crate::raft::types::Proposal;

const LEASE_MS: u64 = 100;

/// More leases than three rounds of expiries, not a round's multiple.
const LEASES: usize = 3 * MAX_EXPIRIES_IN_FLIGHT + 5;

/// A leader holding `LEASES` grants, all ending at `LEASE_MS`.
fn flooded() -> Pair {
    let mut p = Pair::new();
    for i in 0..LEASES {
        let outcome = p.ask(&format!("k{i}"), 0, LEASE_MS, 0, "c");
        assert!(outcome.is_ok(), "{outcome:?}");
    }
    while p.commit_proposals(0) > 0 {}
    assert_eq!(p.granted().len(), LEASES);
    assert_eq!(p.follower.table().len(), LEASES);
    p
}

/// Takes every entry the leader has to propose, in order.
fn take_entries(p: &mut Pair, log: &mut VecDeque<Proposal>) {
    while let Some((proposal, _)) = p.leader.poll_proposal() {
        assert!(proposal.commands.len() <= MAX_BATCH);
        log.push_back(proposal);
    }
}

/// The expiries in `log`: proposed, not yet applied.
fn expiries_in(log: &VecDeque<Proposal>) -> usize {
    log.iter()
        .flat_map(|p| &p.commands)
        .filter(|t| matches!(t.command, Command::Expire { .. }))
        .count()
}

#[test]
fn lapsed_leases_are_expired_in_bounded_batches_until_all_are_gone() {
    let mut p = flooded();
    // Two clients wait: one for a lapsed key, in order, the other for a
    // key nobody holds, granted at once whatever the flood.
    for waiter in ["w1", "w2"] {
        let _ = p.ask("k7", 60_000, LEASE_MS, 50, waiter);
    }
    let mut log = VecDeque::new();
    let mut now = LEASE_MS;
    let mut entries = 0;
    // Commands committed since the probe's acquire, while it waits.
    let mut probe_behind: Option<usize> = None;
    while p.leader.expiries() < LEASES as u64 || !log.is_empty() {
        // The timer may fire any number of times: the bound holds.
        p.leader.handle_tick(now, &mut p.events);
        p.leader.handle_tick(now, &mut p.events);
        take_entries(&mut p, &mut log);
        let in_flight = expiries_in(&log);
        assert!(
            in_flight <= MAX_EXPIRIES_IN_FLIGHT,
            "{in_flight} expiries on their way at once"
        );
        if entries == 1 {
            let _ = p.ask("probe", 0, 60_000, now, "probe");
            probe_behind = Some(0);
            take_entries(&mut p, &mut log);
        }
        let Some(entry) = log.pop_front() else {
            panic!(
                "nothing proposed at {now} with {} held",
                p.leader.table().len()
            );
        };
        p.commit(Committed::Proposal(&entry), now);
        entries += 1;
        now += 1;
        if let Some(behind) = &mut probe_behind {
            *behind += entry.commands.len();
            if p.follower.table().holder(&key("probe")).is_some() {
                // Behind the expiries on their way, and the hand-over of
                // the first waiter's key that one of them made.
                let most = MAX_EXPIRIES_IN_FLIGHT + 2;
                assert!(*behind <= most, "the probe waited behind {behind} commands");
                probe_behind = None;
            }
        }
        assert!(entries < 10 * LEASES / MAX_BATCH, "expiries do not drain");
    }
    assert!(probe_behind.is_none(), "the probe was never granted");
    // Every lapsed lease is gone, on both nodes, and nothing more is
    // proposed; the probe holds its key, the first waiter the lapsed one,
    // the second waits behind it.
    p.leader.handle_tick(now, &mut p.events);
    assert!(!p.leader.has_output());
    assert_eq!(p.leader.expiries() as usize, LEASES);
    let granted = p.granted();
    let token_of = |who: &str| granted.iter().find(|(h, _)| *h == who).map(|g| g.1);
    let holders: Vec<_> = ["probe", "k7"]
        .iter()
        .map(|k| p.follower.table().holder(&key(k)).map(|h| h.token))
        .collect();
    assert_eq!(holders, vec![token_of("probe"), token_of("w1")]);
    assert_eq!(token_of("w2"), None);
    assert_eq!(p.leader.waiting_on(&key("k7")), 1);
    assert_eq!(p.follower.table().len(), 2);
    assert_eq!(p.follower.table(), p.leader.table());
    assert!(p.events.iter().all(|e| !matches!(e, Event::Moved { .. })));
}
