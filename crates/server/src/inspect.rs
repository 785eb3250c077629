//! What an operator may ask a node beyond the protocol (the HTTP
//! endpoint's `/v1/locks` and `/v1/cluster`): a page of its held locks,
//! sorted by key, and the cluster's members as this node knows them.
//!
//! The lock table is a hash map, so a page costs one pass over it under
//! the node's mutex, keeping only the `limit` smallest keys after the
//! cursor (a bounded heap: O(n log limit), no copy of the table); the
//! mutex is released between pages.

use std::collections::BinaryHeap;

use baton_core::{HolderValue, Key, KeyGrants, LockMode, LockTable, Millis, Token};

/// The most locks one page may hold (a larger `limit` is capped to it).
pub const MAX_PAGE: usize = 10_000;

/// Which held locks to list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockQuery {
    /// Only keys that start with these bytes.
    pub prefix: Vec<u8>,
    /// Only keys after this one (the `next` of the page before).
    pub after: Option<Vec<u8>>,
    /// At most this many (1 to [`MAX_PAGE`]).
    pub limit: usize,
}

/// One held key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockEntry {
    pub key: Key,
    /// The newest live holder's token and lease left.
    pub token: Token,
    pub lease_left_ms: Millis,
    pub waiters: u64,
    pub permits: u32,
    pub mode: LockMode,
    /// Every live holder, oldest first.
    pub holders: Vec<HolderEntry>,
}

/// One live holder of a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HolderEntry {
    pub token: Token,
    pub lease_left_ms: Millis,
    pub value: Option<HolderValue>,
}

/// A page of held locks, by key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LockPage {
    pub locks: Vec<LockEntry>,
    /// The key to continue after, when more locks match.
    pub next: Option<Key>,
}

/// A page of `table`'s live grants at `now` (leases that ended but are
/// not yet expired by the timer are left out, as `Q` leaves them out).
pub fn list_page(
    table: &LockTable,
    waiters: impl Fn(&Key) -> u64,
    query: &LockQuery,
    now: Millis,
) -> LockPage {
    let limit = query.limit.clamp(1, MAX_PAGE);
    let after = query.after.as_deref();
    // The `limit + 1` smallest matching keys: one more tells there is a next page.
    let mut smallest: BinaryHeap<(&[u8], &Key)> = BinaryHeap::with_capacity(limit + 1);
    for (key, grants) in table.keys() {
        let bytes = key.as_bytes();
        let live = grants.holders().iter().any(|h| h.expires_at > now);
        if !live || !bytes.starts_with(&query.prefix) || after.is_some_and(|a| bytes <= a) {
            continue;
        }
        if smallest.len() <= limit {
            smallest.push((bytes, key));
        } else if smallest.peek().is_some_and(|(top, _)| bytes < *top) {
            smallest.pop();
            smallest.push((bytes, key));
        }
    }
    let mut keys: Vec<&Key> = smallest
        .into_sorted_vec()
        .into_iter()
        .map(|(_, k)| k)
        .collect();
    let more = keys.len() > limit;
    keys.truncate(limit);
    let locks: Vec<LockEntry> = keys
        .iter()
        .filter_map(|key| entry(table, key, table.grants(key)?, waiters(key), now))
        .collect();
    let next = if more {
        locks.last().map(|l| l.key.clone())
    } else {
        None
    };
    debug_assert!(locks.windows(2).all(|w| w[0].key < w[1].key));
    LockPage { locks, next }
}

/// The entry of `key`, held by `grants`, at `now`: its live holders.
fn entry(
    table: &LockTable,
    key: &Key,
    grants: &KeyGrants,
    waiters: u64,
    now: Millis,
) -> Option<LockEntry> {
    let holders: Vec<HolderEntry> = grants
        .holders()
        .iter()
        .filter(|h| h.expires_at > now)
        .map(|h| HolderEntry {
            token: h.token,
            lease_left_ms: h.expires_at - now,
            value: table.value(h.token).cloned(),
        })
        .collect();
    let newest = holders.last()?;
    Some(LockEntry {
        key: key.clone(),
        token: newest.token,
        lease_left_ms: newest.lease_left_ms,
        waiters,
        permits: grants.permits(),
        mode: grants.mode(),
        holders,
    })
}

/// How this node sees one member of its cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// Its client address, as in the peer list.
    pub addr: String,
    /// This node itself.
    pub is_self: bool,
    /// `active`/`leader` for the node that serves as far as this node
    /// knows, `standby`/`follower` for the others, `unknown` when this
    /// node does not know (no serving node known).
    pub state: &'static str,
    /// It votes (every priority node; a Raft member unless it is a learner
    /// still catching up).
    pub voter: bool,
    /// On a Raft leader, for a follower: the last log index known to be on it.
    pub matched: Option<u64>,
    /// On a Raft leader, for a follower: entries of the leader's log not yet on it.
    pub lag: Option<u64>,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test
mod tests {
    use super::*;
    use baton_core::Command;

    fn table(keys: &[&str]) -> LockTable {
        let mut t = LockTable::new();
        for k in keys {
            let key = Key::new(k.as_bytes()).unwrap();
            t.apply(
                &Command::Grant {
                    key,
                    lease_ms: 10_000,
                },
                0,
            );
        }
        t
    }

    fn query(prefix: &str, after: Option<&str>, limit: usize) -> LockQuery {
        LockQuery {
            prefix: prefix.as_bytes().to_vec(),
            after: after.map(|a| a.as_bytes().to_vec()),
            limit,
        }
    }

    fn keys(page: &LockPage) -> Vec<String> {
        page.locks.iter().map(|l| l.key.to_string()).collect()
    }

    #[test]
    fn pages_are_sorted_filtered_and_continue_after_the_last_key() {
        let t = table(&["b/2", "a/1", "b/1", "c", "b/3", "b/10"]);
        let first = list_page(&t, |_| 0, &query("b/", None, 2), 5);
        assert_eq!(keys(&first), ["b/1", "b/10"]);
        assert_eq!(
            first.next.as_ref().map(Key::to_string).as_deref(),
            Some("b/10")
        );
        let second = list_page(&t, |_| 0, &query("b/", Some("b/10"), 2), 5);
        assert_eq!(keys(&second), ["b/2", "b/3"]);
        assert_eq!(second.next, None, "nothing after b/3");
        assert_eq!(second.locks[0].lease_left_ms, 9_995);
        let all = list_page(&t, |k| k.len() as u64, &query("", None, 100), 0);
        assert_eq!(keys(&all), ["a/1", "b/1", "b/10", "b/2", "b/3", "c"]);
        assert_eq!(all.locks[2].waiters, 4);
    }

    #[test]
    fn ended_leases_and_silly_limits_are_handled() {
        let t = table(&["a", "b"]);
        assert!(list_page(&t, |_| 0, &query("", None, 10), 10_000)
            .locks
            .is_empty());
        let one = list_page(&t, |_| 0, &query("", None, 0), 0);
        assert_eq!(keys(&one), ["a"], "a limit of 0 is 1");
        let capped = list_page(&t, |_| 0, &query("", None, usize::MAX), 0);
        assert_eq!(keys(&capped), ["a", "b"]);
    }

    #[test]
    fn a_key_of_several_holders_is_listed_once_with_all_of_them() {
        use baton_core::AcquireOptions;
        let mut t = table(&["a"]);
        let key = Key::new(b"pool").unwrap();
        for (lease_ms, value) in [(5_000, Some("w1")), (9_000, None)] {
            let options = AcquireOptions {
                permits: 3,
                mode: LockMode::Exclusive,
                value: value.map(|v| HolderValue::try_from(v).unwrap()),
            };
            let grant = Command::GrantWith {
                key: key.clone(),
                lease_ms,
                options,
            };
            t.apply(&grant, 0);
        }
        let page = list_page(&t, |_| 1, &query("", None, 10), 1_000);
        assert_eq!(keys(&page), ["a", "pool"]);
        let pool = &page.locks[1];
        assert_eq!(
            (pool.token, pool.lease_left_ms),
            (3, 8_000),
            "the newest holder"
        );
        assert_eq!(
            (pool.permits, pool.mode, pool.waiters),
            (3, LockMode::Exclusive, 1)
        );
        let holders: Vec<_> = pool
            .holders
            .iter()
            .map(|h| {
                (
                    h.token,
                    h.lease_left_ms,
                    h.value.as_ref().map(|v| v.to_string()),
                )
            })
            .collect();
        assert_eq!(holders, [(2, 4_000, Some("w1".into())), (3, 8_000, None)]);
        // Past the first holder's lease, only the second is live.
        let later = list_page(&t, |_| 0, &query("pool", None, 10), 6_000);
        assert_eq!(later.locks[0].holders.len(), 1);
        assert_eq!(page.locks[0].holders.len(), 1);
    }
}
