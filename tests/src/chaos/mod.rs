//! The chaos test's parts: real `batond` processes ([`fleet`]) under a
//! seeded random schedule of kill -9, SIGSTOP/SIGCONT and SIGTERM with
//! restarts ([`schedule`]), clients acquiring, renewing, releasing and
//! querying against every node ([`worker`]), and a pure checker of what
//! they saw ([`history`]). [`run`] puts them together; `tests/chaos.rs`
//! runs it for every mode.

pub mod busy;
pub mod fleet;
pub mod history;
pub mod rng;
pub mod run;
pub mod schedule;
pub mod worker;
