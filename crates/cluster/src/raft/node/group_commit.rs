//! Group commit: when the leader proposes its next log entry.
//!
//! One entry is in flight at a time (see `shell::pump`). Proposed the
//! moment the previous one is done, the next entry carries only the
//! commands that came in meanwhile: the clients the previous entry has
//! just answered send their next requests a round trip later, and miss it.
//! Under load the clients then split into two groups that take turns, each
//! entry carrying half of them, and every commit costs the same fixed work
//! (three fsyncs, the frames, the wake-ups) for half the commands.
//!
//! So the leader holds its next proposal until the clients that the last
//! entry answered have sent a request each (any request: an acquire that
//! only queues counts too), or until a bound passes: half the time an
//! entry takes, at most [`MAX_HOLD`]. (A quarter, at most 250 us, was too
//! short for 64 clients answered through one driver thread: C=64 gained
//! nothing; with half, at most 600 us, it gained 40%.) A lone client never
//! waits (its own request is the one expected), and clients that do not
//! come back at once cost each entry at most that bound.
//!
//! [`GroupCommit`] is the rule, pure; [`Returns`] is the book the lock node
//! keeps (requests in, answers out) and the pump waits on.

use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// The longest a proposal is held for clients to come back.
pub const MAX_HOLD: Duration = Duration::from_micros(600);

/// The share of an entry's time a proposal may be held: its divisor.
const HOLD_SHARE: u32 = 2;

/// How long entries take, proposed to done, smoothed: what bounds a hold.
#[derive(Debug, Default, Clone)]
pub struct GroupCommit {
    entry_time: Option<Duration>,
}

/// A hold: wait until `returned` requests in all, or for `at_most`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hold {
    pub returned: u64,
    pub at_most: Duration,
}

impl GroupCommit {
    pub fn new() -> GroupCommit {
        GroupCommit::default()
    }

    /// An entry was done `took` after it was proposed.
    pub fn handle_entry_done(&mut self, took: Duration) {
        // A moving average over about eight entries.
        self.entry_time = Some(match self.entry_time {
            None => took,
            Some(average) => (average * 7 + took) / 8,
        });
    }

    /// The longest hold now.
    pub fn max_hold(&self) -> Duration {
        self.entry_time
            .map_or(Duration::ZERO, |t| (t / HOLD_SHARE).min(MAX_HOLD))
    }

    /// Whether to hold the next proposal, given the last answers: `answered`
    /// requests, `since` ago, and `returned` requests arrived since then.
    pub fn poll_hold(&self, answered: u64, returned: u64, since: Duration) -> Option<Hold> {
        let max = self.max_hold();
        if returned >= answered || since >= max {
            return None;
        }
        Some(Hold {
            returned: answered,
            at_most: max - since,
        })
    }
}

/// The leader's book of requests and answers, shared by the lock node
/// (which writes it under its own lock) and the pump (which waits on it).
#[derive(Debug, Default)]
pub struct Returns {
    book: Mutex<Book>,
    /// Woken when the requests reach the target of a hold.
    back: Notify,
}

#[derive(Debug, Default)]
struct Book {
    /// Requests in since the last answers went out.
    returned: u64,
    /// Requests the last applied entry answered (0: none, or already
    /// proposed behind).
    answered: u64,
    answered_at: Option<Instant>,
    /// The count of `returned` a hold waits for.
    target: Option<u64>,
}

impl Returns {
    fn book(&self) -> std::sync::MutexGuard<'_, Book> {
        // The book holds counters only: one a panic left half-written is
        // still a valid book.
        self.book.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A client's request came in.
    pub fn request_in(&self) {
        let mut book = self.book();
        book.returned = book.returned.saturating_add(1);
        if book.target.is_some_and(|t| book.returned >= t) {
            book.target = None;
            self.back.notify_waiters();
        }
    }

    /// An applied entry answered `answered` requests at `now`.
    pub fn answered(&self, answered: u64, now: Instant) {
        if answered == 0 {
            return;
        }
        let mut book = self.book();
        book.returned = 0;
        book.answered = answered;
        book.answered_at = Some(now);
    }

    /// Holds the next proposal as `rule` says, waking at the target or
    /// when `sleep` (given the longest wait) ends. The answers are then
    /// spent: the entry proposed next is theirs.
    pub async fn hold<F: std::future::Future<Output = ()>>(
        &self,
        rule: &GroupCommit,
        sleep: impl FnOnce(Duration) -> F,
    ) {
        let back = self.back.notified();
        tokio::pin!(back);
        back.as_mut().enable();
        let hold = {
            let mut book = self.book();
            let since = book.answered_at.map_or(Duration::MAX, |at| {
                Instant::now().saturating_duration_since(at)
            });
            let hold = rule.poll_hold(book.answered, book.returned, since);
            book.answered = 0;
            book.target = hold.map(|h| h.returned);
            hold
        };
        if let Some(hold) = hold {
            tokio::select! {
                () = back => {}
                () = sleep(hold.at_most) => {}
            }
            self.book().target = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn after(took_us: u64) -> GroupCommit {
        let mut rule = GroupCommit::new();
        rule.handle_entry_done(Duration::from_micros(took_us));
        rule
    }

    #[test]
    fn nothing_is_held_before_an_entry_was_timed() {
        assert_eq!(GroupCommit::new().poll_hold(16, 0, Duration::ZERO), None);
    }

    #[test]
    fn a_proposal_waits_for_the_answered_to_come_back() {
        let rule = after(800);
        let hold = rule.poll_hold(16, 3, Duration::from_micros(50));
        assert_eq!(
            hold,
            Some(Hold {
                returned: 16,
                at_most: Duration::from_micros(350),
            })
        );
        // All back, or a lone client's own request: no hold.
        assert_eq!(rule.poll_hold(16, 16, Duration::ZERO), None);
        assert_eq!(rule.poll_hold(1, 1, Duration::ZERO), None);
        // The bound has passed.
        assert_eq!(rule.poll_hold(16, 3, Duration::from_micros(400)), None);
    }

    #[test]
    fn the_hold_is_half_an_entry_and_at_most_the_cap() {
        assert_eq!(after(400).max_hold(), Duration::from_micros(200));
        assert_eq!(after(10_000).max_hold(), MAX_HOLD);
        let mut rule = after(800);
        rule.handle_entry_done(Duration::from_micros(0));
        assert_eq!(rule.max_hold(), Duration::from_micros(350));
    }

    /// A sleep that never ends by itself within a test, so only the
    /// clients can end the hold.
    async fn forever(_: Duration) {
        tokio::time::sleep(Duration::from_secs(3_600)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_hold_ends_when_the_last_client_is_back() {
        let returns = std::sync::Arc::new(Returns::default());
        let rule = after(4_000);
        returns.answered(3, Instant::now());
        returns.request_in();
        let started = Instant::now();
        let back = returns.clone();
        let clients = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(5)).await;
            back.request_in();
            tokio::time::sleep(Duration::from_millis(5)).await;
            back.request_in();
        });
        returns.hold(&rule, forever).await;
        // Ended by the third request (tokio's paused clock counts whole
        // milliseconds), not by the sleep.
        assert_eq!(started.elapsed(), Duration::from_millis(10));
        clients.await.expect("clients");
        // Spent: the next proposal is not held for the same answers.
        let started = Instant::now();
        returns.hold(&rule, forever).await;
        assert_eq!(started.elapsed(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn a_hold_ends_at_its_bound_when_clients_stay_away() {
        let returns = Returns::default();
        let rule = after(400);
        returns.answered(8, Instant::now());
        let asked = std::sync::Mutex::new(None);
        returns
            .hold(&rule, |wait| {
                *asked.lock().expect("asked") = Some(wait);
                std::future::ready(())
            })
            .await;
        assert_eq!(
            *asked.lock().expect("asked"),
            Some(Duration::from_micros(200))
        );
        // Requests after the hold find no target.
        returns.request_in();
        assert_eq!(returns.book().target, None);
    }
}
