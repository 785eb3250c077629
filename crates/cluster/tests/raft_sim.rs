//! Deterministic simulation of a three-node Raft cluster under turmoil:
//! the production node (`raft::start_on`) on simulated hosts and network,
//! clients speaking the real protocol, partitions, crashes and a replaced
//! disk on a seeded schedule, checked at every step for unique tokens,
//! exclusive holds, answers in time and linearizable reads. What it runs
//! and checks in full, and how to replay a seed (`RAFT_SIM_SEED`) or soak
//! (`RAFT_SIM_RUNS`): docs/architecture.md, "Tests, one harness per layer".

mod raft_sim {
    pub mod history;
    pub mod net;
    pub mod node;
    pub mod replace;
    #[allow(dead_code)]
    #[path = "../sim/rng.rs"]
    pub mod rng;
}

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use raft_sim::history::{check_holders, check_tokens_rise, History};
use raft_sim::node::{self, Locks, World, PORT};
use raft_sim::replace::{Phase, Replacements};
use raft_sim::rng::Rng;

const NODES: u64 = 3;
/// Simulated time under faults, then to heal and settle.
const CHAOS: Duration = Duration::from_secs(10);
const SETTLE: Duration = Duration::from_secs(6);
/// How often the clients' history is checked, in simulated time.
const CHECK_EVERY: Duration = Duration::from_millis(10);
/// Seeds a plain `cargo test` runs.
const CI_SEEDS: u64 = 12;

fn host(i: u64) -> String {
    format!("n{i}")
}

/// What one run did.
#[derive(Debug, Default, Clone, Copy)]
struct Run {
    grants: usize,
    handovers: u64,
    handovers_while_cut: u64,
    redirects: u64,
    queries: u64,
    watches: u64,
    /// Grants of the semaphore and shared grants.
    multi_grants: usize,
    /// Nodes whose disk was lost, removed, and added again.
    replaced: u64,
}

/// Every token seen in any node's table, with the key it named and where.
#[derive(Debug, Default)]
struct Tokens(HashMap<u64, (u64, Vec<u8>)>);

impl Tokens {
    /// Looks at every node's table now.
    fn check(&mut self, world: &World) -> Result<(), String> {
        for (i, locks) in world.nodes() {
            let (valid, held) = locks.inspect(|node| {
                let held = node
                    .engine()
                    .table()
                    .iter()
                    .map(|(k, h)| (h.token, k.as_bytes().to_vec()))
                    .collect::<Vec<_>>();
                (node.engine().validate(), held)
            });
            if let Err(broken) = valid {
                return Err(format!("node {i}'s engine is inconsistent: {broken}"));
            }
            for (token, key) in held {
                match self.0.get(&token) {
                    Some((j, other)) if *other != key => {
                        return Err(format!(
                            "token {token} names key {:?} on node {i} but {:?} on node {j}",
                            String::from_utf8_lossy(&key),
                            String::from_utf8_lossy(other)
                        ));
                    }
                    Some(_) => {}
                    None => {
                        self.0.insert(token, (i, key));
                    }
                }
            }
        }
        Ok(())
    }
}

/// Heals every fault: the crashed node restarts, every link is repaired.
/// A node being replaced stays down until it is removed (then it starts
/// with `--join`: see [`restart_removed`]).
fn heal(sim: &mut turmoil::Sim<'_>, world: &World, crashed: &mut Option<u64>) {
    if let Some(down) = crashed.take() {
        sim.bounce(host(down));
    }
    restart_removed(sim, world);
    for a in 0..NODES {
        for b in a + 1..NODES {
            sim.repair(host(a), host(b));
        }
    }
    world.follower_cut.store(false, Ordering::Relaxed);
}

/// Starts a node whose disk was replaced once it is out of the membership.
fn restart_removed(sim: &mut turmoil::Sim<'_>, world: &World) {
    if let Phase::Removed(n) = world.replacements.phase() {
        world.replacements.restarted(n);
        sim.bounce(host(n));
    }
}

/// A follower of the serving leader loses its disk: crashed, its data
/// directory emptied, then (see `replace`) removed and added again.
fn lose_a_disk(sim: &mut turmoil::Sim<'_>, world: &World, rng: &mut Rng) {
    if world.replacements.phase() != Phase::Idle {
        return;
    }
    let followers = followers(world);
    let Some(&n) = followers.get(rng.below(followers.len().max(1))) else {
        return;
    };
    sim.crash(host(n));
    let dir = &world.dirs[n as usize];
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let path = entry.path();
            let _ = if path.is_dir() {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
        }
    }
    world.replacements.set(Phase::Remove(n));
}

/// The nodes that run and do not serve.
fn followers(world: &World) -> Vec<u64> {
    world
        .nodes()
        .into_iter()
        .filter(|(_, locks)| !locks.inspect(|n| n.engine().serving()))
        .map(|(i, _)| i)
        .collect()
}

/// Whether node `n` is down for its replacement (no other fault may touch it).
fn being_replaced(world: &World, n: u64) -> bool {
    matches!(
        world.replacements.phase(),
        Phase::Remove(m) | Phase::Removing(m, _) | Phase::Removed(m) if m == n
    )
}

/// Maybe starts a fault.
fn fault(sim: &mut turmoil::Sim<'_>, world: &World, rng: &mut Rng, crashed: &mut Option<u64>) {
    let pick = |rng: &mut Rng| rng.below(NODES as usize) as u64;
    let cut_off = |sim: &mut turmoil::Sim<'_>, alone: u64| {
        for other in (0..NODES).filter(|o| *o != alone) {
            sim.partition(host(alone), host(other));
        }
    };
    match rng.below(6) {
        0 => {
            let down = pick(rng);
            if !being_replaced(world, down) {
                sim.crash(host(down));
                *crashed = Some(down);
            }
        }
        1 => {
            let a = pick(rng);
            let b = (a + 1 + rng.below(NODES as usize - 1) as u64) % NODES;
            sim.partition(host(a), host(b));
        }
        2 => cut_off(sim, pick(rng)),
        3 | 4 => {
            // Cut off a follower of the serving leader, from both others,
            // while the leader goes on handing keys over.
            let followers = followers(world);
            if !followers.is_empty() {
                cut_off(sim, followers[rng.below(followers.len())]);
                world.follower_cut.store(true, Ordering::Relaxed);
            }
        }
        // One run in twelve: the replacement must finish by the end of
        // the settling time, which it fails to if it cannot.
        5 if rng.below(2) == 0 => lose_a_disk(sim, world, rng),
        _ => {}
    }
}

/// A node's data directory: in memory where the machine has a tmpfs, so
/// the log store's fsyncs cost no disk time (what they protect against is
/// simulated by crashing hosts, not by losing the machine).
fn scratch_dir() -> Result<tempfile::TempDir, String> {
    let shm = std::path::Path::new("/dev/shm");
    let dir = if shm.is_dir() {
        tempfile::tempdir_in(shm).or_else(|_| tempfile::tempdir())
    } else {
        tempfile::tempdir()
    };
    dir.map_err(|e| e.to_string())
}

/// Runs one seeded simulation; `Err` describes the broken invariant.
fn simulate(seed: u64) -> Result<Run, String> {
    let dirs: Vec<tempfile::TempDir> = (0..NODES)
        .map(|_| scratch_dir())
        .collect::<Result<_, _>>()?;
    let world = World {
        peers: (0..NODES).map(|i| format!("{}:{PORT}", host(i))).collect(),
        dirs: dirs.iter().map(|d| d.path().to_path_buf()).collect(),
        history: History::default(),
        nodes: Arc::new(Mutex::new(HashMap::new())),
        quiet: Arc::new(AtomicBool::new(false)),
        seed,
        breaches: Arc::new(Mutex::new(Vec::new())),
        follower_cut: Arc::new(AtomicBool::new(false)),
        handovers: Arc::new(AtomicU64::new(0)),
        handovers_while_cut: Arc::new(AtomicU64::new(0)),
        redirects: Arc::new(AtomicU64::new(0)),
        queries: Arc::new(AtomicU64::new(0)),
        watches: Arc::new(AtomicU64::new(0)),
        replacements: Replacements::default(),
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
        let incarnation = Arc::new(AtomicU64::new(0));
        sim.host(host(i), move || {
            let n = incarnation.fetch_add(1, Ordering::Relaxed);
            node::run(world.clone(), i, n)
        });
    }
    let mut rng = Rng::new(seed);
    let mut tokens = Tokens::default();
    let mut crashed: Option<u64> = None;
    let mut next_fault = Duration::from_secs(2);
    let mut next_check = Duration::ZERO;
    let mut step = |sim: &mut turmoil::Sim<'_>, tokens: &mut Tokens| -> Result<(), String> {
        sim.step().map_err(|e| format!("simulation failed: {e}"))?;
        tokens.check(&world)?;
        if sim.elapsed() >= next_check {
            next_check = sim.elapsed() + CHECK_EVERY;
            check_so_far(&world)?;
        }
        Ok(())
    };
    while sim.elapsed() < CHAOS {
        step(&mut sim, &mut tokens)?;
        if sim.elapsed() < next_fault {
            continue;
        }
        // Some faults outlast the answer-time rule's 3 s, so that a
        // leader cut off from its majority must answer without it.
        next_fault = sim.elapsed() + Duration::from_millis(500 + rng.below(4_000) as u64);
        heal(&mut sim, &world, &mut crashed);
        fault(&mut sim, &world, &mut rng, &mut crashed);
    }
    heal(&mut sim, &world, &mut crashed);
    world.quiet.store(true, Ordering::Relaxed);
    let settle_until = sim.elapsed() + SETTLE;
    while sim.elapsed() < settle_until {
        step(&mut sim, &mut tokens)?;
        restart_removed(&mut sim, &world);
    }
    if let Some(n) = world.replacements.phase().node() {
        return Err(format!(
            "the replacement of node {n} did not finish: {:?}",
            world.replacements.phase()
        ));
    }
    check_so_far(&world)?;
    check_settled(&world)?;
    Ok(Run {
        grants: world.history.all().len(),
        handovers: world.handovers.load(Ordering::Relaxed),
        handovers_while_cut: world.handovers_while_cut.load(Ordering::Relaxed),
        redirects: world.redirects.load(Ordering::Relaxed),
        queries: world.queries.load(Ordering::Relaxed),
        watches: world.watches.load(Ordering::Relaxed),
        multi_grants: world
            .history
            .all()
            .iter()
            .filter(|h| h.permits > 1 || h.shared)
            .count(),
        replaced: world.replacements.completed(),
    })
}

/// A node's table as (key, token) sorted, and its last token.
fn table_of(locks: &Locks) -> (Vec<(Vec<u8>, u64)>, u64) {
    locks.inspect(|node| {
        let table = node.engine().table();
        let mut held: Vec<_> = table
            .iter()
            .map(|(k, h)| (k.as_bytes().to_vec(), h.token))
            .collect();
        held.sort();
        (held, table.last_token())
    })
}

/// After healing: one table everywhere, empty, and through every grant a
/// client received.
fn check_settled(world: &World) -> Result<(), String> {
    let nodes = world.nodes();
    if nodes.len() != NODES as usize {
        return Err(format!("only {} nodes ever ran", nodes.len()));
    }
    let tables: Vec<_> = nodes.iter().map(|(_, l)| table_of(l)).collect();
    let first = &tables[0];
    for (i, table) in tables.iter().enumerate() {
        if table != first {
            return Err(format!(
                "node {i} ended with {table:?}, node 0 with {first:?}"
            ));
        }
    }
    if !first.0.is_empty() {
        let states: Vec<String> = nodes
            .iter()
            .map(|(i, l)| format!("node {i}: {}", describe(l)))
            .collect();
        return Err(format!(
            "locks still held after every lease ran out: {first:?}; {}",
            states.join("; ")
        ));
    }
    // Tokens are taken in log order, so a table whose last token is at
    // least a grant's applied the entry that made it.
    for h in world.history.all() {
        if h.token > first.1 {
            return Err(format!(
                "no node applied the grant of token {} ({h:?}); last token {}",
                h.token, first.1
            ));
        }
    }
    Ok(())
}

/// A node's engine in a few words, for a failure report.
fn describe(locks: &Locks) -> String {
    locks.inspect(|node| {
        let engine = node.engine();
        format!(
            "role {:?} serving {} outbox {} waiters {}",
            engine.role(),
            engine.serving(),
            engine.has_output(),
            engine.waiter_count()
        )
    })
}

/// The invariants of the clients' history, which hold at every moment.
fn check_so_far(world: &World) -> Result<(), String> {
    let held = world.history.all();
    check_holders(&held)?;
    check_tokens_rise(&held)?;
    let breaches = world.breaches.lock().map_err(|e| e.to_string())?;
    if let Some(first) = breaches.first() {
        return Err(format!(
            "clients saw {} breaches (an answer late or missing, an E, a stale read), first: {first}",
            breaches.len()
        ));
    }
    Ok(())
}

/// `RAFT_SIM_SEED` (or the older `BATON_SIM_SEED`) replays one seed;
/// `RAFT_SIM_RUNS` runs that many seeds from 1.
fn seeds() -> Vec<u64> {
    let number = |name: &str| {
        std::env::var(name)
            .ok()
            .map(|v| match v.trim().parse::<u64>() {
                Ok(n) => n,
                Err(_) => panic!("{name}={v:?} is not a number"),
            })
    };
    if let Some(seed) = number("RAFT_SIM_SEED").or_else(|| number("BATON_SIM_SEED")) {
        return vec![seed];
    }
    (1..=number("RAFT_SIM_RUNS").unwrap_or(CI_SEEDS)).collect()
}

/// Runs `seeds` on as many threads as there are cores (each simulation is
/// single-threaded and deterministic on its own thread).
fn run_all(seeds: &[u64]) -> Vec<(u64, Result<Run, String>)> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(4));
    let next = AtomicU64::new(0);
    let results = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                let Some(&seed) = seeds.get(i) else {
                    return;
                };
                let result = simulate(seed);
                results
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((seed, result));
            });
        }
    });
    let mut results = results.into_inner().unwrap_or_else(|e| e.into_inner());
    results.sort_by_key(|(seed, _)| *seed);
    results
}

/// `RAFT_SIM_LOG=<filter>` (e.g. `baton_cluster=debug`) prints the
/// nodes' logs, to read with a replayed seed.
fn log_if_asked() {
    if let Ok(filter) = std::env::var("RAFT_SIM_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .without_time()
            .try_init();
    }
}

#[test]
fn raft_keeps_locks_exclusive_under_partitions_and_crashes() {
    log_if_asked();
    let seeds = seeds();
    let mut failures = Vec::new();
    let mut total = Run::default();
    for (seed, result) in run_all(&seeds) {
        match result {
            Ok(run) if run.grants > 20 => {
                println!(
                    "seed {seed}: {} grants ({} semaphore or shared), {} releases handed over to a waiter ({} with a follower cut off), {} redirects, {} linearizable queries, {} watches, {} disks replaced, every invariant held",
                    run.grants, run.multi_grants, run.handovers, run.handovers_while_cut, run.redirects, run.queries, run.watches, run.replaced
                );
                total.watches += run.watches;
                total.multi_grants += run.multi_grants;
                total.replaced += run.replaced;
                total.queries += run.queries;
                total.grants += run.grants;
                total.handovers += run.handovers;
                total.handovers_while_cut += run.handovers_while_cut;
                total.redirects += run.redirects;
            }
            Ok(run) => failures.push(format!(
                "seed {seed}: only {} grants: the cluster barely served (rerun with RAFT_SIM_SEED={seed})",
                run.grants
            )),
            Err(problem) => failures.push(format!(
                "seed {seed}: {problem} (rerun with RAFT_SIM_SEED={seed} cargo test -p baton-cluster --test raft_sim)"
            )),
        }
    }
    println!(
        "{} seeds: {} grants ({} semaphore or shared), {} hand-overs behind a release ({} with a follower cut off), {} redirects, {} queries, {} watches, {} disks replaced",
        seeds.len(),
        total.grants,
        total.multi_grants,
        total.handovers,
        total.handovers_while_cut,
        total.redirects,
        total.queries,
        total.watches,
        total.replaced
    );
    assert!(
        failures.is_empty(),
        "{} of {} seeds failed:\n{}",
        failures.len(),
        seeds.len(),
        failures.join("\n")
    );
}
