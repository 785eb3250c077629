//! Invariant checks of the state machines: each type's `validate()` says
//! whether its state is one its own rules can reach. They run after every
//! change in debug builds, and simulations call them between steps.

/// An invariant that does not hold, and how.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invariant broken: {0}")]
pub struct Broken(pub String);

/// `Ok` if `holds`, else the failure `what` describes (built only then).
pub fn ensure(holds: bool, what: impl FnOnce() -> String) -> Result<(), Broken> {
    if holds {
        Ok(())
    } else {
        Err(Broken(what()))
    }
}

/// Above this many entries a debug build checks only what is cheap after
/// each change: a full check of every change would make a large table's
/// run quadratic. `validate()` itself always checks everything.
pub const FULL_CHECK_UP_TO: usize = 512;

/// Runs the check in debug builds (if `full`, else it is skipped), and
/// panics with what it found.
#[inline]
pub fn debug_check(full: bool, check: impl FnOnce() -> Result<(), Broken>) {
    if cfg!(debug_assertions) && full {
        if let Err(broken) = check() {
            panic!("{broken}");
        }
    }
}
