//! The compact storage against a plain model (an ordered map of every
//! grant), after every step of random inserts, removals and lease moves,
//! with keys of one grant and keys of several.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;

#[derive(Debug, Clone)]
enum Step {
    Insert { key: u8, end: u8 },
    Remove { key: u8, pick: usize },
    Move { key: u8, pick: usize, end: u8 },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (0u8..12, 0u8..16).prop_map(|(key, end)| Step::Insert { key, end }),
        (0u8..12, any::<usize>()).prop_map(|(key, pick)| Step::Remove { key, pick }),
        (0u8..12, any::<usize>(), 0u8..16).prop_map(|(key, pick, end)| Step::Move {
            key,
            pick,
            end
        }),
    ]
}

fn key(n: u8) -> Key {
    Key::new(format!("k{n}").as_bytes()).expect("key")
}

/// What the storage must agree with: every grant by (key, token).
#[derive(Default)]
struct Model {
    grants: BTreeMap<(u8, Token), Millis>,
}

impl Model {
    fn holders(&self, n: u8) -> Vec<Holder> {
        self.grants
            .range((n, 0)..=(n, Token::MAX))
            .map(|(&(_, token), &expires_at)| Holder { token, expires_at })
            .collect()
    }

    fn pick(&self, n: u8, pick: usize) -> Option<Token> {
        let holders = self.holders(n);
        (!holders.is_empty()).then(|| holders[pick % holders.len()].token)
    }
}

fn agree(grants: &Grants, model: &Model) -> Result<(), TestCaseError> {
    prop_assert_eq!(grants.check(), Ok(()));
    prop_assert_eq!(grants.len(), model.grants.len());
    let mut earliest = Vec::new();
    for n in 0..12 {
        let want = model.holders(n);
        let got = grants
            .get(&key(n))
            .map(|g| g.holders().to_vec())
            .unwrap_or_default();
        prop_assert_eq!(&got, &want);
        if let Some(first) = want.iter().min_by_key(|h| (h.expires_at, h.token)) {
            earliest.push((first.expires_at, first.token));
        }
    }
    earliest.sort_unstable();
    let lazy: Vec<(Millis, Token)> = grants
        .by_lease_end()
        .map(|(_, h)| (h.expires_at, h.token))
        .collect();
    prop_assert_eq!(&lazy, &earliest);
    let mut all: Vec<(Millis, Token)> = model.grants.iter().map(|(&(_, t), &e)| (e, t)).collect();
    all.sort_unstable();
    let sorted: Vec<(Millis, Token)> = grants
        .sorted_by_lease_end()
        .into_iter()
        .map(|(_, _, h)| (h.expires_at, h.token))
        .collect();
    prop_assert_eq!(&sorted, &all);
    let every: Vec<(Millis, Token)> = grants
        .every_by_lease_end()
        .map(|(_, h)| (h.expires_at, h.token))
        .collect();
    prop_assert_eq!(&every, &all);
    prop_assert_eq!(
        grants.first().map(|(_, h)| (h.expires_at, h.token)),
        all.first().copied()
    );
    Ok(())
}

proptest! {
    #[test]
    fn the_storage_agrees_with_a_plain_model(steps in prop::collection::vec(step(), 1..200)) {
        let mut grants = Grants::default();
        let mut model = Model::default();
        let mut next_token = 1;
        for step in steps {
            match step {
                Step::Insert { key: n, end } => {
                    let holder = Holder { token: next_token, expires_at: u64::from(end) };
                    next_token += 1;
                    grants.insert(key(n), 4, LockMode::Exclusive, holder);
                    model.grants.insert((n, holder.token), holder.expires_at);
                }
                Step::Remove { key: n, pick } => {
                    let k = key(n);
                    // A token the key does not hold lets nothing go.
                    prop_assert_eq!(grants.remove(&k, next_token + 1), None);
                    if let Some(token) = model.pick(n, pick) {
                        let expires_at = model.grants.remove(&(n, token));
                        let removed = grants.remove(&k, token);
                        prop_assert_eq!(removed, expires_at.map(|e| Holder { token, expires_at: e }));
                    }
                }
                Step::Move { key: n, pick, end } => {
                    let k = key(n);
                    prop_assert!(!grants.set_lease_end(&k, next_token + 1, 0));
                    if let Some(token) = model.pick(n, pick) {
                        prop_assert!(grants.set_lease_end(&k, token, u64::from(end)));
                        model.grants.insert((n, token), u64::from(end));
                    }
                }
            }
            agree(&grants, &model)?;
        }
    }
}

#[test]
fn freed_slots_are_reused() {
    let mut grants = Grants::default();
    for round in 0..3u64 {
        for n in 0..100u8 {
            let holder = Holder {
                token: round * 1000 + u64::from(n) + 1,
                expires_at: 5,
            };
            grants.insert(key(n), 1, LockMode::Exclusive, holder);
        }
        for n in 0..100u8 {
            let token = round * 1000 + u64::from(n) + 1;
            assert!(grants.remove(&key(n), token).is_some());
        }
    }
    assert_eq!(grants.slots.len(), 100);
    assert_eq!(grants.len(), 0);
}
