//! The longest single grant while filling a table (a resize of its index
//! or slab shows up here): `cargo run --release -p baton-core --example
//! table_stall [N]`.

use std::time::{Duration, Instant};

use baton_core::{Command, Key, LockTable};

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let mut table = LockTable::new();
    let mut worst = (Duration::ZERO, 0);
    let mut over_ms = Vec::new();
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
        let took = started.elapsed();
        if took > worst.0 {
            worst = (took, i);
        }
        if took > Duration::from_millis(1) {
            over_ms.push((i, took));
        }
    }
    println!("worst grant: {:?} at lock {}", worst.0, worst.1);
    for (i, took) in over_ms {
        println!("  lock {i}: {took:?}");
    }
}
