//! Resident bytes the lock table adds per held lock, alone (no server):
//! `cargo run --release -p baton-core --example table_bytes [N]`. The
//! same keys as the benchmark's memory scenario; compare with its
//! `memory` row, which measures a whole node.

use baton_core::{Command, Key, LockTable};

/// This process's resident set, from `/proc/self/status`.
fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kib| kib.parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let mut table = LockTable::new();
    let before = rss();
    for i in 0..n {
        let text = format!("bm{}.{}", i % 16, i / 16);
        let Ok(key) = Key::new(text.as_bytes()) else {
            continue;
        };
        table.apply(
            &Command::Grant {
                key,
                lease_ms: 3_600_000,
            },
            i / 1000,
        );
    }
    let after = rss();
    println!(
        "{n} locks: {} resident bytes per lock ({} held)",
        (after - before) / n,
        table.len()
    );
}
