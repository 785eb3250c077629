//! Deterministic simulation of a three-node Raft cluster under turmoil:
//! the real engine, log store, snapshots, peer RPC code and openraft, on
//! simulated hosts and network, with partitions and crashes on a seeded
//! schedule. Clients on each node acquire and release while it leads.
//!
//! Checked: no two clients hold one key at once within their leases;
//! tokens never go back; after healing, every node holds the same table
//! and has applied every grant a client received. A failure names its seed;
//! `BATON_SIM_SEED=<seed>` runs that seed alone. (openraft's own random
//! election timeouts are not seeded, so a seed replays the fault schedule
//! and the clients, not every timing.)

mod raft_sim {
    pub mod history;
    pub mod node;
    pub mod rng;
}

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use raft_sim::history::{check_exclusive, check_tokens_rise, History};
use raft_sim::node::{self, World, PORT};
use raft_sim::rng::Rng;

const NODES: u64 = 3;
/// Simulated time under faults, then to heal and settle.
const CHAOS: Duration = Duration::from_secs(20);
const SETTLE: Duration = Duration::from_secs(6);

fn host(i: u64) -> String {
    format!("n{i}")
}

/// Runs one seeded simulation; `Err` describes the broken invariant.
fn simulate(seed: u64) -> Result<usize, String> {
    let dirs: Vec<tempfile::TempDir> = (0..NODES)
        .map(|_| tempfile::tempdir().map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()?;
    let world = World {
        peers: (0..NODES).map(|i| format!("{}:{PORT}", host(i))).collect(),
        dirs: dirs.iter().map(|d| d.path().to_path_buf()).collect(),
        history: History::default(),
        nodes: Arc::new(Mutex::new(HashMap::new())),
        quiet: Arc::new(AtomicBool::new(false)),
        seed,
    };
    let mut sim = turmoil::Builder::new()
        .simulation_duration(CHAOS + SETTLE + Duration::from_secs(5))
        .tick_duration(Duration::from_millis(1))
        .min_message_latency(Duration::from_millis(1))
        .max_message_latency(Duration::from_millis(5))
        .rng_seed(seed)
        .build();
    for i in 0..NODES {
        let world = world.clone();
        let incarnation = Arc::new(std::sync::atomic::AtomicU64::new(0));
        sim.host(host(i), move || {
            let n = incarnation.fetch_add(1, Ordering::Relaxed);
            node::run(world.clone(), i, n)
        });
    }
    let mut rng = Rng::new(seed);
    let mut crashed: Option<u64> = None;
    let mut next_fault = Duration::from_secs(2);
    while sim.elapsed() < CHAOS {
        sim.step().map_err(|e| format!("simulation failed: {e}"))?;
        if sim.elapsed() < next_fault {
            continue;
        }
        next_fault = sim.elapsed() + Duration::from_millis(500 + rng.below(1_500));
        // Heal the previous fault, then maybe start another.
        if let Some(down) = crashed.take() {
            sim.bounce(host(down));
        }
        for a in 0..NODES {
            for b in a + 1..NODES {
                sim.repair(host(a), host(b));
            }
        }
        match rng.below(4) {
            0 => {
                let down = rng.below(NODES);
                sim.crash(host(down));
                crashed = Some(down);
            }
            1 => {
                let a = rng.below(NODES);
                let b = (a + 1 + rng.below(NODES - 1)) % NODES;
                sim.partition(host(a), host(b));
            }
            2 => {
                // Cut one node off from both others.
                let alone = rng.below(NODES);
                for other in (0..NODES).filter(|o| *o != alone) {
                    sim.partition(host(alone), host(other));
                }
            }
            _ => {}
        }
    }
    if let Some(down) = crashed.take() {
        sim.bounce(host(down));
    }
    for a in 0..NODES {
        for b in a + 1..NODES {
            sim.repair(host(a), host(b));
        }
    }
    world.quiet.store(true, Ordering::Relaxed);
    let settle_until = sim.elapsed() + SETTLE;
    while sim.elapsed() < settle_until {
        sim.step().map_err(|e| format!("simulation failed: {e}"))?;
    }

    let held = world.history.all();
    check_exclusive(&held)?;
    check_tokens_rise(&held)?;
    let nodes = world.nodes.lock().map_err(|e| e.to_string())?;
    let tables: Vec<_> = (0..NODES)
        .map(|i| nodes.get(&i).map(|n| n.table()))
        .collect();
    let Some(Some(first)) = tables.first() else {
        return Err("node 0 never ran".into());
    };
    for (i, table) in tables.iter().enumerate() {
        if table.as_ref() != Some(first) {
            return Err(format!(
                "node {i} ended with {table:?}, node 0 with {first:?}"
            ));
        }
    }
    if !first.0.is_empty() {
        return Err(format!(
            "locks still held after every lease ran out: {first:?}"
        ));
    }
    for h in &held {
        for i in 0..NODES {
            let applied = nodes.get(&i).is_some_and(|n| n.has_applied(h.token));
            if !applied {
                return Err(format!(
                    "node {i} never applied the grant of token {} ({h:?})",
                    h.token
                ));
            }
        }
    }
    Ok(held.len())
}

fn seeds() -> Vec<u64> {
    match std::env::var("BATON_SIM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        Some(seed) => vec![seed],
        None => vec![1, 2, 3],
    }
}

#[test]
fn raft_keeps_locks_exclusive_under_partitions_and_crashes() {
    for seed in seeds() {
        match simulate(seed) {
            Ok(grants) => {
                println!("seed {seed}: {grants} grants, every invariant held");
                assert!(
                    grants > 20,
                    "seed {seed}: only {grants} grants: the cluster barely served"
                );
            }
            Err(problem) => panic!("seed {seed}: {problem} (rerun with BATON_SIM_SEED={seed})"),
        }
    }
}
