//! One connection's authentication: who it is (if anyone), and the
//! verdict on each request before the node sees it.
//!
//! The connection asks [`Session::gate`] about every request; `None` lets
//! it through. The user is looked up again only when the users file was
//! reloaded (one atomic load per request tells), so a reload reaches open
//! connections at their next request: a removed user, or one whose secret
//! changed, is no longer authenticated; changed prefixes apply at once.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use baton_core::Key;
use baton_proto::{ErrorReply, Op, Request, Response, Secret};

use super::throttle::{Refusal, Source, FAIL_DELAY};
use super::users::{sha256, User, Users};
use super::Auth;
use crate::delivery::{Delivery, Mailbox};

pub(crate) const AUTH_REQUIRED: &str = "authentication required";
pub(crate) const AUTH_FAILED: &str = "authentication failed";
pub(crate) const AUTH_NOT_ENABLED: &str = "authentication is not enabled";
pub(crate) const PERMISSION_DENIED: &str = "permission denied";

/// What the connection does instead of serving a request.
#[derive(Debug)]
pub(crate) enum Gated {
    /// Answer this now; the request changes nothing.
    Answer(Response),
    /// Answer this after the delay, and read no further request until
    /// then (a failed `U`).
    Hold(Response, Duration),
}

/// The authentication state of one connection.
#[derive(Debug)]
pub(crate) struct Session {
    auth: Arc<Auth>,
    source: Source,
    /// The users file version `user` was checked against.
    generation: u64,
    users: Arc<Users>,
    user: Option<Arc<User>>,
}

impl Session {
    pub(crate) fn new(auth: Arc<Auth>) -> Session {
        let (generation, users) = auth.snapshot();
        Session {
            auth,
            source: Source::Unknown,
            generation,
            users,
            user: None,
        }
    }

    /// Where the connection comes from, for the guessing limit and logs.
    pub(crate) fn set_peer(&mut self, addr: Option<IpAddr>) {
        self.source = Source::of(addr);
    }

    /// `None` lets the request through; otherwise what to answer instead.
    #[inline]
    pub(crate) fn gate(&mut self, request: &Request) -> Option<Gated> {
        if let Request::Auth { user, secret } = request {
            return Some(self.authenticate(user, secret));
        }
        self.refresh();
        let Some(user) = &self.user else {
            self.auth
                .throttle
                .refused(self.source, Refusal::Required, b"");
            return Some(Gated::Answer(refusal(request, AUTH_REQUIRED)));
        };
        match request.key() {
            Some(key) if !user.permits(key.as_bytes()) => {
                let name = user.name.clone();
                self.auth
                    .throttle
                    .refused(self.source, Refusal::Denied, name.as_bytes());
                Some(Gated::Answer(refusal(request, PERMISSION_DENIED)))
            }
            _ => None,
        }
    }

    /// Follows a reload: the user stays only if the new file has it with
    /// the same secret.
    #[inline]
    fn refresh(&mut self) {
        if self.auth.generation() == self.generation {
            return;
        }
        let (generation, users) = self.auth.snapshot();
        self.generation = generation;
        self.user = self.user.take().and_then(|old| {
            users
                .get(&old.name)
                .filter(|new| new.hash == old.hash)
                .cloned()
        });
        self.users = users;
    }

    fn authenticate(&mut self, user: &Key, secret: &Secret) -> Gated {
        self.refresh();
        // Hashed first, whoever the user: same work for every answer.
        let hash = sha256(secret.as_bytes());
        let throttle = &self.auth.throttle;
        let found = if throttle.may_try(self.source) {
            self.users.verify(user, &hash)
        } else {
            None
        };
        match found {
            Some(found) => {
                self.user = Some(found);
                Gated::Answer(Response::Authenticated { user: user.clone() })
            }
            None => {
                // A failed `U` leaves the connection unauthenticated, even
                // if it was authenticated before.
                self.user = None;
                throttle.refused(self.source, Refusal::Failed, user.as_bytes());
                Gated::Hold(auth_reply(user, AUTH_FAILED), FAIL_DELAY)
            }
        }
    }
}

/// `E <op> <key> <reason>` for `request` (`E S ? ...` for `S`).
fn refusal(request: &Request, reason: &str) -> Response {
    Response::Error(ErrorReply {
        op: Some(request.op()),
        key: request.key().map(|k| k.as_bytes().to_vec()),
        reason: reason.to_owned(),
    })
}

fn auth_reply(user: &Key, reason: &str) -> Response {
    Response::Error(ErrorReply {
        op: Some(Op::Auth),
        key: Some(user.as_bytes().to_vec()),
        reason: reason.to_owned(),
    })
}

/// The answer to `U` on a node without `--auth-file`.
#[cold]
pub(crate) fn not_enabled(user: &Key) -> Response {
    auth_reply(user, AUTH_NOT_ENABLED)
}

/// Sends `response` to the connection's mailbox after `delay`, as the late
/// answer that ends a hold. The connection counts it as deferred, so the
/// mailbox bound holds; if the connection is gone by then, nothing happens.
pub(crate) fn answer_later(mailbox: &Mailbox, response: Response, delay: Duration) {
    let mailbox = mailbox.clone();
    tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        let _ = mailbox.send(Delivery::Resume(response));
    });
}
