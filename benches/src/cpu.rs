//! CPU time of the server processes the bench spawned, over the measured
//! stretch of a run: how many microseconds of CPU the serving node (the
//! single node, the priority active, the Raft or etcd leader) spent per
//! cycle (per request when pipelined), the same for the other nodes
//! together (standbys, followers), and each side's share of the wall time,
//! which on the one server core all of them share is their share of it.
//!
//! Time is read from Linux's `/proc/PID/task/*/schedstat` (nanoseconds on
//! the CPU, per thread) and, where the kernel has no scheduler statistics,
//! from `/proc/PID/stat` (utime + stime of the whole process, in clock
//! ticks of 10 ms). Elsewhere nothing is read and nothing is reported.

use std::fmt::Write as _;
use std::time::Duration;

use tokio::time::{sleep_until, Instant};

use crate::report::median;
use crate::scenario::Case;
use crate::server::Server;
use crate::window::Window;

/// Clock ticks per second of `/proc/PID/stat` (USER_HZ, 100 on Linux).
const TICKS_PER_SECOND: u64 = 100;

/// The processes to read: the serving one and the others.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Probe {
    serving: u32,
    others: Vec<u32>,
}

impl Probe {
    /// The probe of `server`'s spawned processes; `None` when the bench did
    /// not start the serving one (an external server).
    pub fn of(server: &Server) -> Option<Self> {
        let serving = server.pid()?;
        Some(Self {
            serving,
            others: server.other_pids(),
        })
    }

    /// Reads every process at the start and the end of `window`'s measured
    /// stretch (sleeping until each) and returns the CPU it used then, or
    /// `None` if a process could not be read.
    pub async fn measure(&self, window: Window) -> Option<CpuTime> {
        sleep_until(window.measure_from).await;
        let begun = Instant::now();
        let before = self.read()?;
        sleep_until(window.stop_at).await;
        let after = self.read()?;
        let wall = begun.elapsed();
        Some(CpuTime {
            serving: after.0.saturating_sub(before.0),
            others: after.1.saturating_sub(before.1),
            other_count: self.others.len(),
            wall,
        })
    }

    /// (serving, sum of the others) CPU time so far.
    fn read(&self) -> Option<(Duration, Duration)> {
        let serving = process_cpu(self.serving)?;
        let mut others = Duration::ZERO;
        for &pid in &self.others {
            others += process_cpu(pid)?;
        }
        Some((serving, others))
    }
}

/// CPU used over one measured stretch of `wall`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CpuTime {
    pub serving: Duration,
    /// All other nodes of the server together.
    pub others: Duration,
    pub other_count: usize,
    pub wall: Duration,
}

impl CpuTime {
    /// Per unit of work, for `count` cycles (or requests) in the stretch.
    pub fn per(&self, count: f64) -> Option<CpuUse> {
        let wall = self.wall.as_secs_f64();
        if count <= 0.0 || wall <= 0.0 {
            return None;
        }
        let us = |d: Duration| d.as_secs_f64() * 1e6 / count;
        Some(CpuUse {
            serving_us: us(self.serving),
            others_us: us(self.others),
            serving_share: self.serving.as_secs_f64() / wall,
            others_share: self.others.as_secs_f64() / wall,
            other_count: self.other_count,
        })
    }
}

/// CPU per cycle (or request) and share of the wall time, of the serving
/// node and of the others together.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CpuUse {
    pub serving_us: f64,
    pub others_us: f64,
    pub serving_share: f64,
    pub others_share: f64,
    pub other_count: usize,
}

impl CpuUse {
    /// The median of each figure over the runs that have one.
    pub fn median_of(runs: &[CpuUse]) -> Option<CpuUse> {
        let first = runs.first()?;
        let pick = |f: fn(&CpuUse) -> f64| median(runs.iter().map(f).collect()).unwrap_or(0.0);
        Some(CpuUse {
            serving_us: pick(|c| c.serving_us),
            others_us: pick(|c| c.others_us),
            serving_share: pick(|c| c.serving_share),
            others_share: pick(|c| c.others_share),
            other_count: first.other_count,
        })
    }

    /// One short line: `serving 12.3us/cycle (81%); 2 others 4.5us (30%)`.
    pub fn describe(&self, case: &Case) -> String {
        let per = match case.scenario {
            crate::Scenario::Pipelined => "req",
            _ => "cycle",
        };
        // Two decimals below 10 us: a request of a pipelined run takes
        // about 1 us, and one decimal hides a 10% difference.
        let us = |v: f64| {
            if v < 10.0 {
                format!("{v:.2}")
            } else {
                format!("{v:.1}")
            }
        };
        let mut text = format!(
            "serving {}us/{per} ({:.0}% of the core)",
            us(self.serving_us),
            self.serving_share * 100.0
        );
        if self.other_count > 0 {
            let _ = write!(
                text,
                "; {} other(s) {}us/{per} ({:.0}%)",
                self.other_count,
                us(self.others_us),
                self.others_share * 100.0
            );
        }
        text
    }
}

/// The CPU time process `pid` has used so far, all its threads.
fn process_cpu(pid: u32) -> Option<Duration> {
    schedstat_cpu(pid).or_else(|| stat_cpu(pid))
}

/// Sum over the threads of the first field of their `schedstat` (ns on
/// the CPU). A thread that ended inside the window loses its time here,
/// which the servers measured (fixed thread pools) do not do under load.
fn schedstat_cpu(pid: u32) -> Option<Duration> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut total = 0u64;
    for task in tasks.flatten() {
        // A thread that ended since the listing counts for nothing, as
        // one that ended before it.
        let Ok(text) = std::fs::read_to_string(task.path().join("schedstat")) else {
            continue;
        };
        total += parse_schedstat(&text)?;
    }
    Some(Duration::from_nanos(total))
}

fn parse_schedstat(text: &str) -> Option<u64> {
    text.split_whitespace().next()?.parse().ok()
}

fn stat_cpu(pid: u32) -> Option<Duration> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let ticks = parse_stat_ticks(&text)?;
    Some(Duration::from_millis(ticks * 1000 / TICKS_PER_SECOND))
}

/// utime + stime (fields 14 and 15) of a `/proc/PID/stat` line. The
/// command name (field 2) may hold spaces and parentheses: fields are
/// counted from the last `)`.
fn parse_stat_ticks(text: &str) -> Option<u64> {
    let (_, rest) = text.rsplit_once(')')?;
    // `rest` starts at field 3 (the state).
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test
mod tests {
    use super::*;
    use crate::Scenario;

    #[test]
    fn parses_stat_past_a_name_with_spaces() {
        let line = "1234 (bat ond) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 4 0";
        assert_eq!(parse_stat_ticks(line), Some(325));
        assert_eq!(parse_stat_ticks("garbage"), None);
    }

    #[test]
    fn parses_schedstat() {
        assert_eq!(parse_schedstat("123456789 2000 17\n"), Some(123_456_789));
        assert_eq!(parse_schedstat(""), None);
    }

    /// A child that spins, so that its CPU time grows between readings.
    /// Not this process: the harness's other test threads end at any
    /// moment, and an ended thread's time leaves the sum.
    #[test]
    fn reads_a_spinning_process() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .spawn()
            .expect("sh");
        let pid = child.id();
        let first = process_cpu(pid);
        let start = std::time::Instant::now();
        let mut grew = false;
        while !grew && start.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(20));
            grew = process_cpu(pid) > first;
        }
        let _ = child.kill();
        let _ = child.wait();
        assert!(first.is_some(), "no reading of a running process");
        assert!(grew, "a spinning process's CPU time did not grow");
    }

    #[test]
    fn per_cycle_and_shares() {
        let time = CpuTime {
            serving: Duration::from_millis(600),
            others: Duration::from_millis(300),
            other_count: 2,
            wall: Duration::from_secs(1),
        };
        let use_ = time.per(30_000.0).unwrap();
        assert!((use_.serving_us - 20.0).abs() < 1e-9);
        assert!((use_.others_us - 10.0).abs() < 1e-9);
        assert!((use_.serving_share - 0.6).abs() < 1e-9);
        assert!((use_.others_share - 0.3).abs() < 1e-9);
        assert_eq!(time.per(0.0), None);
        let case = Case {
            scenario: Scenario::Uncontended,
            clients: 16,
            depth: 1,
        };
        assert_eq!(
            use_.describe(&case),
            "serving 20.0us/cycle (60% of the core); 2 other(s) 10.0us/cycle (30%)"
        );
        let median = CpuUse::median_of(&[use_, use_]).unwrap();
        assert_eq!(median, use_);
        assert_eq!(CpuUse::median_of(&[]), None);
    }
}
