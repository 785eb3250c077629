//! The users a node knows, as the users file defined them: each one's
//! SHA-256 of its secret (the secret itself is never kept) and the keys it
//! may use. Checking a secret takes the same time whether the user exists
//! or not, and whatever the secret.

use std::collections::HashMap;
use std::sync::Arc;

use baton_core::Key;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// What keys a user may use.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Access {
    /// Every key (and, later, the admin operations).
    Admin,
    /// Keys that start with one of these bytes strings.
    Prefixes(Box<[Box<[u8]>]>),
}

/// One user of the file.
#[derive(PartialEq, Eq)]
pub(crate) struct User {
    pub(crate) name: Key,
    pub(crate) hash: [u8; 32],
    pub(crate) access: Access,
}

impl std::fmt::Debug for User {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("User")
            .field("name", &self.name)
            .field("access", &self.access)
            .finish_non_exhaustive()
    }
}

impl User {
    /// Whether the user may use `key`: a byte prefix match, or admin.
    #[inline]
    pub(crate) fn permits(&self, key: &[u8]) -> bool {
        match &self.access {
            Access::Admin => true,
            Access::Prefixes(prefixes) => prefixes.iter().any(|p| key.starts_with(p)),
        }
    }
}

/// The users of one version of the file.
#[derive(Debug, Default)]
pub(crate) struct Users {
    by_name: HashMap<Key, Arc<User>>,
}

/// What an unknown user's secret is compared with, so that the answer
/// takes as long as for a known one.
const DUMMY_HASH: [u8; 32] = [0x5a; 32];

pub(crate) fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

impl Users {
    pub(crate) fn new(by_name: HashMap<Key, Arc<User>>) -> Users {
        Users { by_name }
    }

    pub(crate) fn len(&self) -> usize {
        self.by_name.len()
    }

    pub(crate) fn get(&self, name: &Key) -> Option<&Arc<User>> {
        self.by_name.get(name)
    }

    /// The user, if `secret_hash` is its secret's. One constant-time
    /// comparison either way.
    pub(crate) fn verify(&self, name: &Key, secret_hash: &[u8; 32]) -> Option<Arc<User>> {
        let user = self.by_name.get(name);
        let expected = user.map_or(&DUMMY_HASH, |u| &u.hash);
        let equal: bool = expected.ct_eq(secret_hash).into();
        match user {
            Some(user) if equal => Some(Arc::clone(user)),
            _ => None,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test
mod tests {
    use super::*;

    fn user(access: Access) -> User {
        User {
            name: Key::try_from("u").unwrap(),
            hash: sha256(b"pw"),
            access,
        }
    }

    #[test]
    fn prefixes_match_bytes_at_the_start() {
        let u = user(Access::Prefixes(
            vec![
                b"billing/".to_vec().into_boxed_slice(),
                b"jobs/billing-".to_vec().into_boxed_slice(),
            ]
            .into_boxed_slice(),
        ));
        assert!(u.permits(b"billing/42"));
        assert!(u.permits(b"billing/"));
        assert!(u.permits(b"jobs/billing-nightly"));
        assert!(!u.permits(b"billing"));
        assert!(!u.permits(b"Billing/42"));
        assert!(!u.permits(b"orders/billing/1"));
        assert!(!u.permits(b"jobs/billing"));
    }

    #[test]
    fn admin_permits_every_key() {
        let u = user(Access::Admin);
        assert!(u.permits(b"anything"));
        assert!(u.permits(b"x"));
    }

    #[test]
    fn verify_needs_the_name_and_the_secret() {
        let u = Arc::new(user(Access::Admin));
        let users = Users::new(HashMap::from([(u.name.clone(), u)]));
        let name = Key::try_from("u").unwrap();
        assert!(users.verify(&name, &sha256(b"pw")).is_some());
        assert!(users.verify(&name, &sha256(b"pw2")).is_none());
        assert!(users
            .verify(&Key::try_from("v").unwrap(), &sha256(b"pw"))
            .is_none());
        // The dummy hash's preimage is unknown, but its bytes are no secret.
        assert!(users
            .verify(&Key::try_from("v").unwrap(), &DUMMY_HASH)
            .is_none());
    }
}
