//! The flood scenarios: N locks end together on a fresh server while a
//! probe client goes on with its own acquire-release cycles.
//!
//! First N locks are taken, pipelined on a few connections, with leases
//! far longer than the run. Then they all end at once:
//! - **expiry-flood**: each is renewed, pipelined, with a lease that runs
//!   out at one instant (a lease counts from its renewal, so a renewal
//!   sent at `t` asks for `end - t`), a little after the renewals'
//!   expected end. The leases then lapse together, as a fleet's do when
//!   it loses its network at once, which a plain grant cannot arrange
//!   (its leases would end as spread out as the grants were taken).
//! - **release-flood**: each is released, pipelined, as fast as the node
//!   takes them.
//!
//! Figures: the seconds from the flood's end instant (the leases' end, or
//! the first release sent) until the serving node's `S` says every lock is
//! gone; the probe's request latencies (p50, p99, max); and how often the
//! serving node's role or term changed (`S`, polled all along).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::{sleep, Instant};

use crate::conn::Conn;
use crate::error::BenchError;
use crate::histogram::Histogram;
use crate::scenario::{Case, Measured, Scenario};
use crate::server::{Server, SpawnSettings};
use crate::status;
use crate::window::Window;
use crate::wire::{self, Reply};

/// Connections the locks are spread over (the fleet used 8), and
/// requests in flight on each.
const CONNECTIONS: usize = 8;
const IN_FLIGHT: usize = 256;
/// Leases of the locks as first taken: far beyond any run.
const HOLD_LEASE_MS: u64 = 3_600_000;
/// The renewals are expected to take as long as the grants did; the
/// leases end this long after that, so that none lapses before the last
/// renewal is sent.
const END_MARGIN: Duration = Duration::from_secs(1);
/// Generous: a million pipelined requests on a slow, shared machine.
const PHASE_LIMIT: Duration = Duration::from_secs(300);
/// The probe's pause between two cycles, and its wait and lease.
const PROBE_EVERY: Duration = Duration::from_millis(10);
const PROBE_WAIT_MS: u64 = 5_000;
const PROBE_LEASE_MS: u64 = 10_000;
/// How often `S` is polled for the lock count and the role.
const POLL_EVERY: Duration = Duration::from_millis(20);
/// The probe's connection id in error messages (after the fleet's).
const PROBE_ID: usize = CONNECTIONS;

/// Locks the node must allow beyond the flood's: the probe's.
const PROBE_HEADROOM: usize = 16;

/// The spawn settings of `case`: a flood's nodes allow its locks and the
/// probe's (the default cap is a million held at once).
pub fn settings_for(case: Case, settings: &SpawnSettings) -> SpawnSettings {
    let mut settings = settings.clone();
    if matches!(
        case.scenario,
        Scenario::ExpiryFlood | Scenario::ReleaseFlood
    ) {
        let most = case.clients.saturating_add(PROBE_HEADROOM).to_string();
        settings
            .batond_args
            .extend(["--max-locks".into(), most.into()]);
    }
    settings
}

/// What one flood measured, beyond the table's figures.
#[derive(Clone, Debug)]
pub struct Flood {
    pub measured: Measured,
    /// Seconds the N locks took to be taken, and to be renewed (expiry).
    pub filled_in: Duration,
    pub burst_in: Duration,
    pub probe_max: Option<Duration>,
    /// When the slowest probe request was sent, in seconds from the end
    /// instant (negative: during the renewals).
    pub probe_max_at: Option<f64>,
    pub probes: u64,
    /// Changes of the serving node's (role, term) seen while polling.
    pub role_changes: u64,
}

impl Flood {
    /// One line for the console and the notes.
    pub fn describe(&self, scenario: Scenario, locks: usize) -> String {
        let ms = |d: Option<Duration>| d.map_or("-".into(), |d| format!("{:.1} ms", ms(d)));
        format!(
            "{} N={locks}: taken in {:.1} s, {} in {:.1} s; all gone {:.2} s after their end; \
             probe ({} requests) p50 {} p99 {} max {} (sent at {}); role changes {}",
            scenario.name(),
            self.filled_in.as_secs_f64(),
            if scenario == Scenario::ExpiryFlood {
                "renewed"
            } else {
                "released"
            },
            self.burst_in.as_secs_f64(),
            self.measured.rate,
            self.probes,
            ms(self.measured.p50),
            ms(self.measured.p99),
            ms(self.probe_max),
            self.probe_max_at
                .map_or("-".into(), |at| format!("{at:+.2} s")),
            self.role_changes,
        )
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Runs `scenario` (expiry-flood or release-flood) with `locks` locks on
/// a fresh `server`.
pub async fn run(
    server: &Server,
    scenario: Scenario,
    locks: usize,
    prefix: &str,
) -> Result<Flood, BenchError> {
    let addr = server.addr();
    let started = Instant::now();
    let mut fleet = Vec::new();
    let mut takers = JoinSet::new();
    for id in 0..CONNECTIONS.min(locks) {
        let count = locks / CONNECTIONS + usize::from(id < locks % CONNECTIONS);
        let keys = (0..count).map(|i| format!("{prefix}f{id}.{i}").into_bytes());
        let conn = Conn::connect(id, addr).await?;
        takers.spawn(take(conn, keys.collect()));
    }
    while let Some(taken) = takers.join_next().await {
        fleet.push(taken??);
    }
    let filled_in = started.elapsed();
    let stop = Arc::new(AtomicBool::new(false));
    let probe = tokio::spawn(probe(addr, prefix.to_owned(), Arc::clone(&stop)));
    let burst_from = Instant::now();
    let end_at = match scenario {
        Scenario::ExpiryFlood => burst_from + filled_in + END_MARGIN,
        _ => burst_from,
    };
    let mut tasks = JoinSet::new();
    for held in fleet {
        tasks.spawn(end_all(held, scenario, end_at));
    }
    let watched = watch_until_gone(addr, &mut tasks).await;
    stop.store(true, Ordering::Relaxed);
    let (gone_at, role_changes, burst_done) = watched?;
    let Probes {
        latencies: probes,
        slowest,
    } = probe.await??;
    Ok(Flood {
        measured: Measured {
            rate: gone_at.saturating_duration_since(end_at).as_secs_f64(),
            p50: probes.quantile(0.50),
            p99: probes.quantile(0.99),
        },
        filled_in,
        burst_in: burst_done.saturating_duration_since(burst_from),
        probe_max: slowest.map(|(took, _)| took),
        probe_max_at: slowest.map(|(_, sent)| signed_seconds(sent, end_at)),
        probes: probes.len(),
        role_changes,
    })
}

/// A connection of the fleet with its keys and their tokens.
struct Held {
    conn: Conn,
    keys: Vec<Vec<u8>>,
    tokens: Vec<u64>,
}

fn phase_window() -> Window {
    let now = Instant::now();
    Window {
        measure_from: now,
        stop_at: now + PHASE_LIMIT,
        give_up_at: now + PHASE_LIMIT,
        drain: PHASE_LIMIT,
    }
}

/// The index of the fleet key in an answer (`...f<id>.<i>`).
fn slot_of(key: &[u8]) -> Option<usize> {
    let at = key.iter().rposition(|&b| b == b'.')?;
    std::str::from_utf8(&key[at + 1..]).ok()?.parse().ok()
}

/// Sends request `i` for each of `count` slots with `write`, `IN_FLIGHT`
/// at a time; `read` checks each answer and names its slot.
async fn pipeline(
    conn: &mut Conn,
    count: usize,
    mut write: impl FnMut(usize, &mut Vec<u8>),
    mut read: impl FnMut(&[u8]) -> Result<usize, &'static str>,
) -> Result<(), BenchError> {
    let window = phase_window();
    let (mut sent, mut answered) = (0, 0);
    let mut answers = Vec::with_capacity(IN_FLIGHT);
    while answered < count {
        while sent < count && sent - answered < IN_FLIGHT {
            write(sent, &mut conn.out);
            sent += 1;
        }
        conn.read_answers(&window, &mut answers, &mut read).await?;
        answered += answers.len();
        answers.clear();
    }
    Ok(())
}

/// Takes every key of `conn` with a long lease.
async fn take(mut conn: Conn, keys: Vec<Vec<u8>>) -> Result<Held, BenchError> {
    let mut tokens = vec![0; keys.len()];
    pipeline(
        &mut conn,
        keys.len(),
        |i, out| wire::acquire(out, &keys[i], 0, HOLD_LEASE_MS),
        |line| match wire::parse_reply(line) {
            Reply::Granted { key, token } => {
                let slot = slot_of(key).filter(|&s| s < tokens.len());
                let slot = slot.ok_or("a grant of a key not asked for")?;
                tokens[slot] = token;
                Ok(slot)
            }
            _ => Err("a lock of the flood was not granted"),
        },
    )
    .await?;
    Ok(Held { conn, keys, tokens })
}

/// Renews every lock of `held` to end at `end_at`, or releases them all;
/// returns when the last answer came.
async fn end_all(
    mut held: Held,
    scenario: Scenario,
    end_at: Instant,
) -> Result<Instant, BenchError> {
    let Held { conn, keys, tokens } = &mut held;
    let expiry = scenario == Scenario::ExpiryFlood;
    let write = |i: usize, out: &mut Vec<u8>| {
        if expiry {
            let left = end_at.saturating_duration_since(Instant::now());
            renew(out, &keys[i], tokens[i], (left.as_millis() as u64).max(1));
        } else {
            wire::release(out, &keys[i], tokens[i]);
        }
    };
    let (op, refused) = match expiry {
        true => (b'K', "a renewal of the flood was refused"),
        false => (b'R', "a release of the flood was refused"),
    };
    let read = |line: &[u8]| {
        let key = line.strip_prefix(&[op, b' '][..]);
        key.filter(|k| !k.contains(&b' '))
            .and_then(slot_of)
            .ok_or(refused)
    };
    pipeline(conn, keys.len(), write, read).await?;
    Ok(Instant::now())
}

/// Appends `K <key> <token> <lease>\n`.
fn renew(out: &mut Vec<u8>, key: &[u8], token: u64, lease_ms: u64) {
    out.extend_from_slice(b"K ");
    out.extend_from_slice(key);
    out.push(b' ');
    wire::push_u64(out, token);
    out.push(b' ');
    wire::push_seconds(out, lease_ms);
    out.push(b'\n');
}

/// Polls the serving node's `S` until the fleet's tasks are done and it
/// holds no lock but the probe's; returns when that was seen, the changes
/// of role or term seen meanwhile, and when the last task ended.
async fn watch_until_gone(
    addr: SocketAddr,
    tasks: &mut JoinSet<Result<Instant, BenchError>>,
) -> Result<(Instant, u64, Instant), BenchError> {
    let give_up_at = Instant::now() + PHASE_LIMIT;
    let (mut seen, mut changes) = (None, 0);
    let mut burst_done = Instant::now();
    loop {
        while let Some(done) = tasks.try_join_next() {
            burst_done = burst_done.max(done??);
        }
        if let Some(status) = status::query(addr, Duration::from_secs(1)).await {
            let role = (
                status.get("role").map(str::to_owned),
                status.get("term").map(str::to_owned),
            );
            if seen.as_ref().is_some_and(|s| *s != role) {
                changes += 1;
            }
            seen = Some(role);
            if tasks.is_empty() && status.number("locks").is_some_and(|n| n <= 1) {
                return Ok((Instant::now(), changes, burst_done));
            }
        }
        if Instant::now() > give_up_at {
            return Err(BenchError::Scenario(format!(
                "flood: locks still held {PHASE_LIMIT:?} after the flood began"
            )));
        }
        sleep(POLL_EVERY).await;
    }
}

/// Acquire-release cycles on keys of its own until `stop`; every
/// request's latency.
/// The probe's request latencies, and its slowest request's with when it
/// was sent.
#[derive(Default)]
struct Probes {
    latencies: Histogram,
    slowest: Option<(Duration, Instant)>,
}

impl Probes {
    fn record(&mut self, sent: Instant) {
        let took = sent.elapsed();
        self.latencies.record(took);
        if self.slowest.is_none_or(|(most, _)| took > most) {
            self.slowest = Some((took, sent));
        }
    }
}

/// `at - from` in seconds, negative if `at` came first.
fn signed_seconds(at: Instant, from: Instant) -> f64 {
    match at.checked_duration_since(from) {
        Some(after) => after.as_secs_f64(),
        None => -from.saturating_duration_since(at).as_secs_f64(),
    }
}

async fn probe(
    addr: SocketAddr,
    prefix: String,
    stop: Arc<AtomicBool>,
) -> Result<Probes, BenchError> {
    let mut conn = Conn::connect(PROBE_ID, addr).await?;
    let mut latencies = Probes::default();
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let key = format!("{prefix}probe{n}").into_bytes();
        wire::acquire(&mut conn.out, &key, PROBE_WAIT_MS, PROBE_LEASE_MS);
        let line = ask(&mut conn, &mut latencies).await?;
        let Reply::Granted { token, .. } = wire::parse_reply(&line) else {
            return Err(BenchError::protocol(PROBE_ID, "probe not granted", &line));
        };
        wire::release(&mut conn.out, &key, token);
        let line = ask(&mut conn, &mut latencies).await?;
        if !matches!(wire::parse_reply(&line), Reply::Released { .. }) {
            return Err(BenchError::protocol(PROBE_ID, "probe not released", &line));
        }
        sleep(PROBE_EVERY).await;
    }
    Ok(latencies)
}

/// Sends what `conn` has queued and reads one answer line, timing it.
async fn ask(conn: &mut Conn, latencies: &mut Probes) -> Result<Vec<u8>, BenchError> {
    let sent = Instant::now();
    let give_up_at = sent + PHASE_LIMIT;
    conn.flush(give_up_at, PHASE_LIMIT).await?;
    loop {
        if let Some(line) = conn.lines.next_line() {
            latencies.record(sent);
            return Ok(line.to_vec());
        }
        conn.fill(give_up_at, PHASE_LIMIT).await?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_come_from_the_key() {
        assert_eq!(slot_of(b"p1r0f3.17"), Some(17));
        assert_eq!(slot_of(b"p1r0f3."), None);
        assert_eq!(slot_of(b"nodot"), None);
    }

    #[test]
    fn a_renewal_line() {
        let mut out = Vec::new();
        renew(&mut out, b"k", 7, 1_250);
        assert_eq!(out, b"K k 7 1.25\n");
    }
}
