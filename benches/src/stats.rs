//! What one connection measured during a run, merged across connections.

use crate::histogram::Histogram;

/// Counts of events inside the measured window, and their latencies.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    /// Completed acquire+release cycles (contended: grants).
    pub cycles: u64,
    /// Responses received.
    pub responses: u64,
    /// Cycle latency, or handoff latency in the contended scenario.
    pub latency: Histogram,
}

impl Stats {
    pub fn merge(&mut self, other: &Stats) {
        self.cycles += other.cycles;
        self.responses += other.responses;
        self.latency.merge(&other.latency);
    }
}
