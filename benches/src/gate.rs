//! Protocol 1.2's load on one key, Baton's alone: C connections loop
//! acquire then release at once, each acquire a permit of a semaphore of
//! N (`semaphore`) or a shared grant, with some exclusive ones among them
//! (`shared`). The `Gate` sees every grant from every connection: never
//! more than N holders, never a shared grant beside an exclusive one, no
//! token twice, and each connection's tokens rising. Latency: the grant,
//! from an acquire's send to its answer.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::conn::Conn;
use crate::contended;
use crate::cpu::{CpuUse, Probe};
use crate::error::{BenchError, Violation};
use crate::scenario::{connect_all, join_all, Case, Measured, Scenario};
use crate::stats::Stats;
use crate::window::{Timing, Window};
use crate::wire::{self, Reply};

/// Whether a grant shares the key with other shared grants or excludes
/// them (a semaphore's permits are exclusive grants of a key of N).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Shared,
    Exclusive,
}

/// What the connections of a gate run ask of the key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ask {
    /// Permits of a semaphore of this many (`permits=N`).
    Permits(usize),
    /// Shared grants (`mode=shared`), and this many plain exclusive
    /// acquires in every hundred.
    Shared { exclusive_percent: usize },
}

impl Ask {
    /// The ask of a semaphore or shared case: its depth is the permits,
    /// or the exclusive acquires per hundred.
    pub fn of(case: Case) -> Option<Ask> {
        match case.scenario {
            Scenario::Semaphore => Some(Ask::Permits(case.depth)),
            Scenario::Shared => Some(Ask::Shared {
                exclusive_percent: case.depth,
            }),
            _ => None,
        }
    }

    /// The key's permits: a readers-writer key has one.
    pub fn permits(self) -> usize {
        match self {
            Ask::Permits(n) => n,
            Ask::Shared { .. } => 1,
        }
    }

    /// The access of acquire number `n` of connection `id`: exclusive
    /// ones spread evenly, `exclusive_percent` of any hundred in a row,
    /// and connections offset so that they do not all ask at once.
    pub fn access(self, id: usize, n: u64) -> Access {
        match self {
            Ask::Permits(_) => Access::Exclusive,
            Ask::Shared { exclusive_percent } => {
                let at = n.wrapping_add(id as u64);
                let percent = exclusive_percent as u64;
                if (at + 1) * percent / 100 > at * percent / 100 {
                    Access::Exclusive
                } else {
                    Access::Shared
                }
            }
        }
    }

    /// The acquire line for `access` on `key`.
    fn line(self, key: &[u8], access: Access) -> Vec<u8> {
        let permits = format!("permits={}", self.permits());
        let options: &[&[u8]] = match (self, access) {
            (Ask::Permits(_), _) => &[permits.as_bytes()],
            (Ask::Shared { .. }, Access::Shared) => &[b"mode=shared"],
            (Ask::Shared { .. }, Access::Exclusive) => &[],
        };
        let mut line = Vec::with_capacity(key.len() + 32);
        let cycle = contended::CYCLE;
        wire::acquire_with(&mut line, key, cycle.wait_ms, cycle.lease_ms, options);
        line
    }
}

/// The holders of the one key as the driver sees them: a grant counts
/// from its answer's arrival until just before its release is sent, so
/// the driver's holders are always among the server's, and a correct
/// server never trips a check.
#[derive(Debug)]
pub struct Gate {
    permits: usize,
    state: Mutex<GateState>,
}

#[derive(Debug, Default)]
struct GateState {
    /// (token, client, access), at most `permits` of them.
    holders: Vec<(u64, usize, Access)>,
    /// Every token granted in the run.
    tokens: HashSet<u64>,
    /// Each client's latest token.
    latest: HashMap<usize, u64>,
}

impl Gate {
    pub fn new(permits: usize) -> Self {
        Self {
            permits,
            state: Mutex::new(GateState::default()),
        }
    }

    /// `client` was granted `token` with `access`. Also checks that no
    /// token comes twice and that each client's tokens rise.
    pub fn granted(&self, client: usize, token: u64, access: Access) -> Result<(), Violation> {
        // A panic elsewhere fails the run anyway; the state stays usable.
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if !state.tokens.insert(token) {
            return Err(Violation::TokenReused { client, token });
        }
        // A client asks again only after its release: its grants are in
        // the server's order, so their tokens rise.
        let previous = state.latest.insert(client, token).unwrap_or(0);
        if token <= previous {
            return Err(Violation::TokenNotRising {
                client,
                token,
                previous,
            });
        }
        let conflict = state.holders.iter().find(|(_, _, held)| match access {
            Access::Shared => *held == Access::Exclusive,
            Access::Exclusive => *held == Access::Shared || self.permits == 1,
        });
        if let Some(&(holder_token, holder, _)) = conflict {
            return Err(Violation::Overlap {
                client,
                token,
                holder,
                holder_token,
            });
        }
        if access == Access::Exclusive && state.holders.len() >= self.permits {
            return Err(Violation::OverPermits {
                client,
                token,
                holders: state.holders.len(),
                permits: self.permits,
            });
        }
        state.holders.push((token, client, access));
        Ok(())
    }

    /// The release of `token` is about to be sent.
    pub fn releasing(&self, token: u64) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.holders.retain(|&(held, _, _)| held != token);
    }
}

/// Runs a semaphore or shared case once against the Baton node at `addr`;
/// with a probe, also the CPU its processes used per grant.
pub async fn run(
    addr: SocketAddr,
    case: Case,
    timing: Timing,
    prefix: &str,
    probe: Option<&Probe>,
) -> Result<(Measured, Option<CpuUse>), BenchError> {
    let ask = Ask::of(case)
        .ok_or_else(|| BenchError::Scenario(format!("{} is no gate", case.scenario.name())))?;
    let key: Arc<[u8]> = format!("{prefix}gate").into_bytes().into();
    let conns = connect_all(addr, case.clients).await?;
    let gate = Arc::new(Gate::new(ask.permits()));
    let window = Window::starting_now(timing);
    let mut tasks = JoinSet::new();
    for conn in conns {
        let driver = Driver {
            ask,
            key: Arc::clone(&key),
            gate: Arc::clone(&gate),
            window,
        };
        tasks.spawn(driver.drive(conn));
    }
    let cpu = async {
        match probe {
            Some(probe) => probe.measure(window).await,
            None => None,
        }
    };
    let (total, cpu) = tokio::try_join!(join_all(tasks), async { Ok(cpu.await) })?;
    let measured = Measured {
        rate: total.cycles as f64 / timing.duration.as_secs_f64(),
        p50: total.latency.quantile(0.50),
        p99: total.latency.quantile(0.99),
    };
    Ok((measured, cpu.and_then(|cpu| cpu.per(total.cycles as f64))))
}

/// What one connection's answer was, as far as its loop cares.
enum Got {
    Granted(u64),
    Released,
}

/// One connection's loop on the key.
struct Driver {
    ask: Ask,
    key: Arc<[u8]>,
    gate: Arc<Gate>,
    window: Window,
}

impl Driver {
    /// Acquires and releases until the window stops; a connection holding
    /// or waiting then finishes its cycle so the key is left free.
    async fn drive(self, mut conn: Conn) -> Result<Stats, BenchError> {
        let id = conn.id;
        let lines = [Access::Shared, Access::Exclusive].map(|a| self.ask.line(&self.key, a));
        let line_of = |access| &lines[usize::from(access == Access::Exclusive)];
        let mut stats = Stats::default();
        let mut n = 0u64;
        let mut access = self.ask.access(id, n);
        conn.out.extend_from_slice(line_of(access));
        let mut sent = Instant::now();
        let mut answers = Vec::with_capacity(1);
        let mut holding = false;
        loop {
            let key = &self.key;
            conn.read_answers(&self.window, &mut answers, |line| {
                match wire::parse_reply(line) {
                    Reply::Granted { key: k, token } if *k == **key => Ok(Got::Granted(token)),
                    Reply::Released { key: k } if *k == **key => Ok(Got::Released),
                    Reply::TimedOut { .. } => Err("acquire got no grant within its 10 s wait"),
                    _ => Err("response does not answer the request in flight"),
                }
            })
            .await?;
            let now = Instant::now();
            for answer in answers.drain(..) {
                match (answer, holding) {
                    (Got::Granted(token), false) => {
                        self.gate.granted(id, token, access)?;
                        if self.window.measures(now) {
                            stats.cycles += 1;
                            stats.responses += 1;
                            stats.latency.record(now - sent);
                        }
                        self.gate.releasing(token);
                        wire::release(&mut conn.out, &self.key, token);
                        holding = true;
                    }
                    (Got::Released, true) => {
                        if !self.window.running(now) {
                            return Ok(stats);
                        }
                        n += 1;
                        access = self.ask.access(id, n);
                        conn.out.extend_from_slice(line_of(access));
                        sent = Instant::now();
                        holding = false;
                    }
                    _ => {
                        let problem = "response does not answer the request in flight";
                        return Err(BenchError::protocol(id, problem, &self.key));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test
mod tests {
    use super::*;

    #[test]
    fn a_semaphore_holds_at_most_its_permits() {
        let gate = Gate::new(2);
        gate.granted(0, 10, Access::Exclusive).unwrap();
        gate.granted(1, 11, Access::Exclusive).unwrap();
        assert_eq!(
            gate.granted(2, 12, Access::Exclusive),
            Err(Violation::OverPermits {
                client: 2,
                token: 12,
                holders: 2,
                permits: 2
            })
        );
        gate.releasing(10);
        gate.granted(2, 13, Access::Exclusive).unwrap();
    }

    #[test]
    fn shared_grants_coexist_but_never_with_an_exclusive_one() {
        let gate = Gate::new(1);
        gate.granted(0, 10, Access::Shared).unwrap();
        gate.granted(1, 11, Access::Shared).unwrap();
        assert!(matches!(
            gate.granted(2, 12, Access::Exclusive),
            Err(Violation::Overlap { holder: 0, .. })
        ));
        gate.releasing(10);
        gate.releasing(11);
        gate.granted(2, 13, Access::Exclusive).unwrap();
        assert!(matches!(
            gate.granted(3, 14, Access::Shared),
            Err(Violation::Overlap { holder: 2, .. })
        ));
        assert!(matches!(
            gate.granted(4, 15, Access::Exclusive),
            Err(Violation::Overlap { holder: 2, .. })
        ));
    }

    #[test]
    fn a_token_granted_twice_is_a_violation() {
        let gate = Gate::new(4);
        gate.granted(0, 10, Access::Exclusive).unwrap();
        gate.releasing(10);
        assert_eq!(
            gate.granted(1, 10, Access::Exclusive),
            Err(Violation::TokenReused {
                client: 1,
                token: 10
            })
        );
    }

    #[test]
    fn a_client_whose_tokens_fall_is_a_violation() {
        let gate = Gate::new(4);
        gate.granted(0, 20, Access::Exclusive).unwrap();
        gate.granted(1, 10, Access::Exclusive).unwrap();
        gate.releasing(20);
        assert_eq!(
            gate.granted(0, 15, Access::Exclusive),
            Err(Violation::TokenNotRising {
                client: 0,
                token: 15,
                previous: 20
            })
        );
    }

    #[test]
    fn exclusive_acquires_come_at_the_asked_share() {
        let count = |ask: Ask, id| {
            (0..1000)
                .filter(|&n| ask.access(id, n) == Access::Exclusive)
                .count()
        };
        for percent in [0, 1, 10, 25, 100] {
            let ask = Ask::Shared {
                exclusive_percent: percent,
            };
            assert_eq!(count(ask, 0), percent * 10, "{percent}%");
            assert_eq!(count(ask, 7), percent * 10, "{percent}% offset");
        }
        assert_eq!(count(Ask::Permits(4), 3), 1000);
    }

    #[test]
    fn acquire_lines_carry_the_options() {
        let line = |ask: Ask, access| String::from_utf8(ask.line(b"k", access)).unwrap();
        assert_eq!(
            line(Ask::Permits(4), Access::Exclusive),
            "A k 10 10 permits=4\n"
        );
        let shared = Ask::Shared {
            exclusive_percent: 10,
        };
        assert_eq!(line(shared, Access::Shared), "A k 10 10 mode=shared\n");
        assert_eq!(line(shared, Access::Exclusive), "A k 10 10\n");
    }
}
