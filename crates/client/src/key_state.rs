//! One way to read a key's state, plain or not: a plain key (protocol
//! 1.1's one exclusive holder, one permit, no value) carries no
//! [`KeyDetail`](baton_core::KeyDetail), and these fill in what it implies.

use baton_core::{HolderState, KeyState, LockMode};

/// The holders, permits and mode of a [`KeyState`], whether the node sent
/// the 1.2 detail or the key is plain.
///
/// ```no_run
/// # async fn demo(client: baton_client::Client) -> baton_client::Result<()> {
/// use baton_client::KeyStateExt;
/// let state = client.inspect("pool/gpu").await?;
/// println!("{} of {} permits held ({})", state.holder_count(), state.permits(), state.mode().as_str());
/// for holder in state.holders() {
///     println!("token {} value {:?}", holder.token, holder.value);
/// }
/// # Ok(())
/// # }
/// ```
pub trait KeyStateExt {
    /// The live holders, oldest first (at most 16 are listed by the node;
    /// [`holder_count`](KeyStateExt::holder_count) counts them all).
    fn holders(&self) -> Vec<HolderState>;
    /// How many live grants hold the key.
    fn holder_count(&self) -> u64;
    /// The key's permits (1 for a plain lock).
    fn permits(&self) -> u32;
    /// Whether the holders are shared or exclusive.
    fn mode(&self) -> LockMode;
}

impl KeyStateExt for KeyState {
    fn holders(&self) -> Vec<HolderState> {
        match (&self.detail, &self.grant) {
            (Some(detail), _) => detail.holders.clone(),
            (None, Some(grant)) => vec![HolderState {
                token: grant.token,
                lease_left_ms: grant.lease_left_ms,
                value: None,
            }],
            (None, None) => Vec::new(),
        }
    }

    fn holder_count(&self) -> u64 {
        match &self.detail {
            Some(detail) => detail.holder_count,
            None => u64::from(self.grant.is_some()),
        }
    }

    fn permits(&self) -> u32 {
        self.detail.as_ref().map_or(1, |detail| detail.permits)
    }

    fn mode(&self) -> LockMode {
        self.detail
            .as_ref()
            .map_or(LockMode::Exclusive, |detail| detail.mode)
    }
}

#[cfg(test)]
mod tests {
    use baton_core::{HolderValue, KeyDetail, LiveGrant, StateTag};

    use super::*;

    #[test]
    fn a_plain_key_has_its_grant_as_its_one_holder() {
        let free = KeyState::plain(None, 2);
        assert!(free.holders().is_empty());
        assert_eq!((free.holder_count(), free.permits()), (0, 1));
        let held = KeyState::plain(
            Some(LiveGrant {
                token: 7,
                lease_left_ms: 900,
            }),
            0,
        );
        let holders = held.holders();
        assert_eq!(holders.len(), 1);
        assert_eq!((holders[0].token, holders[0].value.clone()), (7, None));
        assert_eq!(held.mode(), LockMode::Exclusive);
    }

    #[test]
    fn a_detailed_key_reports_its_detail() {
        let value = HolderValue::try_from("a").ok();
        let holder = HolderState {
            token: 9,
            lease_left_ms: 100,
            value,
        };
        let state = KeyState {
            grant: Some(LiveGrant {
                token: 9,
                lease_left_ms: 100,
            }),
            waiters: 0,
            detail: Some(Box::new(KeyDetail {
                permits: 1,
                mode: LockMode::Shared,
                holder_count: 20,
                holders: vec![holder.clone()],
                tag: StateTag::Free,
            })),
        };
        assert_eq!(state.holders(), vec![holder]);
        assert_eq!(state.holder_count(), 20);
        assert_eq!(state.mode(), LockMode::Shared);
    }
}
