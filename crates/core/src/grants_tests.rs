//! The compact storage against a plain model (a map and an ordered set),
//! after every step of random inserts, removals and lease moves.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::*;

#[derive(Debug, Clone)]
enum Step {
    Insert { key: u8, end: u8 },
    Remove { key: u8 },
    Move { key: u8, end: u8 },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (0u8..24, 0u8..16).prop_map(|(key, end)| Step::Insert { key, end }),
        (0u8..24).prop_map(|key| Step::Remove { key }),
        (0u8..24, 0u8..16).prop_map(|(key, end)| Step::Move { key, end }),
    ]
}

fn key(n: u8) -> Key {
    Key::new(format!("k{n}").as_bytes()).expect("key")
}

/// What the storage must agree with.
#[derive(Default)]
struct Model {
    holders: BTreeMap<Vec<u8>, Holder>,
    order: BTreeSet<(Millis, Token, Vec<u8>)>,
}

fn agree(grants: &Grants, model: &Model) -> Result<(), TestCaseError> {
    prop_assert_eq!(grants.check(), Ok(()));
    prop_assert_eq!(grants.len(), model.holders.len());
    for n in 0..24 {
        let k = key(n);
        prop_assert_eq!(grants.get(&k), model.holders.get(k.as_bytes()));
    }
    let want: Vec<(Millis, Token)> = model.order.iter().map(|(e, t, _)| (*e, *t)).collect();
    let lazy: Vec<(Millis, Token)> = grants
        .by_lease_end()
        .map(|(_, h)| (h.expires_at, h.token))
        .collect();
    prop_assert_eq!(&lazy, &want);
    let sorted: Vec<(Millis, Token)> = grants
        .sorted_by_lease_end()
        .into_iter()
        .map(|(_, h)| (h.expires_at, h.token))
        .collect();
    prop_assert_eq!(&sorted, &want);
    prop_assert_eq!(
        grants.first().map(|(_, h)| (h.expires_at, h.token)),
        want.first().copied()
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
                    let k = key(n);
                    if !model.holders.contains_key(k.as_bytes()) {
                        let holder = Holder { token: next_token, expires_at: u64::from(end) };
                        next_token += 1;
                        grants.insert(k.clone(), holder);
                        model.order.insert((holder.expires_at, holder.token, k.as_bytes().to_vec()));
                        model.holders.insert(k.as_bytes().to_vec(), holder);
                    }
                }
                Step::Remove { key: n } => {
                    let k = key(n);
                    // A wrong token lets nothing go.
                    let wrong = model.holders.get(k.as_bytes()).map_or(1, |h| h.token + 1);
                    prop_assert_eq!(grants.remove_if(&k, Some(wrong)), None);
                    let removed = grants.remove(&k);
                    let want = model.holders.remove(k.as_bytes());
                    prop_assert_eq!(removed, want);
                    if let Some(h) = want {
                        model.order.remove(&(h.expires_at, h.token, k.as_bytes().to_vec()));
                    }
                }
                Step::Move { key: n, end } => {
                    let k = key(n);
                    let token = model.holders.get(k.as_bytes()).map_or(0, |h| h.token);
                    let moved = grants.set_lease_end(&k, token, u64::from(end));
                    prop_assert_eq!(moved, model.holders.contains_key(k.as_bytes()));
                    prop_assert!(!grants.set_lease_end(&k, token + 1_000_000, 0));
                    if let Some(h) = model.holders.get_mut(k.as_bytes()) {
                        model.order.remove(&(h.expires_at, h.token, k.as_bytes().to_vec()));
                        h.expires_at = u64::from(end);
                        model.order.insert((h.expires_at, h.token, k.as_bytes().to_vec()));
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
            grants.insert(
                key(n),
                Holder {
                    token: round * 1000 + u64::from(n) + 1,
                    expires_at: 5,
                },
            );
        }
        for n in 0..100u8 {
            assert!(grants.remove(&key(n)).is_some());
        }
    }
    assert_eq!(grants.slots.len(), 100);
    assert_eq!(grants.len(), 0);
}
