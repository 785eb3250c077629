//! `baton-bench`, Baton's load driver: opens C connections on 127.0.0.1,
//! runs acquire/release cycles against a target for a fixed time after a
//! warm-up, and reports cycles/s (or requests/s) and latency percentiles,
//! next to an echo server that shows what loopback alone allows and next
//! to Redis, etcd (single and 3-node) and ZooKeeper driven the same way,
//! and reports the floor a durable cluster has on this machine.

pub mod baton_client;
pub mod bench;
pub mod chart;
pub mod cli;
pub mod cluster;
pub mod conn;
pub mod contended;
pub mod cpu;
pub mod daemons;
pub mod echo;
pub mod error;
pub mod etcd_cluster;
#[cfg(feature = "etcd")]
pub mod etcd_fanout;
#[cfg(feature = "etcd")]
pub mod etcd_session;
pub mod failover;
pub mod fanout;
pub mod flood;
pub mod floor;
pub mod gate;
pub mod goals;
pub mod histogram;
pub mod launch;
pub mod lines;
pub mod markdown;
pub mod memory;
pub mod own_keys;
pub mod pin;
pub mod priority_goal;
pub mod protocol;
pub mod redis_client;
pub mod referee;
pub mod report;
pub mod resp;
pub mod scenario;
pub mod server;
pub mod session;
pub mod stats;
pub mod status;
pub mod storm;
pub mod target;
pub mod window;
pub mod wire;
#[cfg(feature = "zookeeper")]
pub mod zk_session;

pub use error::{BenchError, Violation};
pub use scenario::{Case, Measured, Scenario};
pub use target::Target;
pub use window::Timing;
