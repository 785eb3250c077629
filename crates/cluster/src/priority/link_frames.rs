//! How priority messages ride in the frames of a peer link: as many as
//! fit in one frame, each a 4-byte big-endian length and its postcard
//! encoding. One frame per outbox batch costs one encryption, one
//! authentication tag and one wake-up of the receiver instead of one per
//! message (measured: encrypting each message alone took 20% of a
//! priority cluster's throughput on one core; see docs/benchmarks.md).
//! An empty frame carries no message: it is the reader's sign of life.

use bytes::Bytes;

use super::messages::{PriorityMessage, MAX_MESSAGE_BYTES};
use crate::peer::PeerError;

/// Bytes before each message in a frame.
const LENGTH_PREFIX: usize = 4;
/// The largest frame of a priority link: one message of the largest size
/// the engine makes, or several smaller ones.
pub(super) const MAX_FRAME: usize = MAX_MESSAGE_BYTES + LENGTH_PREFIX;

/// Packs `messages` (emptied) into as few frames as the cap allows, in
/// order.
pub(super) fn pack(messages: &mut Vec<PriorityMessage>) -> Result<Vec<Bytes>, PeerError> {
    let mut frames = Vec::new();
    let mut frame: Vec<u8> = Vec::new();
    for message in messages.drain(..) {
        // Encoded in place after a length prefix patched afterwards: one
        // copy less per message than encoding it alone.
        let start = frame.len();
        frame.extend_from_slice(&[0; LENGTH_PREFIX]);
        frame = postcard::to_extend(&message, frame).map_err(PeerError::Encode)?;
        let len = frame.len() - start - LENGTH_PREFIX;
        if len > MAX_MESSAGE_BYTES {
            // The engine cuts its messages to this size; a larger one is
            // a bug, which the receiver would refuse with the link.
            debug_assert!(false, "a message of {len} bytes");
            return Err(PeerError::TooLarge {
                len,
                max: MAX_MESSAGE_BYTES,
            });
        }
        // Checked just above: at most MAX_MESSAGE_BYTES, far below 4 GiB.
        frame[start..start + LENGTH_PREFIX].copy_from_slice(&(len as u32).to_be_bytes());
        if frame.len() > MAX_FRAME {
            // This message starts the next frame.
            let next = frame.split_off(start);
            frames.push(Bytes::from(std::mem::replace(&mut frame, next)));
        }
    }
    if !frame.is_empty() {
        frames.push(Bytes::from(frame));
    }
    Ok(frames)
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
        messages.push(postcard::from_bytes(message).map_err(PeerError::Decode)?);
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

    #[test]
    fn a_batch_travels_in_one_frame_and_comes_back_in_order() {
        let mut batch: Vec<_> = (0..100).map(beat).collect();
        let frames = pack(&mut batch).expect("pack");
        assert!(batch.is_empty());
        assert_eq!(frames.len(), 1);
        let back = unpack(&frames[0]).expect("unpack");
        assert_eq!(back, (0..100).map(beat).collect::<Vec<_>>());
    }

    #[test]
    fn frames_stay_within_the_cap() {
        let one = crate::peer::encode(&beat(u64::MAX)).expect("encode").len() + LENGTH_PREFIX;
        let count = MAX_FRAME / one * 3 + 5;
        let mut batch: Vec<_> = (0..count).map(|_| beat(u64::MAX)).collect();
        let frames = pack(&mut batch).expect("pack");
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
        let mut batch = vec![beat(1)];
        let frame = pack(&mut batch).expect("pack").remove(0);
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
