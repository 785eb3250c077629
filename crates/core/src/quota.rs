//! The caps on what a node's lock state may hold: grants held (each
//! permit of a semaphore and each shared grant counts), acquires queued,
//! and watches pending, over every client at once (`batond --max-locks`,
//! `--max-waiters`, `--max-watches`). An acquire past a cap is refused and changes
//! nothing, so one client cannot grow a node until it runs out of memory.

/// The two caps. The defaults keep a node of a million locks and a
/// million waiters, a few hundred megabytes, well inside a small machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota {
    /// Grants held at once; an acquire that would add one more is refused.
    pub max_locks: usize,
    /// Acquires queued at once; an acquire that would wait is refused.
    pub max_waiters: usize,
    /// Watches pending at once (`--max-watches`); one more is refused.
    pub max_watches: usize,
}

impl Quota {
    pub const DEFAULT_MAX_LOCKS: usize = 1_000_000;
    pub const DEFAULT_MAX_WAITERS: usize = 1_000_000;
    /// Docs/protocol.md's default: a fan-out of many watchers of one key
    /// fits, a few hundred bytes each.
    pub const DEFAULT_MAX_WATCHES: usize = 100_000;
}

impl Default for Quota {
    fn default() -> Self {
        Quota {
            max_locks: Quota::DEFAULT_MAX_LOCKS,
            max_waiters: Quota::DEFAULT_MAX_WAITERS,
            max_watches: Quota::DEFAULT_MAX_WATCHES,
        }
    }
}

/// Why an acquire was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The key is free, but the node holds its maximum of grants.
    TooManyLocks,
    /// The acquire would wait, but the node queues its maximum of waiters.
    TooManyWaiters,
    /// The acquire names other permits than the key has while it has
    /// holders or waiters (a shared acquire names one).
    Permits(u32),
}

impl Refusal {
    /// The reason docs/protocol.md gives for it in an `E A <key> ...` answer.
    pub fn reason(self) -> std::borrow::Cow<'static, str> {
        match self {
            Refusal::TooManyLocks => "too many locks".into(),
            Refusal::TooManyWaiters => "too many waiters".into(),
            Refusal::Permits(n) => format!("the key has {n} permits").into(),
        }
    }
}
