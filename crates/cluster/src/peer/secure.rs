//! The authenticated, encrypted peer channel.
//!
//! After the hello line, the dialling node (initiator) and the dialled
//! node (responder) run the Noise handshake `NNpsk0` with the cluster key
//! as pre-shared key, through `snow`: each side brings a fresh ephemeral
//! key, so every connection has its own session keys, and only a holder
//! of the cluster key can derive them. The initiator learns that the
//! responder holds the key from the responder's handshake message; the
//! responder learns it from the initiator's first frame, which a replayed
//! handshake cannot produce (it needs the ephemeral secret of the
//! original run). The hello line is part of the handshake's prologue, so
//! a priority channel cannot be taken for a Raft one.
//!
//! A responder that holds none of the dialler's keys answers an empty
//! handshake message and hangs up: the dialler's handshake then fails
//! with [`PeerError::WrongKey`] at once, so a node with the wrong key
//! file is told apart from one that is down.
//!
//! Wire format: handshake messages and transport records alike are a
//! 2-byte big-endian length and that many bytes. A transport record
//! decrypts to a flag byte and a chunk of an application frame; frames
//! longer than one Noise message (64 KiB) take several records, and the
//! receiver refuses a frame as soon as it outgrows its limit.

use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_util::codec::{Decoder, Encoder, Framed, FramedParts};

use super::frames::PeerError;
use super::keys::{ClusterKey, ClusterKeys};

/// The Noise protocol: pre-shared key only (no static keys: the cluster
/// key is the identity), X25519, ChaCha20-Poly1305, BLAKE2s.
const NOISE_PARAMS: &str = "Noise_NNpsk0_25519_ChaChaPoly_BLAKE2s";
/// What the prologue starts with, before the hello line.
const PROLOGUE_PREFIX: &[u8] = b"baton peer channel v2\n";
/// Noise's limit on one message, tag included.
const MAX_NOISE_MESSAGE: usize = 65_535;
/// The AEAD tag that ends every encrypted message.
const TAG_LEN: usize = 16;
/// Application bytes in one record, after its flag byte.
const MAX_CHUNK: usize = MAX_NOISE_MESSAGE - TAG_LEN - 1;
/// Longest handshake message accepted: `NNpsk0`'s are 48 bytes.
const MAX_HANDSHAKE_MESSAGE: usize = 256;
/// Record flags: a frame's last chunk, or one with more to follow.
const LAST: u8 = 0;
const MORE: u8 = 1;

/// What the dialled end answers to a handshake made with a key it does
/// not hold: a handshake message of length 0, which no key reads.
const REFUSED_HANDSHAKE: [u8; 2] = [0, 0];

/// The dialled end closes a connection that has not finished the
/// handshake and sent its first frame within this.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// A peer connection past its handshake.
pub type SecureFramed<S> = Framed<S, SecureCodec>;

fn noise_error(error: snow::Error) -> PeerError {
    PeerError::Handshake(error.to_string())
}

fn builder<'a>(prologue: &'a [u8], key: &'a ClusterKey) -> Result<snow::Builder<'a>, PeerError> {
    let params: snow::params::NoiseParams = NOISE_PARAMS.parse().map_err(noise_error)?;
    snow::Builder::new(params)
        .prologue(prologue)
        .and_then(|b| b.psk(0, key.psk()))
        .map_err(noise_error)
}

fn prologue(hello: &[u8]) -> Vec<u8> {
    [PROLOGUE_PREFIX, hello].concat()
}

fn length_prefixed(message: &[u8]) -> Vec<u8> {
    // Handshake messages are far below 64 KiB.
    debug_assert!(message.len() <= MAX_HANDSHAKE_MESSAGE);
    let mut out = Vec::with_capacity(2 + message.len());
    out.extend_from_slice(&(message.len() as u16).to_be_bytes());
    out.extend_from_slice(message);
    out
}

/// Dials the channel over `stream`: writes the hello line and the
/// handshake, checks the responder holds `key`, and sends `first` (the
/// link's hello frame). Frames read later are limited to `max_frame`.
/// The caller bounds it in time.
pub async fn connect<S>(
    mut stream: S,
    hello: &[u8],
    key: &ClusterKey,
    first: Bytes,
    max_frame: usize,
) -> Result<SecureFramed<S>, PeerError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let prologue = prologue(hello);
    let mut noise = builder(&prologue, key)?
        .build_initiator()
        .map_err(noise_error)?;
    let mut message = [0u8; MAX_HANDSHAKE_MESSAGE];
    let len = noise
        .write_message(&[], &mut message)
        .map_err(noise_error)?;
    let mut opening = hello.to_vec();
    opening.extend_from_slice(&length_prefixed(&message[..len]));
    stream.write_all(&opening).await?;
    stream.flush().await?;
    // Read exactly the reply: what follows it belongs to the codec.
    let mut prefix = [0u8; 2];
    stream.read_exact(&mut prefix).await?;
    let len = usize::from(u16::from_be_bytes(prefix));
    if len > MAX_HANDSHAKE_MESSAGE {
        return Err(PeerError::Malformed);
    }
    let mut reply = vec![0u8; len];
    stream.read_exact(&mut reply).await?;
    let mut payload = [0u8; MAX_HANDSHAKE_MESSAGE];
    noise
        .read_message(&reply, &mut payload)
        .map_err(|_| PeerError::WrongKey)?;
    let transport = noise.into_transport_mode().map_err(noise_error)?;
    let mut framed = Framed::new(stream, SecureCodec::new(transport, max_frame));
    framed.send(first).await?;
    Ok(framed)
}

/// Answers the channel on a dialled `stream` whose first bytes, already
/// read into `input`, start with the hello line: runs the handshake with
/// any of `keys` and reads the dialler's first frame (at most
/// `max_first` bytes), all within [`HANDSHAKE_TIMEOUT`]. Returns the
/// channel, its frame limit still `max_first`, and that first frame.
pub async fn accept<S>(
    stream: S,
    input: BytesMut,
    hello: &[u8],
    keys: &ClusterKeys,
    max_first: usize,
) -> Result<(SecureFramed<S>, BytesMut), PeerError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    accept_telling(stream, input, hello, keys, max_first, || {}).await
}

/// [`accept`], calling `key_shown` once the dialler's opening message
/// reads with one of `keys`: a dialler without the key cannot make one
/// (a replayed opening can, but then cannot finish).
pub async fn accept_telling<S>(
    mut stream: S,
    mut input: BytesMut,
    hello: &[u8],
    keys: &ClusterKeys,
    max_first: usize,
    key_shown: impl FnOnce(),
) -> Result<(SecureFramed<S>, BytesMut), PeerError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let handshake = async move {
        if !input.starts_with(hello) {
            return Err(PeerError::NoHello);
        }
        input.advance(hello.len());
        let opening = read_handshake_message(&mut stream, &mut input).await?;
        let Some(noise) = responder(&opening, hello, keys)? else {
            // An empty handshake message says "refused" without a word any
            // key could forge: the dialler finds it cannot read it and
            // learns the node answers but does not share its key (a node
            // that is merely down never answers), rather than seeing a
            // hang-up.
            let _ = stream.write_all(&REFUSED_HANDSHAKE).await;
            let _ = stream.flush().await;
            return Err(PeerError::WrongKey);
        };
        key_shown();
        respond(stream, input, noise, max_first).await
    };
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake).await {
        Ok(result) => result,
        Err(_) => Err(PeerError::HandshakeTimeout),
    }
}

/// The responder of the first of `keys` that reads the dialler's
/// `opening` (`None`: the dialler holds none of them).
fn responder(
    opening: &[u8],
    hello: &[u8],
    keys: &ClusterKeys,
) -> Result<Option<snow::HandshakeState>, PeerError> {
    let prologue = prologue(hello);
    let mut payload = [0u8; MAX_HANDSHAKE_MESSAGE];
    for key in keys.accepted() {
        let mut noise = builder(&prologue, key)?
            .build_responder()
            .map_err(noise_error)?;
        if noise.read_message(opening, &mut payload).is_ok() {
            return Ok(Some(noise));
        }
    }
    Ok(None)
}

/// Ends the handshake `noise` has begun and reads the dialler's first
/// frame, `input` first (at most `max_first` bytes).
async fn respond<S>(
    mut stream: S,
    input: BytesMut,
    mut noise: snow::HandshakeState,
    max_first: usize,
) -> Result<(SecureFramed<S>, BytesMut), PeerError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut message = [0u8; MAX_HANDSHAKE_MESSAGE];
    let len = noise
        .write_message(&[], &mut message)
        .map_err(noise_error)?;
    stream.write_all(&length_prefixed(&message[..len])).await?;
    stream.flush().await?;
    let transport = noise.into_transport_mode().map_err(noise_error)?;
    let mut parts = FramedParts::new::<Bytes>(stream, SecureCodec::new(transport, max_first));
    parts.read_buf = input;
    let mut framed = Framed::from_parts(parts);
    match framed.next().await {
        Some(first) => Ok((framed, first?)),
        None => Err(PeerError::NoHello),
    }
}

/// Reads one length-prefixed handshake message, `input` first.
async fn read_handshake_message<S: AsyncRead + Unpin>(
    stream: &mut S,
    input: &mut BytesMut,
) -> Result<BytesMut, PeerError> {
    loop {
        if input.len() >= 2 {
            let len = usize::from(u16::from_be_bytes([input[0], input[1]]));
            if len > MAX_HANDSHAKE_MESSAGE {
                return Err(PeerError::Malformed);
            }
            if input.len() >= 2 + len {
                input.advance(2);
                return Ok(input.split_to(len));
            }
        }
        if stream.read_buf(input).await? == 0 {
            return Err(PeerError::NoHello);
        }
    }
}

/// Encrypts frames into records and decrypts records back into frames,
/// with the session keys of one handshake.
pub struct SecureCodec {
    transport: snow::TransportState,
    max_frame: usize,
    /// The chunks of a frame whose last record has not come yet.
    partial: BytesMut,
    /// One record's plaintext.
    scratch: Vec<u8>,
}

impl std::fmt::Debug for SecureCodec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecureCodec")
            .field("max_frame", &self.max_frame)
            .finish_non_exhaustive()
    }
}

impl SecureCodec {
    fn new(transport: snow::TransportState, max_frame: usize) -> SecureCodec {
        SecureCodec {
            transport,
            max_frame,
            partial: BytesMut::new(),
            scratch: vec![0u8; MAX_NOISE_MESSAGE],
        }
    }

    /// Sets the largest frame this end accepts.
    pub fn set_max_frame(&mut self, max_frame: usize) {
        self.max_frame = max_frame;
    }
}

impl Decoder for SecureCodec {
    type Item = BytesMut;
    type Error = PeerError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<BytesMut>, PeerError> {
        loop {
            if src.len() < 2 {
                return Ok(None);
            }
            let len = usize::from(u16::from_be_bytes([src[0], src[1]]));
            if len < TAG_LEN + 1 {
                return Err(PeerError::Malformed);
            }
            if src.len() < 2 + len {
                src.reserve(2 + len - src.len());
                return Ok(None);
            }
            let plain = self
                .transport
                .read_message(&src[2..2 + len], &mut self.scratch)
                .map_err(|_| PeerError::Forged)?;
            src.advance(2 + len);
            let Some((&flag, chunk)) = self.scratch[..plain].split_first() else {
                return Err(PeerError::Malformed);
            };
            let total = self.partial.len() + chunk.len();
            if total > self.max_frame {
                return Err(PeerError::TooLarge {
                    len: total,
                    max: self.max_frame,
                });
            }
            self.partial.extend_from_slice(chunk);
            match flag {
                LAST => return Ok(Some(self.partial.split())),
                MORE => continue,
                _ => return Err(PeerError::Malformed),
            }
        }
    }
}

impl Encoder<Bytes> for SecureCodec {
    type Error = PeerError;

    fn encode(&mut self, frame: Bytes, dst: &mut BytesMut) -> Result<(), PeerError> {
        let records = frame.len().div_ceil(MAX_CHUNK).max(1);
        dst.reserve(frame.len() + records * (3 + TAG_LEN));
        let mut rest = &frame[..];
        loop {
            let take = rest.len().min(MAX_CHUNK);
            let (chunk, after) = rest.split_at(take);
            self.scratch[0] = if after.is_empty() { LAST } else { MORE };
            self.scratch[1..=take].copy_from_slice(chunk);
            let start = dst.len();
            dst.resize(start + 2 + 1 + take + TAG_LEN, 0);
            let written = self
                .transport
                .write_message(&self.scratch[..=take], &mut dst[start + 2..])
                .map_err(noise_error)?;
            debug_assert_eq!(written, 1 + take + TAG_LEN);
            dst[start..start + 2].copy_from_slice(&(written as u16).to_be_bytes());
            dst.truncate(start + 2 + written);
            if after.is_empty() {
                return Ok(());
            }
            rest = after;
        }
    }
}

#[cfg(test)]
#[path = "secure_tests.rs"]
mod tests;
