//! Deterministic simulation of the priority-failover engine: many
//! seeded runs of 2, 3 and 4 nodes through delay, loss, link resets,
//! crashes, restarts, graceful stops, process pauses and partitions, with
//! the cluster's guarantees checked after every simulated millisecond.
//!
//! A failure prints its seed and the command that replays it, e.g.
//! `PRIORITY_SIM_SEED=123 cargo test -p baton-cluster --test priority_sim three_nodes`:
//! with the variable set, each test runs that one seed.

mod sim;

use std::ops::Range;

use sim::world::{run, Summary};

/// Simulated time per seed.
const DURATION_MS: u64 = 3_000;

/// `PRIORITY_SIM_SEED` replays one seed; `PRIORITY_SIM_RUNS` soaks with
/// that many seeds from the test's first.
fn seeds(default: Range<u64>) -> Vec<u64> {
    let number = |name: &str| {
        std::env::var(name)
            .ok()
            .map(|v| match v.trim().parse::<u64>() {
                Ok(n) => n,
                Err(_) => panic!("{name}={v:?} is not a number"),
            })
    };
    if let Some(seed) = number("PRIORITY_SIM_SEED") {
        return vec![seed];
    }
    match number("PRIORITY_SIM_RUNS") {
        Some(runs) => (default.start..default.start + runs).collect(),
        None => default.collect(),
    }
}

/// Runs every seed, and fails with the report of each failing one.
fn run_seeds(test: &str, nodes: usize, default: Range<u64>) -> (Summary, usize) {
    let seeds = seeds(default);
    let mut total = Summary::default();
    let mut failures = Vec::new();
    for &seed in &seeds {
        match run(seed, nodes, DURATION_MS) {
            Ok(summary) => total.add(&summary),
            Err(failure) => failures.push(failure.report(test)),
        }
    }
    if !failures.is_empty() {
        panic!(
            "{} of {} seeds failed:\n\n{}",
            failures.len(),
            seeds.len(),
            failures.join("\n\n")
        );
    }
    (total, seeds.len())
}

/// The runs went through what they were meant to: faults happened and the
/// cluster kept serving and settling.
fn assert_exercised(total: &Summary, runs: usize) {
    let runs = runs as u64;
    assert!(total.grants > 25 * runs, "few grants: {total:?}");
    assert!(total.promotions > 2 * runs, "few promotions: {total:?}");
    assert!(
        total.settled_steps > 300 * runs,
        "rarely settled: {total:?}"
    );
    if runs >= 10 {
        assert!(total.crashes > runs, "few crashes: {total:?}");
        assert!(total.handoffs > runs / 2, "few handoffs: {total:?}");
        assert!(total.pauses > runs / 2, "few pauses: {total:?}");
        assert!(total.partitions > runs / 4, "few partitions: {total:?}");
        assert!(total.later_pieces > runs, "few tables in pieces: {total:?}");
    }
}

#[test]
fn three_nodes() {
    let (total, runs) = run_seeds("three_nodes", 3, 0..800);
    assert_exercised(&total, runs);
    println!("three_nodes: {total:?}");
}

#[test]
fn two_nodes() {
    let (total, runs) = run_seeds("two_nodes", 2, 1_000..1_040);
    assert_exercised(&total, runs);
}

#[test]
fn four_nodes() {
    let (total, runs) = run_seeds("four_nodes", 4, 2_000..2_040);
    assert_exercised(&total, runs);
}

#[test]
fn a_seed_replays_the_same_run() {
    for seed in [7, 8, 9] {
        let first = run(seed, 3, 1_000).map_err(|f| f.report("a_seed_replays_the_same_run"));
        let again = run(seed, 3, 1_000).map_err(|f| f.report("a_seed_replays_the_same_run"));
        assert_eq!(format!("{first:?}"), format!("{again:?}"));
    }
}

/// Seeds that once failed, kept so that the default run holds them: 11007,
/// a graceful stop whose successor's `HandoffTaken` was lost, so that the
/// stopping node served on beside it from its old floor (the same key
/// granted twice, tokens back); 9371, an active that granted on its side
/// of a split and died before the heal, its tokens above the survivor's
/// for good; 6171 and 17038, the check's own fault: a planned handoff
/// back up the list, caught while it was on its way (the new active
/// serving before the others heard of it; the sender handing off, the
/// successor not serving yet).
#[test]
fn seeds_that_once_failed() {
    for (seed, nodes) in [(11_007, 3), (9_371, 2), (6_171, 4), (17_038, 2)] {
        if let Err(failure) = run(seed, nodes, DURATION_MS) {
            panic!("{}", failure.report("seeds_that_once_failed"));
        }
    }
}
