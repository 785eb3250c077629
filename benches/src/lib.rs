//! `baton-bench`, Baton's load driver: opens C connections on 127.0.0.1,
//! runs acquire/release cycles against a target for a fixed time after a
//! warm-up, and reports cycles/s (or requests/s) and latency percentiles,
//! next to an echo server that shows what loopback alone allows.

pub mod bench;
pub mod cli;
pub mod conn;
pub mod contended;
pub mod echo;
pub mod error;
pub mod histogram;
pub mod lines;
pub mod own_keys;
pub mod pin;
pub mod referee;
pub mod report;
pub mod scenario;
pub mod server;
pub mod stats;
pub mod target;
pub mod window;
pub mod wire;

pub use error::{BenchError, Violation};
pub use scenario::{Case, Measured, Scenario};
pub use target::Target;
pub use window::Timing;
