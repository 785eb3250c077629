//! Fencing on the protected resource's side: refuse stale tokens.

use std::sync::atomic::{AtomicU64, Ordering};

use baton_core::{Key, Token};

/// Why a [`Fence`] refused an operation.
///
/// ```
/// use baton_client::{Fence, FenceError, Key};
/// let key = Key::try_from("orders/42").unwrap();
/// let fence = Fence::new(key.clone());
/// fence.admit(&key, 9).unwrap();
/// assert!(matches!(fence.admit(&key, 8), Err(FenceError::Stale { highest: 9, .. })));
/// let other = Key::try_from("orders/43").unwrap();
/// assert!(matches!(fence.admit(&other, 10), Err(FenceError::OtherLock { .. })));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FenceError {
    /// A newer grant of the lock has been seen: the caller's lease lapsed
    /// and someone else holds (or held) the lock since.
    #[error("token {token} is older than {highest}, the newest seen for {key}")]
    Stale {
        /// The fence's lock.
        key: Key,
        /// The token presented.
        token: Token,
        /// The newest token the fence has seen.
        highest: Token,
    },
    /// The token belongs to another lock, so it says nothing about this one.
    #[error("token for {got} presented to the fence of {key}")]
    OtherLock {
        /// The fence's lock.
        key: Key,
        /// The lock the token was for.
        got: Key,
    },
}

/// Keeps the highest token seen for one lock and admits an operation only
/// with a token at least as high.
///
/// Tokens grow across the whole cluster, so a client that slept past its
/// lease wakes up with a token lower than the current holder's and is
/// turned away, even if the lock service briefly let two holders overlap.
/// Place the fence where the resource is changed; the check and the change
/// must be atomic together, which is why a database does it in one statement:
///
/// ```sql
/// -- fence is a column of the protected row, 0 at first
/// UPDATE accounts SET balance = $balance, fence = $token
///  WHERE id = $id AND fence <= $token;
/// -- 0 rows updated: a newer holder got there first; abort.
/// ```
///
/// The same in memory:
///
/// ```
/// use baton_client::{Fence, FenceError};
/// use baton_core::Key;
///
/// let key = Key::try_from("orders/42").unwrap();
/// let fence = Fence::new(key.clone());
/// assert!(fence.admit(&key, 1057).is_ok());
/// assert!(fence.admit(&key, 1057).is_ok()); // the same holder again
/// assert!(fence.admit(&key, 1060).is_ok()); // a newer holder
/// assert!(matches!(fence.admit(&key, 1057), Err(FenceError::Stale { .. })));
/// ```
#[derive(Debug)]
pub struct Fence {
    key: Key,
    highest: AtomicU64,
}

impl Fence {
    /// A fence for `key` that has seen no token yet (tokens start at 1).
    ///
    /// ```
    /// let fence = baton_client::Fence::new(baton_client::Key::try_from("orders/42").unwrap());
    /// assert_eq!(fence.highest(), 0);
    /// ```
    pub fn new(key: Key) -> Fence {
        Fence {
            key,
            highest: AtomicU64::new(0),
        }
    }

    /// The lock this fence guards.
    ///
    /// ```
    /// let key = baton_client::Key::try_from("orders/42").unwrap();
    /// assert_eq!(baton_client::Fence::new(key.clone()).key(), &key);
    /// ```
    pub fn key(&self) -> &Key {
        &self.key
    }

    /// The highest token admitted so far, 0 if none.
    ///
    /// ```
    /// let key = baton_client::Key::try_from("orders/42").unwrap();
    /// let fence = baton_client::Fence::new(key.clone());
    /// fence.admit(&key, 1057).unwrap();
    /// assert_eq!(fence.highest(), 1057);
    /// ```
    pub fn highest(&self) -> Token {
        self.highest.load(Ordering::Acquire)
    }

    /// Admits `token` of lock `key` if it is at least the highest seen, and
    /// remembers it. Safe to call from many threads: the check and the
    /// update are one atomic step.
    ///
    /// ```
    /// let key = baton_client::Key::try_from("orders/42").unwrap();
    /// let fence = baton_client::Fence::new(key.clone());
    /// assert_eq!(fence.admit(&key, 1057), Ok(1057));
    /// assert!(fence.admit(&key, 1000).is_err());
    /// ```
    pub fn admit(&self, key: &Key, token: Token) -> Result<Token, FenceError> {
        if key != &self.key {
            return Err(FenceError::OtherLock {
                key: self.key.clone(),
                got: key.clone(),
            });
        }
        self.highest
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |highest| {
                (token >= highest).then_some(token)
            })
            .map(|_| token)
            .map_err(|highest| FenceError::Stale {
                key: key.clone(),
                token,
                highest,
            })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test
mod tests {
    use super::*;

    fn key(s: &str) -> Key {
        Key::try_from(s).unwrap()
    }

    #[test]
    fn admits_equal_or_higher_and_refuses_lower() {
        let fence = Fence::new(key("a"));
        assert_eq!(fence.highest(), 0);
        assert_eq!(fence.admit(&key("a"), 5), Ok(5));
        assert_eq!(fence.admit(&key("a"), 5), Ok(5));
        assert_eq!(
            fence.admit(&key("a"), 4),
            Err(FenceError::Stale {
                key: key("a"),
                token: 4,
                highest: 5
            })
        );
        assert_eq!(fence.admit(&key("a"), 9), Ok(9));
        assert_eq!(fence.highest(), 9);
    }

    #[test]
    fn refuses_tokens_of_another_lock() {
        let fence = Fence::new(key("a"));
        assert!(matches!(
            fence.admit(&key("b"), 100),
            Err(FenceError::OtherLock { .. })
        ));
        assert_eq!(
            fence.highest(),
            0,
            "a foreign token must not move the fence"
        );
    }
}
