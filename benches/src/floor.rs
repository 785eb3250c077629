//! The physical floor of a durable 3-node cluster on this machine, measured
//! in the same run as the targets (issue 14): how long an `fdatasync`
//! after a small append takes in the work dir (where the nodes keep their
//! data), how long a one-line round trip over 127.0.0.1 takes (the server
//! side pinned like every server), and the acquire+release cycle those
//! allow. One durable commit is the leader's fsync in parallel with the
//! follower's receive, fsync and ack: max(fsync, RTT/2 + fsync + RTT/2);
//! a cycle is two commits plus the client's two round trips.

use std::fmt::Write as _;
use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::error::BenchError;
use crate::launch::{Launch, Programs};
use crate::report::latency;
use crate::server::SpawnSettings;
use crate::Target;

/// Bytes appended before each fdatasync: about one small Raft entry.
pub const APPEND_BYTES: usize = 100;
/// fsync samples at most, and the time they may take.
const FSYNC_SAMPLES: usize = 300;
const FSYNC_BUDGET: Duration = Duration::from_millis(900);
/// Round-trip samples at most (after a few unmeasured), and their time.
const RTT_SAMPLES: usize = 2000;
const RTT_WARMUP: usize = 50;
const RTT_BUDGET: Duration = Duration::from_millis(400);
/// One round trip that takes this long means the echo server is gone.
const RTT_TIMEOUT: Duration = Duration::from_secs(2);

/// Latency samples of one kind, sorted.
#[derive(Clone, Debug, PartialEq)]
pub struct Samples {
    sorted: Vec<Duration>,
}

impl Samples {
    pub fn new(mut samples: Vec<Duration>) -> Self {
        samples.sort_unstable();
        Self { sorted: samples }
    }

    pub fn len(&self) -> usize {
        self.sorted.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sorted.is_empty()
    }

    /// The nearest-rank quantile `q` (0 < q <= 1); zero when empty.
    pub fn quantile(&self, q: f64) -> Duration {
        debug_assert!(q > 0.0 && q <= 1.0, "quantile {q}");
        let n = self.sorted.len();
        if n == 0 {
            return Duration::ZERO;
        }
        // Rank ceil(q * n), 1-based; the float is at most n.
        let rank = ((q * n as f64).ceil() as usize).clamp(1, n);
        self.sorted[rank - 1]
    }
}

/// What was measured, and what it allows.
#[derive(Clone, Debug, PartialEq)]
pub struct Floor {
    pub fsync: Samples,
    pub rtt: Samples,
}

impl Floor {
    pub fn fsync_p50(&self) -> Duration {
        self.fsync.quantile(0.5)
    }

    pub fn rtt_p50(&self) -> Duration {
        self.rtt.quantile(0.5)
    }

    /// One durable commit: the leader's fsync, or the follower's round
    /// (half a trip out, its fsync, half a trip back), whichever is longer.
    pub fn commit(&self) -> Duration {
        let (fsync, rtt) = (self.fsync_p50(), self.rtt_p50());
        fsync.max(rtt / 2 + fsync + rtt / 2)
    }

    /// One acquire+release cycle at C=1: two commits and the client's two
    /// round trips.
    pub fn cycle(&self) -> Duration {
        2 * self.commit() + 2 * self.rtt_p50()
    }

    /// The cycles per second one client can reach at best: 1 / cycle.
    pub fn cycles_per_sec(&self) -> f64 {
        match self.cycle().as_secs_f64() {
            secs if secs > 0.0 => 1.0 / secs,
            _ => 0.0,
        }
    }
}

/// Measures the floor: fsync in a fresh directory of the work dir, then
/// round trips to an echo server started like the echo target. Takes
/// about 1.5 s at most, plus the echo server's start.
pub async fn measure(programs: &Programs, settings: &SpawnSettings) -> Result<Floor, BenchError> {
    let dir = settings.fresh_dir("floor")?;
    let path = dir.join("fsync.log");
    let fsync = tokio::task::spawn_blocking(move || fsync_samples(&path)).await;
    // Best effort, like every server's directory.
    let _ = std::fs::remove_dir_all(&dir);
    let fsync = fsync?.map_err(|source| BenchError::Setup {
        what: format!("append and fdatasync in {}", dir.display()),
        source,
    })?;
    let launch = Launch::for_target(Target::Echo, programs).map_err(BenchError::Scenario)?;
    let server = launch.start(settings).await?;
    let addr = server.addr();
    let rtt = tokio::task::spawn_blocking(move || rtt_samples(addr)).await;
    server.stop().await;
    let rtt = rtt?.map_err(|source| BenchError::Setup {
        what: format!("time round trips to the echo server on {addr}"),
        source,
    })?;
    Ok(Floor { fsync, rtt })
}

/// Appends `APPEND_BYTES` and fdatasyncs, until enough samples or time.
fn fsync_samples(path: &Path) -> std::io::Result<Samples> {
    let mut file = std::fs::OpenOptions::new()
        .create_new(true)
        .append(true)
        .open(path)?;
    let mut entry = [b'e'; APPEND_BYTES];
    entry[APPEND_BYTES - 1] = b'\n';
    let mut samples = Vec::with_capacity(FSYNC_SAMPLES);
    let started = Instant::now();
    while samples.len() < FSYNC_SAMPLES && started.elapsed() < FSYNC_BUDGET {
        file.write_all(&entry)?;
        let before = Instant::now();
        // fdatasync(2) on Linux: what a log append needs to be durable.
        file.sync_data()?;
        samples.push(before.elapsed());
    }
    Ok(Samples::new(samples))
}

/// Times one-line requests (`R k 1` -> `R k`) on one blocking connection.
fn rtt_samples(addr: SocketAddr) -> std::io::Result<Samples> {
    let mut stream = TcpStream::connect_timeout(&addr, RTT_TIMEOUT)?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(RTT_TIMEOUT))?;
    let mut samples = Vec::with_capacity(RTT_SAMPLES);
    let mut answer = [0u8; 64];
    let started = Instant::now();
    let mut sent = 0;
    while samples.len() < RTT_SAMPLES && started.elapsed() < RTT_BUDGET {
        let before = Instant::now();
        stream.write_all(b"R k 1\n")?;
        read_line(&mut stream, &mut answer)?;
        let took = before.elapsed();
        sent += 1;
        // The first trips pay for the connection's and caches' warm-up.
        if sent > RTT_WARMUP {
            samples.push(took);
        }
    }
    if samples.is_empty() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("fewer than {RTT_WARMUP} round trips within {RTT_BUDGET:?}"),
        ));
    }
    Ok(Samples::new(samples))
}

/// Reads one answer line (it fits `buf`; the echo server's is 4 bytes).
fn read_line(stream: &mut TcpStream, buf: &mut [u8]) -> std::io::Result<()> {
    let mut filled = 0;
    while filled < buf.len() {
        let read = stream.read(&mut buf[filled..])?;
        if read == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        filled += read;
        if buf[..filled].contains(&b'\n') {
            return Ok(());
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        "echo answer longer than expected",
    ))
}

/// The floor's figures, one per line: (what, value, how it was had).
fn lines(floor: &Floor) -> [(&'static str, String, String); 5] {
    let fsync = &floor.fsync;
    let rtt = &floor.rtt;
    [
        (
            "fsync (fdatasync after a 100-byte append), p50",
            latency(Some(floor.fsync_p50())),
            format!(
                "p90 {}, {} samples, in the work dir",
                latency(Some(fsync.quantile(0.9))),
                fsync.len()
            ),
        ),
        (
            "loopback round trip (one line, 127.0.0.1), p50",
            latency(Some(floor.rtt_p50())),
            format!(
                "p90 {}, {} samples, echo server on the server CPU",
                latency(Some(rtt.quantile(0.9))),
                rtt.len()
            ),
        ),
        (
            "durable commit",
            latency(Some(floor.commit())),
            "max(fsync, RTT/2 + fsync + RTT/2)".into(),
        ),
        (
            "cycle (acquire + release)",
            latency(Some(floor.cycle())),
            "2 commits + 2 client round trips".into(),
        ),
        (
            "cycles/s at C=1",
            format!("{:.0}", floor.cycles_per_sec()),
            "1 / cycle".into(),
        ),
    ]
}

/// The floor as a Markdown table.
pub fn markdown(floor: &Floor) -> String {
    let mut out = String::from("| floor | value | how |\n|---|---:|---|\n");
    for (what, value, how) in lines(floor) {
        let _ = writeln!(out, "| {what} | {value} | {how} |");
    }
    out
}

/// The floor for the console, aligned, each line starting with `# floor:`.
pub fn console(floor: &Floor) -> String {
    let lines = lines(floor);
    let what = lines.iter().map(|l| l.0.len()).max().unwrap_or(0);
    let value = lines.iter().map(|l| l.1.len()).max().unwrap_or(0);
    let mut out = String::new();
    for (w, v, how) in lines {
        let _ = writeln!(out, "# floor: {w:<what$}  {v:>value$}  ({how})");
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test
mod tests {
    use super::*;

    fn us(values: &[u64]) -> Samples {
        Samples::new(values.iter().map(|&v| Duration::from_micros(v)).collect())
    }

    /// fsync 130 us, RTT 20 us at the median.
    fn floor() -> Floor {
        Floor {
            fsync: us(&[200, 130, 120, 140, 125]),
            rtt: us(&[20, 18, 25, 19, 21, 22]),
        }
    }

    #[test]
    fn nearest_rank_quantiles() {
        let samples = us(&[5, 1, 4, 2, 3]);
        assert_eq!(samples.quantile(0.5), Duration::from_micros(3));
        assert_eq!(samples.quantile(0.9), Duration::from_micros(5));
        assert_eq!(samples.quantile(1.0), Duration::from_micros(5));
        assert_eq!(samples.quantile(0.01), Duration::from_micros(1));
        let even = us(&[10, 20, 30, 40]);
        assert_eq!(even.quantile(0.5), Duration::from_micros(20));
        assert_eq!(us(&[]).quantile(0.5), Duration::ZERO);
    }

    #[test]
    fn commit_cycle_and_rate_from_fsync_and_rtt() {
        let floor = floor();
        assert_eq!(floor.fsync_p50(), Duration::from_micros(130));
        assert_eq!(floor.rtt_p50(), Duration::from_micros(20));
        // The follower's round is the longer: 10 + 130 + 10.
        assert_eq!(floor.commit(), Duration::from_micros(150));
        // 2 x 150 + 2 x 20.
        assert_eq!(floor.cycle(), Duration::from_micros(340));
        assert!((floor.cycles_per_sec() - 1e6 / 340.0).abs() < 1e-6);
    }

    #[test]
    fn nothing_measured_allows_nothing() {
        let empty = Floor {
            fsync: us(&[]),
            rtt: us(&[]),
        };
        assert_eq!(empty.cycle(), Duration::ZERO);
        assert_eq!(empty.cycles_per_sec(), 0.0);
    }

    #[test]
    fn markdown_table() {
        let text = markdown(&floor());
        let rows: Vec<&str> = text.lines().collect();
        assert_eq!(rows[0], "| floor | value | how |");
        assert_eq!(rows.len(), 7, "{text}");
        assert_eq!(
            rows[2],
            "| fsync (fdatasync after a 100-byte append), p50 | 130.0us | p90 200.0us, 5 samples, in the work dir |"
        );
        assert!(
            rows[3].contains("| 20.0us | p90 25.0us, 6 samples"),
            "{text}"
        );
        assert_eq!(
            rows[4],
            "| durable commit | 150.0us | max(fsync, RTT/2 + fsync + RTT/2) |"
        );
        assert_eq!(
            rows[5],
            "| cycle (acquire + release) | 340.0us | 2 commits + 2 client round trips |"
        );
        assert_eq!(rows[6], "| cycles/s at C=1 | 2941 | 1 / cycle |");
    }

    #[test]
    fn console_lines_align() {
        let text = console(&floor());
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 5);
        assert!(lines.iter().all(|l| l.starts_with("# floor: ")), "{text}");
        let at: Vec<usize> = lines.iter().map(|l| l.find("  (").unwrap()).collect();
        assert!(at.windows(2).all(|w| w[0] == w[1]), "{text}");
        assert!(lines[4].contains("2941  (1 / cycle)"), "{text}");
    }

    #[test]
    fn fsync_probe_appends_and_is_bounded() {
        let dir = std::env::temp_dir().join(format!("baton-bench-floor-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("fsync.log");
        let started = Instant::now();
        let samples = fsync_samples(&path).unwrap();
        assert!(started.elapsed() < FSYNC_BUDGET + Duration::from_millis(500));
        assert!(!samples.is_empty() && samples.len() <= FSYNC_SAMPLES);
        let written = std::fs::metadata(&path).unwrap().len();
        assert_eq!(written, (samples.len() * APPEND_BYTES) as u64);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
