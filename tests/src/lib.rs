//! Test kit for Baton: runs real `batond` processes and talks to them over raw
//! TCP lines, so the conformance tests see the server exactly as an outside
//! client does.
//!
//! Everything here panics with a clear message instead of returning errors:
//! it exists to make test failures easy to read, not to be reused in services.

pub mod binary;
pub mod browser;
pub mod chaos;
pub mod cluster;
pub mod daemon;
pub mod databases;
pub mod expect;
pub mod fake_node;
pub mod frozen;
pub mod http;
pub mod key;
pub mod line_client;
pub mod port;
pub mod proxy;
pub mod raft;
pub mod refused;
pub mod status;

pub use binary::{baton_bin, batond_bin};
pub use daemon::Batond;
pub use expect::{answers, assert_any_error, assert_error, grant_token};
pub use key::{cluster_key_text, write_key_file};
pub use line_client::LineClient;
pub use port::{distinct_free_addrs, free_addr, free_addrs, peer_list, start_cluster_nodes};
pub use status::{parse_status, status_u64, Status};
