//! What the simulated clients saw: every grant with the time it began and
//! the time its holder stopped using it, and the checks on them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// One grant as its client lived it, in simulated milliseconds.
#[derive(Debug, Clone)]
pub struct Held {
    pub key: String,
    pub token: u64,
    pub node: u64,
    pub granted_at: u64,
    /// When the lease ran out, counted from the grant.
    pub lease_end: u64,
    /// When the client sent its release (`None`: it never did).
    pub released_at: Option<u64>,
    /// The key's permits (1: a lock), and whether the grant is shared.
    pub permits: u32,
    pub shared: bool,
}

impl Held {
    /// The last moment the client may rely on the lock.
    pub fn end(&self) -> u64 {
        self.released_at
            .map_or(self.lease_end, |r| r.min(self.lease_end))
    }
}

/// Shared by every simulated client.
#[derive(Debug, Clone, Default)]
pub struct History {
    held: Arc<Mutex<Vec<Held>>>,
}

impl History {
    pub fn record(&self, held: Held) -> usize {
        let mut all = self.held.lock().unwrap_or_else(|e| e.into_inner());
        all.push(held);
        all.len() - 1
    }

    pub fn released(&self, index: usize, at: u64) {
        let mut all = self.held.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(held) = all.get_mut(index) {
            held.released_at = Some(at);
        }
    }

    pub fn all(&self) -> Vec<Held> {
        self.held.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// While their holders may rely on them, a key's grants are never more
/// than its permits, and an exclusive grant of a lock or a readers-writer
/// key overlaps no other (shared grants overlap only shared ones). The
/// most grants overlap at some grant's start, so each start is checked
/// against the grants still live then.
pub fn check_holders(held: &[Held]) -> Result<(), String> {
    let mut by_key: HashMap<&str, Vec<&Held>> = HashMap::new();
    for h in held {
        by_key.entry(&h.key).or_default().push(h);
    }
    for (key, mut grants) in by_key {
        grants.sort_by_key(|h| (h.granted_at, h.token));
        let mut live: Vec<&Held> = Vec::new();
        for b in grants {
            live.retain(|a| b.granted_at < a.end());
            let clash = live.iter().find(|a| {
                a.shared != b.shared
                    || a.permits != b.permits
                    || (!b.shared && live.len() >= b.permits as usize)
            });
            if let Some(a) = clash {
                return Err(format!(
                    "key {key}: token {} (node {}, shared {}, permits {}) granted at {} while {} grants held it, token {} (node {}, shared {}) until {}",
                    b.token,
                    b.node,
                    b.shared,
                    b.permits,
                    b.granted_at,
                    live.len(),
                    a.token,
                    a.node,
                    a.shared,
                    a.end()
                ));
            }
            live.push(b);
        }
    }
    Ok(())
}

/// A grant made later never has a smaller token, and no token is issued
/// twice.
pub fn check_tokens_rise(held: &[Held]) -> Result<(), String> {
    let mut sorted: Vec<&Held> = held.iter().collect();
    sorted.sort_by_key(|h| (h.granted_at, h.token));
    let mut seen = std::collections::HashSet::new();
    let mut floor = 0u64;
    let mut group_at = None;
    let mut group_max = 0u64;
    for h in sorted {
        if !seen.insert(h.token) {
            return Err(format!("token {} issued twice", h.token));
        }
        if group_at != Some(h.granted_at) {
            floor = floor.max(group_max);
            group_at = Some(h.granted_at);
        }
        if h.token <= floor {
            return Err(format!(
                "token {} granted at {} after token {floor} was granted earlier",
                h.token, h.granted_at
            ));
        }
        group_max = group_max.max(h.token);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(key: &str, token: u64, at: u64, end: u64) -> Held {
        Held {
            key: key.to_string(),
            token,
            node: 0,
            granted_at: at,
            lease_end: end,
            released_at: None,
            permits: 1,
            shared: false,
        }
    }

    fn of(permits: u32, shared: bool, h: Held) -> Held {
        Held {
            permits,
            shared,
            ..h
        }
    }

    #[test]
    fn the_checks_catch_what_they_look_for() {
        let fine = [
            held("a", 1, 0, 10),
            held("a", 3, 10, 20),
            held("b", 2, 5, 50),
        ];
        assert_eq!(check_holders(&fine), Ok(()));
        assert_eq!(check_tokens_rise(&fine), Ok(()));
        let overlap = [held("a", 1, 0, 10), held("a", 2, 9, 20)];
        assert!(check_holders(&overlap).is_err());
        let two_of_two = [
            of(2, false, held("s", 1, 0, 10)),
            of(2, false, held("s", 2, 5, 20)),
        ];
        assert_eq!(check_holders(&two_of_two), Ok(()));
        let mut three_of_two = two_of_two.to_vec();
        three_of_two.push(of(2, false, held("s", 3, 9, 20)));
        assert!(check_holders(&three_of_two).is_err());
        let readers = [
            of(1, true, held("r", 1, 0, 10)),
            of(1, true, held("r", 2, 5, 20)),
        ];
        assert_eq!(check_holders(&readers), Ok(()));
        let mut writer = readers.to_vec();
        writer.push(held("r", 3, 15, 30));
        assert!(check_holders(&writer).is_err());
        let reader_after_writer = [held("r", 1, 0, 10), of(1, true, held("r", 2, 5, 20))];
        assert!(check_holders(&reader_after_writer).is_err());
        let back = [held("a", 2, 0, 10), held("b", 1, 5, 20)];
        assert!(check_tokens_rise(&back).is_err());
        let twice = [held("a", 2, 0, 10), held("b", 2, 0, 20)];
        assert!(check_tokens_rise(&twice).is_err());
    }
}
