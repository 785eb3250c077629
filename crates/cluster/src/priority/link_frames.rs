//! How priority messages ride in the frames of a peer link: as many as
//! fit in one frame, each a 4-byte big-endian length and its postcard
//! encoding. One frame per outbox batch costs one encryption, one
//! authentication tag and one wake-up of the receiver instead of one per
//! message (docs/benchmarks.md measures what one encryption per message
//! cost).
//! An empty frame carries no message: it is the reader's sign of life.
//! Messages are postcard as serde derives it; `wire` writes and reads
//! `Commands` by hand, to the same bytes, with fewer copies.

use bytes::Bytes;

use super::messages::{PriorityMessage, MAX_MESSAGE_BYTES};
use super::wire;
use crate::peer::PeerError;

/// Bytes before each message in a frame.
const LENGTH_PREFIX: usize = 4;
/// The largest frame of a priority link: one message of the largest size
/// the engine makes, or several smaller ones.
pub(super) const MAX_FRAME: usize = MAX_MESSAGE_BYTES + LENGTH_PREFIX;

/// One message as it rides in a frame: its 4-byte length, then its
/// postcard encoding. Encoded once, the same bytes go to every peer the
/// message is for (a batch of commands goes to each standby).
pub(super) fn encode(message: &PriorityMessage) -> Result<Bytes, PeerError> {
    // Encoded in place after a length prefix patched afterwards: one copy
    // less than encoding it alone.
    let framed = wire::encode_into(message, vec![0; LENGTH_PREFIX]).map_err(PeerError::Encode)?;
    let len = framed.len() - LENGTH_PREFIX;
    if len > MAX_MESSAGE_BYTES {
        // The engine cuts its messages to this size; a larger one is a
        // bug, which the receiver would refuse with the link.
        debug_assert!(false, "a message of {len} bytes");
        return Err(PeerError::TooLarge {
            len,
            max: MAX_MESSAGE_BYTES,
        });
    }
    let mut framed = framed;
    // Checked just above: at most MAX_MESSAGE_BYTES, far below 4 GiB.
    framed[..LENGTH_PREFIX].copy_from_slice(&(len as u32).to_be_bytes());
    Ok(Bytes::from(framed))
}

/// Packs `messages` (emptied; each from [`encode`]) into as few frames as
/// the cap allows, in order. A lone message is its own frame, uncopied.
pub(super) fn pack(messages: &mut Vec<Bytes>) -> Vec<Bytes> {
    if messages.len() == 1 {
        return std::mem::take(messages);
    }
    let mut frames = Vec::new();
    let mut frame: Vec<u8> = Vec::new();
    for message in messages.drain(..) {
        debug_assert!(
            message.len() <= MAX_FRAME,
            "an encoded message over the cap"
        );
        if !frame.is_empty() && frame.len() + message.len() > MAX_FRAME {
            frames.push(Bytes::from(std::mem::take(&mut frame)));
        }
        frame.extend_from_slice(&message);
    }
    if !frame.is_empty() {
        frames.push(Bytes::from(frame));
    }
    frames
}

/// The messages of one frame, in order; an error if any part of it is
/// malformed (the link is then closed).
pub(super) fn unpack(mut frame: &[u8]) -> Result<Vec<PriorityMessage>, PeerError> {
    let mut messages = Vec::new();
    while !frame.is_empty() {
        let Some((prefix, rest)) = frame.split_first_chunk::<LENGTH_PREFIX>() else {
            return Err(PeerError::Malformed);
        };
        let len = u32::from_be_bytes(*prefix) as usize;
        if len > rest.len() {
            return Err(PeerError::Malformed);
        }
        let (message, rest) = rest.split_at(len);
        messages.push(wire::decode(message).map_err(PeerError::Decode)?);
        frame = rest;
    }
    Ok(messages)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::priority::messages::Heartbeat;
    use crate::priority::PeerRole;

    fn beat(seq: u64) -> PriorityMessage {
        PriorityMessage::Heartbeat(Heartbeat {
            role: PeerRole::Active,
            term: 7,
            seq,
            last_token: 9,
            following: None,
        })
    }

    fn encoded(messages: &[PriorityMessage]) -> Vec<Bytes> {
        messages
            .iter()
            .map(|m| encode(m).expect("encode"))
            .collect()
    }

    #[test]
    fn a_message_is_its_length_then_its_postcard_encoding() {
        let plain = postcard::to_allocvec(&beat(300)).expect("postcard");
        let mut expected = (plain.len() as u32).to_be_bytes().to_vec();
        expected.extend_from_slice(&plain);
        assert_eq!(&encode(&beat(300)).expect("encode")[..], &expected[..]);
        // A frame of several is their concatenation, in order.
        let mut two = encoded(&[beat(1), beat(2)]);
        let frames = pack(&mut two);
        assert_eq!(frames.len(), 1);
        let mut joined = encode(&beat(1)).expect("encode").to_vec();
        joined.extend_from_slice(&encode(&beat(2)).expect("encode"));
        assert_eq!(&frames[0][..], &joined[..]);
    }

    #[test]
    fn a_batch_travels_in_one_frame_and_comes_back_in_order() {
        let mut batch = encoded(&(0..100).map(beat).collect::<Vec<_>>());
        let frames = pack(&mut batch);
        assert!(batch.is_empty());
        assert_eq!(frames.len(), 1);
        let back = unpack(&frames[0]).expect("unpack");
        assert_eq!(back, (0..100).map(beat).collect::<Vec<_>>());
    }

    #[test]
    fn frames_stay_within_the_cap() {
        let one = encode(&beat(u64::MAX)).expect("encode").len();
        let count = MAX_FRAME / one * 3 + 5;
        let mut batch = encoded(&vec![beat(u64::MAX); count]);
        let frames = pack(&mut batch);
        assert_eq!(frames.len(), 4);
        assert!(frames.iter().all(|f| f.len() <= MAX_FRAME));
        let total: usize = frames
            .iter()
            .map(|f| unpack(f).expect("unpack").len())
            .sum();
        assert_eq!(total, count);
    }

    #[test]
    fn malformed_frames_are_refused() {
        let frame = encode(&beat(1)).expect("encode");
        assert!(matches!(unpack(&frame[..3]), Err(PeerError::Malformed)));
        assert!(matches!(
            unpack(&frame[..frame.len() - 1]),
            Err(PeerError::Malformed)
        ));
        let mut bad = frame.to_vec();
        bad.extend_from_slice(&[0, 0, 0, 1, 0xff]);
        assert!(unpack(&bad).is_err());
        assert!(unpack(&[]).expect("an ack").is_empty());
    }
}
