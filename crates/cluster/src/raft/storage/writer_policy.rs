//! How the Raft log's writer thread is scheduled: `SCHED_BATCH`, at the
//! thread's own nice value, so that waking it never preempts the thread
//! that woke it.
//!
//! Why: the runtime thread queues a leader's entries for the writer and
//! then sends them to the followers. Under the default policy the woken
//! writer took the core at once when the two shared it (its write, the
//! fsync's submission and two context switches) before the entries could
//! leave. Batch-scheduled, it runs when the runtime thread blocks or its
//! time slice ends; its share of the core is the same as before (the gain
//! is measured in docs/benchmarks.md, "the log writer under SCHED_BATCH").
//! With a core to itself, the writer runs at once as before: there is
//! nothing to preempt.

/// The nice value of the calling thread (Linux: per thread), from
/// `/proc/thread-self/stat`; `None` where it cannot be read.
#[cfg(target_os = "linux")]
pub(crate) fn current_nice() -> Option<i32> {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").ok()?;
    stat_field(&stat, 19)?.parse().ok()
}

/// Field `n` (1-based, as in proc(5)) of a `/proc/*/stat` line. The second
/// field, the command, is in parentheses and may hold spaces, so the
/// fields from the third on are counted after its last `)`.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) fn stat_field(stat: &str, n: usize) -> Option<&str> {
    let (_, after_command) = stat.rsplit_once(')')?;
    after_command.split_whitespace().nth(n.checked_sub(3)?)
}

/// Puts the calling thread under `SCHED_BATCH` if its nice value is 0 (the
/// policy change then keeps it at 0: see [`NICE_ZERO`]). A thread an
/// operator reniced is left as it is. Needs no privilege: the batch policy
/// asks for no more than the default one.
#[cfg(target_os = "linux")]
pub(crate) fn batch_this_thread() {
    use thread_priority::{
        set_thread_priority_and_policy, thread_native_id, NormalThreadSchedulePolicy,
        ThreadPriority, ThreadSchedulePolicy,
    };
    if current_nice() != Some(0) {
        tracing::debug!("raft log writer: niced, left under its scheduling policy");
        return;
    }
    let Ok(nice_zero) = NICE_ZERO.try_into() else {
        return;
    };
    let batch = ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Batch);
    let set = set_thread_priority_and_policy(
        thread_native_id(),
        ThreadPriority::Crossplatform(nice_zero),
        batch,
    );
    if let Err(error) = set {
        tracing::debug!(?error, "raft log writer: could not be batch-scheduled");
    }
    debug_assert_eq!(current_nice(), Some(0), "the writer's nice value moved");
}

/// Elsewhere the thread keeps the default policy.
#[cfg(not(target_os = "linux"))]
pub(crate) fn batch_this_thread() {}

/// thread-priority sets a normal policy's nice value along with it, from a
/// 0-99 scale mapped linearly onto nice 19..=-20; 47 falls on 0 (46-48 all
/// do, so rounding cannot move it). A test checks the writer's nice value.
#[cfg(target_os = "linux")]
const NICE_ZERO: u8 = 47;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_command() {
        // Each field from the fourth on holds its own number.
        let numbers: Vec<String> = (4..=41).map(|n| n.to_string()).collect();
        let stat = format!("1234 (raft log) x) S {}", numbers.join(" "));
        assert_eq!(stat_field(&stat, 3), Some("S"));
        assert_eq!(stat_field(&stat, 19), Some("19"));
        assert_eq!(stat_field(&stat, 41), Some("41"));
        assert_eq!(stat_field(&stat, 42), None);
        assert_eq!(stat_field(&stat, 1), None);
        assert_eq!(stat_field("no command", 3), None);
    }

    /// Policy 3 is SCHED_BATCH (sched(7)); field 41 of the stat line.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_thread_at_nice_zero_is_batch_scheduled_and_stays_at_zero() {
        let observed = std::thread::spawn(|| {
            let before = current_nice();
            batch_this_thread();
            let stat = std::fs::read_to_string("/proc/thread-self/stat").expect("stat");
            let policy = stat_field(&stat, 41).map(str::to_owned);
            (before, current_nice(), policy)
        })
        .join()
        .expect("thread");
        match observed {
            (Some(0), after, policy) => {
                assert_eq!(after, Some(0));
                assert_eq!(policy.as_deref(), Some("3"));
            }
            // The test runs niced: the thread must be left alone.
            (before, after, policy) => {
                assert_eq!(before, after);
                assert_eq!(policy.as_deref(), Some("0"));
            }
        }
    }
}
