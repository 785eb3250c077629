//! Client authentication (docs/protocol.md 1.1): every connection sends
//! `U <user> <secret>` before anything else and is used only once `U
//! <user>` came back; and the `E` answers of an authenticating node, as
//! errors a caller can branch on.

use std::fmt;
use std::time::Duration;

use baton_core::Key;
use baton_proto::{parse_response, ErrorReply, Request, Response, Secret, MAX_RESPONSE_LINE};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::error::Error;

/// A user name and its secret, checked against the protocol's rules.
#[derive(Clone)]
pub(crate) struct Credentials {
    pub(crate) user: Key,
    secret: Secret,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

impl Credentials {
    /// The error says which rule is broken, never what the secret is.
    pub(crate) fn new(user: &[u8], secret: &[u8]) -> Result<Credentials, String> {
        let user = Key::new(user).map_err(|e| e.to_string().replacen("key", "user name", 1))?;
        let secret = Secret::new(secret).map_err(|e| e.to_string())?;
        Ok(Credentials { user, secret })
    }
}

/// Why a connection could not authenticate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AuthOutcome {
    /// `E U <user> authentication failed`: a wrong user or secret.
    Failed,
    /// `E U <user> authentication is not enabled`: the node has no users.
    NotEnabled,
    /// The socket failed or the node answered something else.
    Broken,
    /// A TLS node's `E ? ? TLS required...` to a plaintext client.
    TlsRequired(String),
}

/// Sends `U` on a fresh connection and reads its one answer (the node
/// sends nothing else before it: nothing else was asked).
pub(crate) async fn authenticate<S>(
    stream: &mut S,
    credentials: &Credentials,
    within: Duration,
) -> Result<(), AuthOutcome>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let exchange = async {
        let mut line = bytes::BytesMut::new();
        Request::Auth {
            user: credentials.user.clone(),
            secret: credentials.secret.clone(),
        }
        .encode(&mut line);
        stream
            .write_all(&line)
            .await
            .map_err(|_| AuthOutcome::Broken)?;
        let answer = read_line(stream).await?;
        match parse_response(&answer) {
            Ok(Response::Authenticated { user }) if user == credentials.user => Ok(()),
            Ok(Response::Error(reply)) if reply.reason == AUTH_NOT_ENABLED => {
                Err(AuthOutcome::NotEnabled)
            }
            Ok(Response::Error(reply)) if reply.reason == AUTH_FAILED => Err(AuthOutcome::Failed),
            Ok(Response::Error(reply)) if crate::tls::is_tls_required(&reply.reason) => {
                Err(AuthOutcome::TlsRequired(reply.reason))
            }
            _ => Err(AuthOutcome::Broken),
        }
    };
    tokio::time::timeout(within, exchange)
        .await
        .unwrap_or(Err(AuthOutcome::Broken))
}

/// Reads one line, without its LF (and CR), byte by byte: not one byte
/// past it may be taken from the stream, which the connection reads next.
async fn read_line<S: AsyncRead + Unpin>(stream: &mut S) -> Result<Vec<u8>, AuthOutcome> {
    let mut line = Vec::with_capacity(64);
    loop {
        let byte = stream.read_u8().await.map_err(|_| AuthOutcome::Broken)?;
        if byte == b'\n' {
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            return Ok(line);
        }
        if line.len() >= MAX_RESPONSE_LINE {
            return Err(AuthOutcome::Broken);
        }
        line.push(byte);
    }
}

const AUTH_FAILED: &str = "authentication failed";
const AUTH_NOT_ENABLED: &str = "authentication is not enabled";
const AUTH_REQUIRED: &str = "authentication required";
const PERMISSION_DENIED: &str = "permission denied";

/// Whether `reply` says the node requires authentication first.
pub(crate) fn is_auth_required(reply: &ErrorReply) -> bool {
    reply.reason == AUTH_REQUIRED
}

/// The error for an `E` answer: permission and authentication refusals
/// get their own variants, everything else is [`Error::Rejected`].
pub(crate) fn rejected(reply: ErrorReply) -> Error {
    match reply.reason.as_str() {
        PERMISSION_DENIED => match reply.key.as_deref().map(Key::new) {
            Some(Ok(key)) => Error::PermissionDenied { key },
            _ => Error::Rejected {
                reason: reply.reason,
            },
        },
        AUTH_REQUIRED => Error::AuthenticationRequired,
        _ => Error::Rejected {
            reason: reply.reason,
        },
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test
mod tests {
    use super::*;

    fn reply(key: &str, reason: &str) -> ErrorReply {
        ErrorReply {
            op: Some(baton_proto::Op::Acquire),
            key: Some(key.as_bytes().to_vec()),
            reason: reason.into(),
        }
    }

    #[test]
    fn refusals_map_to_their_errors() {
        assert!(matches!(
            rejected(reply("billing/1", "permission denied")),
            Error::PermissionDenied { key } if key.as_bytes() == b"billing/1"
        ));
        assert!(matches!(
            rejected(reply("k", "authentication required")),
            Error::AuthenticationRequired
        ));
        assert!(matches!(
            rejected(reply("k", "lease must be greater than 0")),
            Error::Rejected { .. }
        ));
    }

    #[test]
    fn credentials_follow_the_rules_and_hide_the_secret() {
        let c = Credentials::new(b"billing", b"hunter2").unwrap();
        assert!(!format!("{c:?}").contains("hunter2"));
        assert!(Credentials::new(b"a b", b"x").is_err());
        assert!(Credentials::new(b"a", b"x y").is_err());
        assert!(Credentials::new(b"a", b"").is_err());
    }

    #[tokio::test]
    async fn authenticate_reads_exactly_one_line() {
        let (mut client, mut node) = tokio::io::duplex(1024);
        let creds = Credentials::new(b"billing", b"pw").unwrap();
        let serve = async {
            let mut buf = [0u8; 64];
            let n = node.read(&mut buf).await.unwrap();
            assert_eq!(&buf[..n], b"U billing pw\n");
            node.write_all(b"U billing\nS role=single").await.unwrap();
        };
        let (done, ()) = tokio::join!(
            authenticate(&mut client, &creds, Duration::from_secs(5)),
            serve
        );
        assert_eq!(done, Ok(()));
        let mut rest = [0u8; 4];
        client.read_exact(&mut rest).await.unwrap();
        assert_eq!(&rest, b"S ro");
    }
}
