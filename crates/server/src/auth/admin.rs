//! The admin check of the HTTP endpoint's `/v1/` routes (HTTP basic auth
//! over the `--auth-file` users): the same hash, the same constant-time
//! comparison and the same per-source throttle as `U`.

use std::net::IpAddr;

use baton_core::Key;

use super::throttle::{Refusal, Source};
use super::users::{sha256, Access};
use super::Auth;

/// What a user name and secret are worth for the admin routes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdminCheck {
    /// An admin user with the right secret.
    Admin,
    /// A user with the right secret, but not an admin.
    NotAdmin,
    /// Unknown user, wrong secret, or too many failures from the source
    /// lately (the answer should then wait [`super::FAIL_DELAY`]).
    Failed,
}

impl Auth {
    /// Checks `user` and `secret` from `source`; a failure counts against
    /// the source as a failed `U` does.
    pub fn check_admin(&self, source: Option<IpAddr>, user: &[u8], secret: &[u8]) -> AdminCheck {
        let source = Source::of(source);
        // Hashed first, whoever the user: same work for every answer.
        let hash = sha256(secret);
        let (_, users) = self.snapshot();
        let found = match Key::new(user) {
            Ok(name) if self.throttle.may_try(source) => users.verify(&name, &hash),
            _ => None,
        };
        match found {
            Some(found) if found.access == Access::Admin => AdminCheck::Admin,
            Some(_) => {
                self.throttle.refused(source, Refusal::Denied, user);
                AdminCheck::NotAdmin
            }
            None => {
                self.throttle.refused(source, Refusal::Failed, user);
                AdminCheck::Failed
            }
        }
    }
}
