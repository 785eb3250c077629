//! Resident bytes the lock table adds per held lock, alone (no server),
//! and the longest single grant while it fills (a resize of the index or
//! of the slab shows there):
//! `cargo run --release -p baton-core --example table_bytes [N]`. The
//! same keys as the benchmark's memory scenario; compare with its
//! `memory` row, which measures a whole node.

use std::time::{Duration, Instant};

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
    let mut worst = (Duration::ZERO, 0);
    for i in 0..n {
        let text = format!("bm{}.{}", i % 16, i / 16);
        let Ok(key) = Key::new(text.as_bytes()) else {
            continue;
        };
        let started = Instant::now();
        table.apply(
            &Command::Grant {
                key,
                lease_ms: 3_600_000,
            },
            i / 1000,
        );
        worst = worst.max((started.elapsed(), i));
    }
    let after = rss();
    println!(
        "{n} locks: {} resident bytes per lock ({} held)",
        (after - before) / n,
        table.len()
    );
    println!("longest grant: {:?}, at lock {}", worst.0, worst.1);
}
