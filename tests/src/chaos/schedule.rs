//! The fault schedule: on its own thread (signals and restarts block), a
//! seeded random sequence of kill -9, SIGSTOP/SIGCONT and SIGTERM, each
//! followed by a restart or a resume, aimed more often at the node that
//! served the latest grant. It records when each node was down, for the
//! checker, and what went wrong with the nodes themselves (a graceful stop
//! that hangs or fails, a node that dies on its own or does not restart).

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::chaos::fleet::Fleet;
use crate::chaos::history::{FaultKind, Outage};
use crate::chaos::rng::Rng;

/// What the schedule did and saw.
#[derive(Debug, Default)]
pub struct ScheduleLog {
    pub outages: Vec<Outage>,
    /// Broken promises of the nodes as processes.
    pub problems: Vec<String>,
}

#[derive(Debug, Clone, Copy)]
enum State {
    Up,
    /// Killed or stopped; restarted at `back`. `outage` indexes the log.
    Down {
        outage: usize,
        back: Instant,
    },
    Paused {
        outage: usize,
        back: Instant,
    },
    /// Could not be restarted: out for the rest of the run.
    Dead,
}

/// Runs faults until `until`, then brings every node back.
pub fn run(
    fleet: &mut Fleet,
    rng: &mut Rng,
    start: Instant,
    until: Instant,
    serving: &Arc<AtomicUsize>,
) -> ScheduleLog {
    let mut log = ScheduleLog::default();
    let mut states = vec![State::Up; fleet.nodes.len()];
    let isolate_at = start + (until - start).mul_f64(0.2 + 0.3 * rng.below(1000) as f64 / 1000.0);
    let mut isolated = false;
    let since = |at: Instant| at - start;
    while Instant::now() < until {
        std::thread::sleep(rng.millis(100, 400));
        for (i, state) in states.iter_mut().enumerate() {
            match *state {
                State::Down { back, .. } | State::Paused { back, .. } if Instant::now() >= back => {
                    recover(fleet, i, state, &mut log, start);
                }
                State::Up if !fleet.nodes[i].is_running() => {
                    log.problems.push(format!(
                        "node {i} exited on its own at {:?}",
                        since(Instant::now())
                    ));
                    log.outages.push(Outage {
                        node: i,
                        kind: FaultKind::Kill,
                        from: since(Instant::now()),
                        until: None,
                    });
                    *state = State::Down {
                        outage: log.outages.len() - 1,
                        back: Instant::now(),
                    };
                }
                _ => {}
            }
        }
        let down = states.iter().filter(|s| !matches!(s, State::Up)).count();
        if down >= fleet.mode.max_down() || !rng.chance(50) || Instant::now() >= until {
            continue;
        }
        let up: Vec<usize> = (0..states.len())
            .filter(|i| matches!(states[*i], State::Up))
            .collect();
        let serving_now = serving.load(Ordering::Relaxed);
        // Once per run (and now and then again) every node but the serving
        // one goes, for longer than the answer time: a Raft leader without
        // its majority, a priority active on its own.
        let isolate = !isolated && Instant::now() >= isolate_at || rng.chance(5);
        if down == 0 && up.len() > fleet.mode.max_down() && isolate {
            isolated = true;
            let keep = serving_node(fleet).unwrap_or(serving_now);
            for other in up.iter().copied().filter(|i| *i != keep) {
                if states.iter().filter(|s| !matches!(s, State::Up)).count()
                    >= fleet.mode.max_down()
                {
                    break;
                }
                let kind = pick_kind(rng);
                let out_for = rng.millis(3500, 5000);
                states[other] = inject(fleet, other, kind, out_for, &mut log, start);
            }
            continue;
        }
        let target = if up.contains(&serving_now) && rng.chance(60) {
            serving_now
        } else {
            up[rng.below(up.len() as u64) as usize]
        };
        let kind = pick_kind(rng);
        let out_for = rng.millis(200, 1500);
        states[target] = inject(fleet, target, kind, out_for, &mut log, start);
    }
    for (i, state) in states.iter_mut().enumerate() {
        recover(fleet, i, state, &mut log, start);
    }
    log
}

/// The node that says it serves (`role=active` or `leader`), asked with a
/// blocking `S` on each node in turn.
fn serving_node(fleet: &Fleet) -> Option<usize> {
    let probe = |addr: &std::net::SocketAddr| -> Option<String> {
        let wait = Duration::from_millis(300);
        let mut stream = TcpStream::connect_timeout(addr, wait).ok()?;
        stream.set_read_timeout(Some(wait)).ok()?;
        stream.write_all(b"S\n").ok()?;
        let mut line = String::new();
        BufReader::new(stream).read_line(&mut line).ok()?;
        Some(line)
    };
    fleet.peers.iter().position(|addr| {
        probe(addr).is_some_and(|line| {
            line.split(' ')
                .any(|field| field.trim_end() == "role=active" || field.trim_end() == "role=leader")
        })
    })
}

fn pick_kind(rng: &mut Rng) -> FaultKind {
    match rng.below(100) {
        0..40 => FaultKind::Kill,
        40..70 => FaultKind::Pause,
        _ => FaultKind::Terminate,
    }
}

fn inject(
    fleet: &mut Fleet,
    i: usize,
    kind: FaultKind,
    out_for: Duration,
    log: &mut ScheduleLog,
    start: Instant,
) -> State {
    let from = Instant::now();
    log.outages.push(Outage {
        node: i,
        kind,
        from: from - start,
        until: None,
    });
    let outage = log.outages.len() - 1;
    let node = &mut fleet.nodes[i];
    match kind {
        FaultKind::Kill => node.kill(),
        FaultKind::Pause => {
            // Panics only if the node exited meanwhile: the next round sees it.
            if catch_unwind(AssertUnwindSafe(|| node.stop_signal())).is_err() {
                log.problems
                    .push(format!("node {i}: could not be stopped with SIGSTOP"));
            }
            return State::Paused {
                outage,
                back: from + out_for,
            };
        }
        FaultKind::Terminate => {
            // `terminate` panics when the node outlives 10 s of SIGTERM.
            match catch_unwind(AssertUnwindSafe(|| node.terminate())) {
                Ok(status) if status.success() => {}
                Ok(status) => log.problems.push(format!(
                    "node {i}: graceful stop at {:?} exited with {status}",
                    from - start
                )),
                Err(_) => {
                    log.problems.push(format!(
                        "node {i}: still running 10 s after SIGTERM at {:?}",
                        from - start
                    ));
                    node.kill();
                }
            }
        }
    }
    State::Down {
        outage,
        back: from + out_for,
    }
}

fn recover(fleet: &mut Fleet, i: usize, state: &mut State, log: &mut ScheduleLog, start: Instant) {
    let node = &mut fleet.nodes[i];
    let outage = match *state {
        State::Up | State::Dead => return,
        State::Down { outage, .. } => {
            // `restart` panics when the node does not listen within 10 s.
            if catch_unwind(AssertUnwindSafe(|| node.restart())).is_err() {
                log.problems.push(format!(
                    "node {i} did not start again after {:?}",
                    log.outages[outage]
                ));
                *state = State::Dead;
                return;
            }
            outage
        }
        State::Paused { outage, .. } => {
            if catch_unwind(AssertUnwindSafe(|| node.cont())).is_err() {
                log.problems
                    .push(format!("node {i} did not resume after SIGCONT"));
                *state = State::Dead;
                return;
            }
            outage
        }
    };
    log.outages[outage].until = Some(Instant::now() - start);
    *state = State::Up;
}
