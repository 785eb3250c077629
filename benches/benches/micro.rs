//! Micro-benchmarks of the two hot paths every request crosses: the lock
//! table's `apply` (grant, renew, release on many keys) and the node
//! codec's decode of a pipelined burst. The profile-driven choices there
//! (foldhash maps, the lease index, line splitting without copies) keep
//! their numbers here: `cargo bench -p baton-bench --bench micro`.

use baton_core::{Command, Key, LockTable};
use baton_proto::{Limits, ServerCodec};
use bytes::BytesMut;
use divan::counter::{BytesCount, ItemsCount};
use divan::Bencher;
use tokio_util::codec::Decoder;

fn main() {
    divan::main();
}

/// Keys shaped like the load driver's (`p123r0k42`).
fn keys(n: usize) -> Vec<Key> {
    (0..n)
        .map(|i| Key::try_from(format!("p1r0k{i}").as_str()).expect("a valid key"))
        .collect()
}

const LEASE_MS: u64 = 10_000;

/// A table holding every key of `keys`, granted at time 0, with their tokens.
fn held(keys: &[Key]) -> (LockTable, Vec<u64>) {
    let mut table = LockTable::new();
    let tokens = keys
        .iter()
        .map(|key| {
            let grant = Command::Grant {
                key: key.clone(),
                lease_ms: LEASE_MS,
            };
            match table.apply(&grant, 0) {
                baton_core::Outcome::Granted { token } => token,
                other => panic!("a free key was not granted: {other:?}"),
            }
        })
        .collect();
    (table, tokens)
}

/// Grants N free keys into an empty table.
#[divan::bench(args = [1_000, 100_000])]
fn table_grant(bencher: Bencher, n: usize) {
    let keys = keys(n);
    let grants: Vec<Command> = keys
        .into_iter()
        .map(|key| Command::Grant {
            key,
            lease_ms: LEASE_MS,
        })
        .collect();
    bencher
        .counter(ItemsCount::new(n))
        .with_inputs(LockTable::new)
        .bench_local_refs(|table| {
            for grant in &grants {
                divan::black_box(table.apply(grant, 1));
            }
        });
}

/// Times `command(key, token)` applied to each of N held keys.
fn on_held_keys(bencher: Bencher, n: usize, command: fn(Key, u64) -> Command) {
    let keys = keys(n);
    let (table, tokens) = held(&keys);
    let commands: Vec<Command> = keys
        .into_iter()
        .zip(tokens)
        .map(|(k, t)| command(k, t))
        .collect();
    bencher
        .counter(ItemsCount::new(n))
        .with_inputs(|| table.clone())
        .bench_local_refs(|table| {
            for command in &commands {
                divan::black_box(table.apply(command, 1));
            }
        });
}

/// Renews every one of N held keys (moves each in the lease index).
#[divan::bench(args = [1_000, 100_000])]
fn table_renew(bencher: Bencher, n: usize) {
    on_held_keys(bencher, n, |key, token| Command::Renew {
        key,
        token,
        lease_ms: 2 * LEASE_MS,
    });
}

/// Releases every one of N held keys.
#[divan::bench(args = [1_000, 100_000])]
fn table_release(bencher: Bencher, n: usize) {
    on_held_keys(bencher, n, |key, token| Command::Release { key, token });
}

/// A pipelined burst as the driver writes it: N lines, acquires and
/// releases in turn, in one buffer.
fn burst(n: usize) -> BytesMut {
    let mut burst = BytesMut::new();
    for i in 0..n {
        let line = match i % 2 {
            0 => format!("A p1r0k{i} 5 10\n"),
            _ => format!("R p1r0k{i} {}\n", 1_000_000 + i),
        };
        burst.extend_from_slice(line.as_bytes());
    }
    burst
}

/// Decodes a burst of N request lines with the node's codec.
#[divan::bench(args = [16, 1_024])]
fn codec_decode_burst(bencher: Bencher, n: usize) {
    let input = burst(n);
    bencher
        .counter(ItemsCount::new(n))
        .counter(BytesCount::new(input.len()))
        .with_inputs(|| (ServerCodec::new(Limits::default()), input.clone()))
        .bench_local_refs(|(codec, buf)| {
            let mut decoded = 0;
            while let Ok(Some(item)) = codec.decode(buf) {
                divan::black_box(item.is_ok());
                decoded += 1;
            }
            debug_assert_eq!(decoded, n);
        });
}
