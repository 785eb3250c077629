//! What a new connection on the client port is, from its first bytes: a
//! cluster peer (its plaintext hello), a TLS client (a ClientHello starts
//! with the handshake record type 0x16) or a plaintext client (a request
//! line, which never starts with 0x16: control bytes are not an op).
//!
//! Both mismatches are answered at once with one line and closed, so
//! neither side hangs: a plaintext client of a TLS node reads an `E` line
//! it understands, and a TLS client of a plaintext node gets bytes that are
//! not a TLS record and fails its handshake at once.

/// The first byte of a TLS record carrying a handshake (the ClientHello).
pub(crate) const TLS_HANDSHAKE: u8 = 0x16;

/// What the first bytes say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Not enough bytes yet: they are a proper start of the peer hello.
    Undecided,
    Peer,
    Tls,
    Plain,
}

/// Classifies `first`, the bytes read so far (at least one); `hello` is
/// the peer hello when the node has cluster peers.
pub(crate) fn classify(first: &[u8], hello: Option<&[u8]>) -> Kind {
    debug_assert!(!first.is_empty(), "classified before any byte came");
    if let Some(hello) = hello {
        let n = first.len().min(hello.len());
        if first[..n] == hello[..n] {
            return if n == hello.len() {
                Kind::Peer
            } else {
                Kind::Undecided
            };
        }
    }
    if first.first() == Some(&TLS_HANDSHAKE) {
        Kind::Tls
    } else {
        Kind::Plain
    }
}

/// Sent to a plaintext client of a TLS node before it is closed.
pub(crate) const TLS_REQUIRED: &[u8] =
    b"E ? ? TLS required: this node serves clients over TLS only\n";

/// Sent to a TLS client of a plaintext node before it is closed. Being
/// plain text, it also fails the client's handshake at once.
pub(crate) const TLS_NOT_SPOKEN: &[u8] =
    b"E ? ? this node does not speak TLS: connect without TLS\n";

#[cfg(test)]
mod tests {
    use super::*;

    const HELLO: &[u8] = b"BATON-PEER/2\n";

    #[test]
    fn a_peer_hello_is_a_peer_once_complete() {
        assert_eq!(classify(b"BAT", Some(HELLO)), Kind::Undecided);
        assert_eq!(classify(b"BATON-PEER/2\nxyz", Some(HELLO)), Kind::Peer);
        // Without peers there is no hello to wait for.
        assert_eq!(classify(b"BAT", None), Kind::Plain);
    }

    #[test]
    fn a_client_hello_is_tls() {
        assert_eq!(classify(&[0x16, 0x03, 0x01], Some(HELLO)), Kind::Tls);
        assert_eq!(classify(&[0x16], None), Kind::Tls);
    }

    #[test]
    fn requests_and_garbage_are_plain() {
        for first in [
            &b"A k 1 1\n"[..],
            b"S\n",
            b"\n",
            b"BATON-RAFT/2\n",
            &[0x15, 3],
        ] {
            assert_eq!(classify(first, Some(HELLO)), Kind::Plain, "{first:?}");
        }
    }

    #[test]
    fn the_refusals_are_error_lines() {
        for line in [TLS_REQUIRED, TLS_NOT_SPOKEN] {
            assert!(line.starts_with(b"E ? ? ") && line.ends_with(b"\n"));
            assert_eq!(line.iter().filter(|&&b| b == b'\n').count(), 1);
        }
    }
}
