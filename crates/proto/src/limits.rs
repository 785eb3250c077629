//! The bounds a node puts on requests, and the line-length caps.

/// The longest request line, in bytes, counting its LF (and CR if any).
pub const MAX_REQUEST_LINE: usize = 1024;

/// The longest response line a client accepts, counting its LF. Larger than
/// a request line because a status line carries more fields, yet bounded so
/// that a broken server cannot make a client buffer without end.
pub const MAX_RESPONSE_LINE: usize = 4096;

const ONE_DAY_MS: u64 = 86_400_000;

/// The largest `<wait>` and `<lease>` a node accepts, in milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub max_wait_ms: u64,
    pub max_lease_ms: u64,
}

impl Default for Limits {
    /// One day for both, as docs/protocol.md sets.
    fn default() -> Self {
        Limits {
            max_wait_ms: ONE_DAY_MS,
            max_lease_ms: ONE_DAY_MS,
        }
    }
}
