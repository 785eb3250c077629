//! The protocol 1.2 flags of `acquire` and `run`: what kind of grant to
//! ask for (a semaphore permit, a shared grant) and the value it carries.

use baton_client::Acquire;
use clap::Args;

/// `--permits N`, `--shared`, `--value V`.
#[derive(Debug, Clone, Default, Args)]
pub struct GrantFlags {
    /// A semaphore: KEY is held by up to N grants at once, each with its
    /// own token (1 to 10000; every acquirer of KEY gives the same N).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub permits: Option<u32>,
    /// A shared (reader's) grant: coexists with other shared grants, never
    /// with an exclusive one.
    #[arg(long, conflicts_with = "permits")]
    pub shared: bool,
    /// Attach this value to the grant (1-128 bytes, no space), shown by
    /// inspect, watch and leader.
    #[arg(long, value_name = "V")]
    pub value: Option<String>,
}

impl GrantFlags {
    /// `acquire` with the options these flags ask for.
    pub fn apply<'a>(&self, mut acquire: Acquire<'a>) -> Acquire<'a> {
        if let Some(permits) = self.permits {
            acquire = acquire.permits(permits);
        }
        if self.shared {
            acquire = acquire.shared();
        }
        if let Some(value) = &self.value {
            acquire = acquire.value(value);
        }
        acquire
    }
}
